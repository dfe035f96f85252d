"""Service-account API keys: `tg_<prefix>_<secret>`, stored as prefix + sha256 digest."""

from __future__ import annotations

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
