"""The four kinds of secret Toolgate hands out share one shape, and each recognises only its own."""

from __future__ import annotations

import pytest

from policies_app import keys

KINDS = {
    "tg": (keys.key_generate, keys.key_prefix),
    "tgs": (keys.subject_token_generate, keys.subject_token_prefix),
    "tga": (keys.access_token_generate, keys.access_token_prefix),
    "tgr": (keys.refresh_token_generate, keys.refresh_token_prefix),
}


@pytest.mark.parametrize("marker", list(KINDS))
def test_a_new_secret_is_marked_found_by_its_prefix_and_proved_by_its_digest(marker):
    generate, prefix_of = KINDS[marker]

    new = generate()

    assert new.key.startswith(f"{marker}_{new.prefix}_")
    assert len(new.key) == len(marker) + 1 + 12 + 1 + 43
    assert prefix_of(new.key) == new.prefix
    assert keys.key_matches(new.key, new.digest)
    assert not keys.key_matches(new.key + "x", new.digest)
    assert new.digest == keys.key_digest(new.key)


@pytest.mark.parametrize("marker", list(KINDS))
def test_a_kind_refuses_the_others_and_anything_malformed(marker):
    _, prefix_of = KINDS[marker]
    others = [generate().key for other, (generate, _) in KINDS.items() if other != marker]
    own = KINDS[marker][0]().key

    assert [prefix_of(token) for token in others] == [None, None, None]
    assert prefix_of(own[:-1]) is None
    assert prefix_of(own + "A") is None
    assert prefix_of(own.replace("_", "-", 1)) is None
    assert prefix_of(own + "A" * keys.TOKEN_MAX_LENGTH) is None
    assert prefix_of("") is None
