"""Allowlist redaction: only named output fields leave the runner, and unsafe shapes fail."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.errors import RedactionError
from runner.redaction import carries_credential, compile_allowlist, credential_fragments, redact, secret_fragments

CANARY = "ghp_CANARY_5f1c0e7a9b2d4c6e"


def redact_with(paths: list[str], output: Any) -> Any:
    return redact(output, compile_allowlist(paths))


# --- compile_allowlist ---------------------------------------------------------------


def test_compile_allowlist_builds_a_trie_with_list_segments() -> None:
    trie = compile_allowlist(["login", "owner.login", "owner.id", "labels[].name", "tags[]", "matrix[][]"])

    assert trie == {
        "login": {},
        "owner": {"login": {}, "id": {}},
        "labels": {"[]": {"name": {}}},
        "tags": {"[]": {}},
        "matrix": {"[]": {"[]": {}}},
    }


@pytest.mark.parametrize("path", ["", "a..b", ".a", "a.", "[]", "a.[]", "a.[].b", "[][]"])
def test_compile_allowlist_refuses_a_malformed_path(path: str) -> None:
    with pytest.raises(RedactionError) as excinfo:
        compile_allowlist(["login", path])

    assert str(excinfo.value) == f"malformed allowlist path {path!r}"


# --- what is kept ------------------------------------------------------------------


def test_redact_keeps_a_nested_field_and_drops_its_siblings() -> None:
    output = {"login": "octocat", "id": 1, "owner": {"login": "github", "id": 9, "email": "ops@example.com"}}

    assert redact_with(["login", "owner.login"], output) == {"login": "octocat", "owner": {"login": "github"}}


def test_redact_keeps_a_field_of_every_object_in_a_list() -> None:
    output = {"labels": [{"name": "bug", "color": "red"}, {"name": "ui", "id": 3}, {"color": "blue"}]}

    assert redact_with(["labels[].name"], output) == {"labels": [{"name": "bug"}, {"name": "ui"}, {}]}


@pytest.mark.parametrize("path", ["tags[]", "tags"])
def test_redact_keeps_a_list_of_scalars(path: str) -> None:
    output = {"tags": ["a", 1, 2.5, True, None], "other": ["x"]}

    assert redact_with([path], output) == {"tags": ["a", 1, 2.5, True, None]}


def test_redact_keeps_a_list_of_lists_named_with_two_brackets() -> None:
    output = {"matrix": [[1, 2], [], [3]], "other": 1}

    assert redact_with(["matrix[][]"], output) == {"matrix": [[1, 2], [], [3]]}


def test_redact_follows_deep_nesting() -> None:
    # given
    output = {
        "a": {"b": {"c": [{"d": 1, "e": 2}, {"d": [1, 2]}, {"e": 3}], "z": 0}, "x": 1},
        "y": 2,
    }

    # when
    result = redact_with(["a.b.c[].d"], output)

    # then
    assert result == {"a": {"b": {"c": [{"d": 1}, {"d": [1, 2]}, {}]}}}


def test_redact_leaves_missing_optional_keys_absent() -> None:
    result = redact_with(["login", "name", "owner.login", "labels[].name"], {"login": "octocat"})

    assert result == {"login": "octocat"}


def test_redact_keeps_null_where_an_object_was_expected() -> None:
    assert redact_with(["owner.login", "labels[].name"], {"owner": None, "labels": None}) == {
        "owner": None,
        "labels": None,
    }


def test_redact_strips_unknown_keys_at_every_level() -> None:
    # given an upstream that echoes the request's credentials back
    output = {
        "login": "octocat",
        "authorization": f"Bearer {CANARY}",
        "headers": {"Authorization": f"token {CANARY}"},
        "owner": {"login": "github", "token": CANARY},
        "labels": [{"name": "bug", "secret": CANARY}],
    }

    # when
    result = redact_with(["login", "owner.login", "labels[].name"], output)

    # then
    assert result == {"login": "octocat", "owner": {"login": "github"}, "labels": [{"name": "bug"}]}
    assert CANARY not in json.dumps(result)


def test_redact_does_not_modify_the_output_it_was_given() -> None:
    output = {"tags": ["a"], "owner": {"login": "github", "id": 9}}

    result = redact_with(["tags", "owner.login"], output)
    result["tags"].append("b")

    assert output == {"tags": ["a"], "owner": {"login": "github", "id": 9}}


# --- what is refused ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "output", "where"),
    [
        ("owner", {"owner": {"login": "github"}}, "owner"),
        ("labels", {"labels": [{"name": "bug"}]}, "labels"),
        ("labels[]", {"labels": [{"name": "bug"}]}, "labels[]"),
        ("a.b", {"a": {"b": {"c": 1}}}, "a.b"),
        ("matrix", {"matrix": [[1]]}, "matrix"),
    ],
)
def test_redact_refuses_a_path_that_ends_on_an_object(path: str, output: dict[str, Any], where: str) -> None:
    with pytest.raises(RedactionError) as excinfo:
        redact_with([path], output)

    assert str(excinfo.value) == f"allowlist path {where} selects a whole object; name its fields"


@pytest.mark.parametrize(
    ("path", "output", "where"),
    [
        ("owner.login", {"owner": "github"}, "owner"),
        ("owner.login", {"owner": [{"login": "github"}]}, "owner"),
        ("labels[].name", {"labels": [{"name": "bug"}, "ui"]}, "labels[]"),
    ],
)
def test_redact_refuses_an_output_of_another_shape(path: str, output: dict[str, Any], where: str) -> None:
    with pytest.raises(RedactionError) as excinfo:
        redact_with([path], output)

    assert str(excinfo.value) == f"output at {where} does not have the shape the allowlist expects"


def test_redact_refuses_a_tool_without_allowlist() -> None:
    with pytest.raises(RedactionError) as excinfo:
        redact({"login": "octocat"}, None)

    assert str(excinfo.value) == "tool has no redaction allowlist"


@pytest.mark.parametrize("output", [["login"], "octocat", 1, None])
def test_redact_refuses_an_output_that_is_not_an_object(output: Any) -> None:
    with pytest.raises(RedactionError) as excinfo:
        redact_with(["login"], output)

    assert str(excinfo.value) == "tool output is not an object"


# --- properties ----------------------------------------------------------------------

KEYS = st.sampled_from(["a", "b", "c"])
JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet="xyz", max_size=4)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(KEYS, children, max_size=3),
    max_leaves=12,
)
SEGMENTS = st.builds(lambda key, brackets: key + "[]" * brackets, KEYS, st.integers(min_value=0, max_value=2))
PATHS = st.lists(SEGMENTS, min_size=1, max_size=3).map(".".join)


def key_names(value: Any) -> set[str]:
    """Every object key at any depth."""
    if isinstance(value, dict):
        return set(value).union(*(key_names(child) for child in value.values()))
    if isinstance(value, list):
        return set().union(*(key_names(child) for child in value))
    return set()


def segment_name(segment: str) -> str:
    return re.sub(r"(\[\])+$", "", segment)


@given(output=st.dictionaries(KEYS, JSON_VALUES, max_size=3), paths=st.lists(PATHS, min_size=1, max_size=4))
def test_redact_keeps_only_allowlisted_names_and_is_idempotent(output: dict[str, Any], paths: list[str]) -> None:
    allowlist = compile_allowlist(paths)
    try:
        once = redact(output, allowlist)
    except RedactionError:
        return  # an unsafe shape is refused, which is the other half of the contract

    assert set(once) <= {segment_name(path.split(".")[0]) for path in paths}
    assert key_names(once) <= {segment_name(segment) for path in paths for segment in path.split(".")}
    assert redact(once, allowlist) == once


# --- credential echo: the forms a secret can be given away in ---------------------------------------

SECRET = "lin_api_7Hq2Zr9Xw4Kp1Vb8"


def _encodings_inside_blobs(secret: str) -> list[str]:
    """The secret base64-encoded inside larger blobs, at every byte offset, in both alphabets."""
    blobs = []
    for before in range(4):
        for after in range(3):
            data = b"x" * before + secret.encode() + b"!" * after
            blobs += [base64.b64encode(data).decode(), base64.urlsafe_b64encode(data).decode().rstrip("=")]
    return blobs


@pytest.mark.parametrize(
    "echo",
    [
        SECRET,
        f"Bearer {SECRET}",
        " ".join(SECRET[i : i + 4] for i in range(0, len(SECRET), 4)),  # space-split
        "\n".join(SECRET[i : i + 5] for i in range(0, len(SECRET), 5)),  # line-wrapped
        *_encodings_inside_blobs(SECRET),
        " ".join(base64.b64encode(SECRET.encode()).decode()),  # base64, then spaced out
    ],
)
def test_an_echoed_credential_is_found_in_every_form(echo: str) -> None:
    fragments = credential_fragments({"Authorization": f"Bearer {SECRET}"}, SECRET)

    assert carries_credential({"content": [{"type": "text", "text": f"here: {echo} (done)"}]}, fragments)
    assert carries_credential({echo: 1}, secret_fragments([SECRET]))  # keys too, for a bare secret list


def test_text_without_the_credential_is_not_taken_for_it() -> None:
    fragments = credential_fragments({"Authorization": f"Bearer {SECRET}"}, SECRET)
    others = [
        "Bearer token expired; sign in again",
        base64.b64encode(b"lin_api_ another value entirely").decode(),
        SECRET[:-1] + "X",
    ]

    assert not any(carries_credential(text, fragments) for text in others)
    assert secret_fragments(["short", "  ", ""]) == frozenset()  # too short to tell from ordinary text
