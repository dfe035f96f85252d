"""AES-256-GCM envelopes for credentials, bound to the row they belong to.

Envelope (bytes): version (1) | key id length (1) | key id (ASCII) | nonce (12) | ciphertext+tag.
Associated data: the envelope header followed by the canonical JSON of the
binding (for a connection `{"connection", "provider", "tenant"}`), so a blob
copied to another row, tenant or provider, or given another key id, fails the
tag check. The header is self-delimiting and canonical JSON (sorted keys, no
whitespace) is injective, so two different bindings never yield the same
associated data (a `|`-joined string would: "acme|x"+"c1" == "acme"+"x|c1").

Keys come from TOOLGATE_ENCRYPTION_KEYS, never from SECRET_KEY or the database:
the first key encrypts, every key decrypts. There is no fallback of any kind:
a tampered blob or a key id that is not in the ring raises.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from django.conf import settings

from runner.errors import ToolgateError

ENVELOPE_VERSION = 1
NONCE_BYTES = 12
TAG_BYTES = 16
MAX_KEY_ID_BYTES = 64


class CredentialError(ToolgateError):
    """A credential blob could not be opened. Never carries plaintext or key material."""


class CredentialUndecryptable(CredentialError):
    """The blob is malformed, tampered with, or bound to another row."""


class EncryptionKeyMissing(CredentialError):
    """The blob names a key id that is not in the key ring: an operator must add it back."""

    def __init__(self, key_id: str) -> None:
        super().__init__(
            f"encryption key {key_id!r} is not in TOOLGATE_ENCRYPTION_KEYS; "
            "add it back to the key ring (and run rotate_encryption_keys to retire it safely)"
        )
        self.key_id = key_id


@dataclass(frozen=True, slots=True)
class Sealed:
    blob: bytes
    key_id: str


class KeyRing:
    """Ordered key ids → 32-byte keys; the first encrypts."""

    __slots__ = ("_keys", "primary_key_id")

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        if not keys:
            raise ValueError("a key ring needs at least one key")
        for key_id, key in keys.items():
            if not isinstance(key_id, str) or not key_id.isascii() or not 0 < len(key_id) <= MAX_KEY_ID_BYTES:
                raise ValueError("key ids are 1..64 ASCII characters")
            if not isinstance(key, bytes) or len(key) != 32:
                raise ValueError(f"key {key_id!r} is not 32 bytes")
        self._keys = dict(keys)
        self.primary_key_id = next(iter(self._keys))

    @classmethod
    def from_settings(cls) -> KeyRing:
        """The ring TOOLGATE_KEY_RING names, built (and checked) once per distinct ring.

        The broker opens an envelope on every call; the cache is keyed by the
        ring's (key id, key) pairs in order, so a ring changed in settings (a
        rotation, a test) is a new ring, never a stale one.
        """
        return _ring_of(tuple(settings.TOOLGATE_KEY_RING.items()))

    @property
    def key_ids(self) -> tuple[str, ...]:
        """The ring's key ids, primary first (public names, never key material)."""
        return tuple(self._keys)

    def __contains__(self, key_id: str) -> bool:
        return key_id in self._keys

    def cipher(self, key_id: str) -> AESGCM:
        try:
            return _cipher(self._keys[key_id])
        except KeyError:
            raise EncryptionKeyMissing(key_id) from None

    def __repr__(self) -> str:
        return f"KeyRing(key_ids={list(self._keys)!r})"


@lru_cache(maxsize=8)
def _ring_of(keys: tuple[tuple[str, bytes], ...]) -> KeyRing:
    return KeyRing(dict(keys))


@lru_cache(maxsize=64)
def _cipher(key: bytes) -> AESGCM:
    """One AESGCM object per key: building it costs more than a decrypt."""
    return AESGCM(key)


# json.dumps with any argument builds a new encoder per call, which costs more than
# encoding a binding; one encoder with the same settings writes the same bytes.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def canonical_binding(binding: Mapping[str, str]) -> bytes:
    """Sorted-key, whitespace-free JSON of the binding (keys and values must be strings).

    Keys are checked too: json.dumps would turn a key 1 into "1", and two
    different bindings would share their associated data.
    """
    items = tuple(binding.items())
    if not all(isinstance(key, str) and isinstance(value, str) for key, value in items):
        raise TypeError("binding keys and values must be strings")
    return _canonical(items)


@lru_cache(maxsize=1024)
def _canonical(items: tuple[tuple[str, str], ...]) -> bytes:
    """The encoding of one binding, kept: the broker binds every call to the same few rows.

    Bindings name rows (tenant, connection, provider), never secrets. Only
    all-string items get here, and a string equals only a string, so an entry
    is never returned for a binding the check above would refuse.
    """
    return _CANONICAL.encode(dict(items)).encode()


def envelope_header(key_id: str) -> bytes:
    """The bytes every envelope sealed under `key_id` starts with (rotation finds the others by them)."""
    encoded = key_id.encode("ascii")
    return struct.pack("BB", ENVELOPE_VERSION, len(encoded)) + encoded


def seal(plaintext: bytes, *, binding: Mapping[str, str], ring: KeyRing) -> Sealed:
    """Encrypt under the ring's primary key with a fresh random nonce."""
    key_id = ring.primary_key_id
    header = envelope_header(key_id)
    nonce = os.urandom(NONCE_BYTES)
    ciphertext = ring.cipher(key_id).encrypt(nonce, plaintext, header + canonical_binding(binding))
    return Sealed(blob=header + nonce + ciphertext, key_id=key_id)


def envelope_key_id(blob: bytes) -> str:
    """The key id an envelope names (for rotation and operator messages)."""
    blob = bytes(blob)  # PostgreSQL hands back memoryview, which has no decode()
    if len(blob) < 2 or blob[0] != ENVELOPE_VERSION:
        raise CredentialUndecryptable("credential envelope has an unknown format")
    length = blob[1]
    if length == 0 or len(blob) < 2 + length + NONCE_BYTES + TAG_BYTES:
        raise CredentialUndecryptable("credential envelope is truncated")
    try:
        return blob[2 : 2 + length].decode("ascii")
    except UnicodeDecodeError:
        raise CredentialUndecryptable("credential envelope has an unknown format") from None


def open_sealed(blob: bytes, *, binding: Mapping[str, str], ring: KeyRing) -> bytes:
    """The plaintext, or CredentialError: tampered, truncated, rebound or keyless blobs all raise."""
    blob = bytes(blob)  # PostgreSQL hands back memoryview
    key_id = envelope_key_id(blob)
    cipher = ring.cipher(key_id)
    header_end = 2 + len(key_id)
    nonce = blob[header_end : header_end + NONCE_BYTES]
    ciphertext = blob[header_end + NONCE_BYTES :]
    try:
        return cipher.decrypt(nonce, ciphertext, blob[:header_end] + canonical_binding(binding))
    except InvalidTag:
        raise CredentialUndecryptable("credential does not decrypt for this row (tampered or moved)") from None


def reseal(blob: bytes, *, binding: Mapping[str, str], ring: KeyRing) -> Sealed:
    """The same plaintext sealed again under the ring's primary key (key rotation); CredentialError if
    the blob does not open. The plaintext never leaves this function."""
    return seal(open_sealed(blob, binding=binding, ring=ring), binding=binding, ring=ring)


def seal_json(value: Mapping[str, object], *, binding: Mapping[str, str], ring: KeyRing) -> Sealed:
    return seal(json.dumps(value, separators=(",", ":")).encode(), binding=binding, ring=ring)


def open_json(blob: bytes, *, binding: Mapping[str, str], ring: KeyRing) -> dict[str, object]:
    plaintext = open_sealed(blob, binding=binding, ring=ring)
    try:
        value = json.loads(plaintext)
    except ValueError:
        raise CredentialUndecryptable("credential plaintext is not JSON") from None
    if not isinstance(value, dict):
        raise CredentialUndecryptable("credential plaintext is not an object")
    return value
