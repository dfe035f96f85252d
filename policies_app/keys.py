"""The secrets Toolgate hands out, one shape for all: `<marker>_<prefix>_<secret>`, stored as prefix + sha256 digest.

Four kinds share it, told apart by their marker: service-account API keys (`tg_`), subject tokens of
on-behalf-of calls (`tgs_`), and MCP sign-in's access (`tga_`) and refresh (`tgr_`) tokens. The prefix
finds the row; the digest, compared in constant time, proves the secret. Only the digest is stored.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, field

# The longest value worth looking at; anything longer is not a token (answered like a forged one).
TOKEN_MAX_LENGTH = 128


@dataclass(frozen=True, slots=True)
class NewKey:
    key: str  # shown once, never stored
    prefix: str
    digest: str


@dataclass(frozen=True)
class TokenKind:
    """One kind of secret: its marker, how a new one is made, how a presented one is recognised."""

    marker: str
    pattern: re.Pattern[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pattern", re.compile(rf"^{self.marker}_([A-Za-z0-9]{{12}})_([A-Za-z0-9_-]{{43}})$"))

    def generate(self) -> NewKey:
        prefix = secrets.token_hex(6)
        key = f"{self.marker}_{prefix}_{secrets.token_urlsafe(32)}"
        return NewKey(key=key, prefix=prefix, digest=key_digest(key))

    def prefix_of(self, token: str) -> str | None:
        """The lookup prefix of a well-formed token of this kind, None for anything else (another kind included)."""
        if len(token) > TOKEN_MAX_LENGTH:
            return None
        match = self.pattern.match(token)
        return match.group(1) if match else None


API_KEY = TokenKind("tg")
SUBJECT_TOKEN = TokenKind("tgs")
ACCESS_TOKEN = TokenKind("tga")
REFRESH_TOKEN = TokenKind("tgr")

# The names the services call.
key_generate = API_KEY.generate
key_prefix = API_KEY.prefix_of
subject_token_generate = SUBJECT_TOKEN.generate
subject_token_prefix = SUBJECT_TOKEN.prefix_of
access_token_generate = ACCESS_TOKEN.generate
access_token_prefix = ACCESS_TOKEN.prefix_of
refresh_token_generate = REFRESH_TOKEN.generate
refresh_token_prefix = REFRESH_TOKEN.prefix_of


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def key_matches(key: str, digest: str) -> bool:
    return hmac.compare_digest(key_digest(key), digest)


CONSENT_CODE_PATTERN = r"^[A-Za-z0-9_-]{43}$"  # what consent_code_generate makes: 32 random bytes, base64url


def consent_code_generate() -> tuple[str, str]:
    """A one-time consent code and its digest (only the digest is stored)."""
    code = secrets.token_urlsafe(32)
    return code, key_digest(code)


def pkce_s256(verifier: str) -> str:
    """The S256 challenge of a PKCE verifier (RFC 7636): base64url(sha256(verifier)) without padding."""
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
