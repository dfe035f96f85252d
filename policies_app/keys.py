"""Service-account API keys: `tg_<prefix>_<secret>`, stored as prefix + sha256 digest."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

KEY_PATTERN = re.compile(r"^tg_([A-Za-z0-9]{12})_([A-Za-z0-9_-]{43})$")


@dataclass(frozen=True, slots=True)
class NewKey:
    key: str  # shown once, never stored
    prefix: str
    digest: str


def key_generate() -> NewKey:
    prefix = secrets.token_hex(6)
    key = f"tg_{prefix}_{secrets.token_urlsafe(32)}"
    return NewKey(key=key, prefix=prefix, digest=key_digest(key))


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def key_prefix(key: str) -> str | None:
    """The lookup prefix of a well-formed key, None for anything else."""
    match = KEY_PATTERN.match(key)
    return match.group(1) if match else None


def key_matches(key: str, digest: str) -> bool:
    return hmac.compare_digest(key_digest(key), digest)


# --- subject tokens (on-behalf-of): `tgs_<prefix>_<secret>`, the same shape and digest as API keys ---

SUBJECT_TOKEN_PATTERN = re.compile(r"^tgs_([A-Za-z0-9]{12})_([A-Za-z0-9_-]{43})$")
# The longest header value worth looking at; anything longer is not a token (answered like a forged one).
SUBJECT_TOKEN_MAX_LENGTH = 128


def subject_token_generate() -> NewKey:
    prefix = secrets.token_hex(6)
    token = f"tgs_{prefix}_{secrets.token_urlsafe(32)}"
    return NewKey(key=token, prefix=prefix, digest=key_digest(token))


def subject_token_prefix(token: str) -> str | None:
    """The lookup prefix of a well-formed subject token, None for anything else."""
    if len(token) > SUBJECT_TOKEN_MAX_LENGTH:
        return None
    match = SUBJECT_TOKEN_PATTERN.match(token)
    return match.group(1) if match else None


CONSENT_CODE_PATTERN = r"^[A-Za-z0-9_-]{43}$"  # what consent_code_generate makes: 32 random bytes, base64url


def consent_code_generate() -> tuple[str, str]:
    """A one-time consent code and its digest (only the digest is stored)."""
    code = secrets.token_urlsafe(32)
    return code, key_digest(code)


def pkce_s256(verifier: str) -> str:
    """The S256 challenge of a PKCE verifier (RFC 7636): base64url(sha256(verifier)) without padding."""
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


# --- MCP sign-in (OAuth 2.1): access `tga_<prefix>_<secret>`, refresh `tgr_<prefix>_<secret>` ---

ACCESS_TOKEN_PATTERN = re.compile(r"^tga_([A-Za-z0-9]{12})_([A-Za-z0-9_-]{43})$")
REFRESH_TOKEN_PATTERN = re.compile(r"^tgr_([A-Za-z0-9]{12})_([A-Za-z0-9_-]{43})$")


def access_token_generate() -> NewKey:
    prefix = secrets.token_hex(6)
    token = f"tga_{prefix}_{secrets.token_urlsafe(32)}"
    return NewKey(key=token, prefix=prefix, digest=key_digest(token))


def refresh_token_generate() -> NewKey:
    prefix = secrets.token_hex(6)
    token = f"tgr_{prefix}_{secrets.token_urlsafe(32)}"
    return NewKey(key=token, prefix=prefix, digest=key_digest(token))


def access_token_prefix(token: str) -> str | None:
    """The lookup prefix of a well-formed access token, None for anything else (an API key included)."""
    if len(token) > SUBJECT_TOKEN_MAX_LENGTH:
        return None
    match = ACCESS_TOKEN_PATTERN.match(token)
    return match.group(1) if match else None


def refresh_token_prefix(token: str) -> str | None:
    if len(token) > SUBJECT_TOKEN_MAX_LENGTH:
        return None
    match = REFRESH_TOKEN_PATTERN.match(token)
    return match.group(1) if match else None
