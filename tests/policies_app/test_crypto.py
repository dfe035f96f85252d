"""Credential envelopes: what opens, what never opens, and what an operator sees when a key is missing.

The envelope must fail closed in every way it can be damaged (each byte, each
truncation), moved (tenant, connection, provider) or relabelled (key id), and
always with a CredentialError: never another exception, never plaintext. Key
rotation is walked with real rows through the key ring setting.
"""

from __future__ import annotations

import hashlib
import json
import re
from itertools import product

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.crypto import (
    CredentialError,
    CredentialUndecryptable,
    EncryptionKeyMissing,
    KeyRing,
    canonical_binding,
    envelope_key_id,
    open_json,
    open_sealed,
    seal,
    seal_json,
)

OLD_KEY = hashlib.sha256(b"toolgate test key: old").digest()
NEW_KEY = hashlib.sha256(b"toolgate test key: new").digest()
SECRET = "ghp_s3cr3t-value-that-must-never-leak"
BINDING = {"tenant": "7", "connection": "0b7c9a52-4d4e-4f43-9c41-3c1b3f1f4a10", "provider": "github"}
MISSING_OLD = (
    "encryption key 'old' is not in TOOLGATE_ENCRYPTION_KEYS; "
    "add it back to the key ring (and run rotate_encryption_keys to retire it safely)"
)


def sealed_secret(ring: KeyRing | None = None) -> bytes:
    return seal_json({"api_key": SECRET}, binding=BINDING, ring=ring or KeyRing({"k1": OLD_KEY})).blob


def with_key_id(blob: bytes, key_id: str) -> bytes:
    """The same envelope with another key id written into its header."""
    old_length = blob[1]
    encoded = key_id.encode("ascii")
    return bytes([blob[0], len(encoded)]) + encoded + blob[2 + old_length :]


# --- the envelope ------------------------------------------------------------------------


def test_round_trip_and_layout():
    ring = KeyRing({"k1": OLD_KEY})

    sealed = seal_json({"api_key": SECRET, "n": [1, 2]}, binding=BINDING, ring=ring)

    assert sealed.key_id == "k1"
    assert sealed.blob[:4] == b"\x01\x02k1"  # version, key id length, key id
    assert envelope_key_id(sealed.blob) == envelope_key_id(memoryview(sealed.blob)) == "k1"
    assert SECRET.encode() not in sealed.blob
    assert len(sealed.blob) == 4 + 12 + len(b'{"api_key":"' + SECRET.encode() + b'","n":[1,2]}') + 16
    assert open_json(sealed.blob, binding=BINDING, ring=ring) == {"api_key": SECRET, "n": [1, 2]}
    assert open_json(memoryview(sealed.blob), binding=BINDING, ring=ring) == {"api_key": SECRET, "n": [1, 2]}


def test_every_single_byte_flip_fails_with_a_credential_error():
    # "k0" is in the ring too: a key id flipped from "k1" to "k0" names a real key and must still fail.
    ring = KeyRing({"k1": OLD_KEY, "k0": NEW_KEY})
    blob = sealed_secret(ring)
    kinds = set()

    for index, mask in product(range(len(blob)), (0x01, 0x80, 0xFF)):
        damaged = bytearray(blob)
        damaged[index] ^= mask
        with pytest.raises(CredentialError) as caught:
            open_json(bytes(damaged), binding=BINDING, ring=ring)
        assert SECRET not in str(caught.value)
        kinds.add(type(caught.value))

    assert kinds == {CredentialUndecryptable, EncryptionKeyMissing}


def test_every_truncation_and_any_extension_fails_with_a_credential_error():
    ring = KeyRing({"k1": OLD_KEY})
    blob = sealed_secret(ring)

    for length in range(len(blob)):
        with pytest.raises(CredentialUndecryptable) as caught:
            open_json(blob[:length], binding=BINDING, ring=ring)
        assert SECRET not in str(caught.value)
    for suffix in (b"\x00", b"x" * 16):
        with pytest.raises(CredentialUndecryptable):
            open_json(blob + suffix, binding=BINDING, ring=ring)


@pytest.mark.parametrize(
    "moved",
    [
        {**BINDING, "tenant": "8"},
        {**BINDING, "connection": "0b7c9a52-4d4e-4f43-9c41-3c1b3f1f4a11"},
        {**BINDING, "provider": "gitlab"},
        {"tenant": BINDING["tenant"], "connection": BINDING["connection"]},
        {**BINDING, "extra": ""},
    ],
    ids=["other tenant", "other connection", "other provider", "provider dropped", "field added"],
)
def test_a_blob_opens_only_for_its_own_binding(moved):
    ring = KeyRing({"k1": OLD_KEY})

    with pytest.raises(
        CredentialUndecryptable, match=r"^credential does not decrypt for this row \(tampered or moved\)$"
    ):
        open_json(sealed_secret(ring), binding=moved, ring=ring)


def test_an_edited_key_id_fails_even_when_it_names_the_same_key():
    # "k1-copy" holds the very same key: only the header in the associated data tells them apart.
    ring = KeyRing({"k1": OLD_KEY, "k2": NEW_KEY, "k1-copy": OLD_KEY})
    blob = sealed_secret(ring)
    assert open_json(blob, binding=BINDING, ring=ring) == {"api_key": SECRET}

    for key_id in ("k2", "k1-copy"):
        with pytest.raises(CredentialUndecryptable):
            open_json(with_key_id(blob, key_id), binding=BINDING, ring=ring)
    with pytest.raises(EncryptionKeyMissing) as missing:
        open_json(with_key_id(blob, "k9"), binding=BINDING, ring=ring)
    assert missing.value.key_id == "k9"


def test_nonces_are_random():
    ring = KeyRing({"k1": OLD_KEY})

    first = seal(b"same plaintext", binding=BINDING, ring=ring).blob
    second = seal(b"same plaintext", binding=BINDING, ring=ring).blob

    assert first != second
    assert first[4:16] != second[4:16]  # the nonces themselves
    assert open_sealed(first, binding=BINDING, ring=ring) == open_sealed(second, binding=BINDING, ring=ring)


# --- associated data -----------------------------------------------------------------------


def test_pipe_joined_bindings_that_would_collide_do_not():
    # "acme|x" + "|" + "c1" == "acme" + "|" + "x|c1": a joined string cannot tell these apart.
    first = {"tenant": "acme|x", "connection": "c1", "provider": "github"}
    second = {"tenant": "acme", "connection": "x|c1", "provider": "github"}
    ring = KeyRing({"k1": OLD_KEY})
    blob = seal(b"secret", binding=first, ring=ring).blob

    assert canonical_binding(first) != canonical_binding(second)
    with pytest.raises(CredentialUndecryptable):
        open_sealed(blob, binding=second, ring=ring)


bindings = st.dictionaries(st.text(max_size=12), st.text(max_size=12), max_size=4)


@given(first=bindings, second=bindings)
def test_canonical_binding_is_injective(first, second):
    if first != second:
        assert canonical_binding(first) != canonical_binding(second)
    else:
        assert canonical_binding(first) == canonical_binding(second)


@given(binding=bindings)
def test_canonical_binding_decodes_back_to_the_binding(binding):
    """A left inverse exists, which is what makes the encoding injective."""
    assert canonical_binding(binding).isascii()
    assert json.loads(canonical_binding(binding)) == binding


@pytest.mark.parametrize("binding", [{"tenant": 7}, {7: "x"}, {"tenant": None}])
def test_bindings_hold_strings_only(binding):
    # A key 7 would be written as "7" by json.dumps and share its associated data with {"7": ...}.
    with pytest.raises(TypeError, match=r"^binding keys and values must be strings$"):
        canonical_binding(binding)


# --- the key ring ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({}, "a key ring needs at least one key"),
        ({"k1": OLD_KEY[:31]}, "key 'k1' is not 32 bytes"),
        ({"k1": OLD_KEY.hex()[:32]}, "key 'k1' is not 32 bytes"),
        ({"": OLD_KEY}, "key ids are 1..64 ASCII characters"),
        ({"k" * 65: OLD_KEY}, "key ids are 1..64 ASCII characters"),
        ({"clé": OLD_KEY}, "key ids are 1..64 ASCII characters"),
    ],
)
def test_key_ring_refuses_malformed_keys(keys, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        KeyRing(keys)


def test_key_ring_encrypts_with_its_first_key_and_never_shows_keys():
    ring = KeyRing({"k2": NEW_KEY, "k1": OLD_KEY})

    assert ring.primary_key_id == "k2"
    assert seal(b"x", binding=BINDING, ring=ring).key_id == "k2"
    assert ("k1" in ring, "k3" in ring) == (True, False)
    assert repr(ring) == "KeyRing(key_ids=['k2', 'k1'])"


def test_the_ring_from_settings_follows_every_change_of_the_setting(settings):
    """The broker's ring is built once per distinct ring: a rotation (new primary, key dropped) is never missed."""
    settings.TOOLGATE_KEY_RING = {"old": OLD_KEY}
    first = KeyRing.from_settings()
    sealed_old = seal(b"x", binding=BINDING, ring=first).blob

    settings.TOOLGATE_KEY_RING = {"new": NEW_KEY, "old": OLD_KEY}
    rotated = KeyRing.from_settings()
    assert (first.key_ids, rotated.key_ids) == (("old",), ("new", "old"))
    assert open_sealed(sealed_old, binding=BINDING, ring=rotated) == b"x"

    settings.TOOLGATE_KEY_RING["old"] = NEW_KEY  # edited in place, not replaced
    with pytest.raises(CredentialUndecryptable):
        open_sealed(sealed_old, binding=BINDING, ring=KeyRing.from_settings())

    settings.TOOLGATE_KEY_RING = {"new": NEW_KEY}
    with pytest.raises(EncryptionKeyMissing):
        open_sealed(sealed_old, binding=BINDING, ring=KeyRing.from_settings())
