"""Canonical definitions, hashes, id mapping, effects and allowlists (pure functions)."""

from __future__ import annotations

import pytest

from gateway.hidden_characters import visible_text
from gateway.upstream.definitions import (
    DefinitionRefused,
    DiscoveryBounds,
    canonical_definition,
    check_definition,
    default_allowlist,
    definition_hash,
    pinned_schema_hash,
    suggested_effect,
    tool_id_for,
    tool_ids_for,
)
from runner.redaction import CONTENT_ALLOWLIST, compile_allowlist, redact
from runner.types import ToolEffect

BASE = {"name": "add", "description": "Add.", "inputSchema": {"type": "object"}}


def test_the_hash_ignores_key_order_and_absent_fields_but_not_content():
    reordered = {
        "inputSchema": {"type": "object"},
        "description": "Add.",
        "name": "add",
        "title": None,
        "_meta": {"x": 1},
    }

    assert definition_hash(BASE) == definition_hash(reordered)
    assert definition_hash(BASE) != definition_hash({**BASE, "description": "Add. "})
    assert definition_hash(BASE) != definition_hash({**BASE, "annotations": {"readOnlyHint": True}})
    assert definition_hash(BASE) != definition_hash({**BASE, "outputSchema": {"type": "object"}})


def test_fitting_names_are_used_as_is_and_others_map_deterministically():
    assert tool_id_for("acme", "create_issue-v2") == "mcp__acme__create_issue-v2"
    mapped = tool_id_for("acme", "files/read")
    assert mapped == tool_id_for("acme", "files/read")
    assert mapped.startswith("mcp__acme__files_read_")
    long = tool_id_for("acme", "x" * 80)
    assert len(long) == 64
    assert long != tool_id_for("acme", "x" * 81)
    assert tool_id_for("acme", "_private").startswith("mcp__acme__private_")


def test_two_names_on_one_id_refuse_the_listing_naming_both(monkeypatch):
    monkeypatch.setattr("gateway.upstream.definitions.MAPPED_HASH_CHARS", 0)

    with pytest.raises(DefinitionRefused) as refused:
        tool_ids_for("acme", ["a.b", "a b"])

    assert "'a.b'" in str(refused.value)
    assert "'a b'" in str(refused.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"inputSchema": {"type": "string"}}, "must be a JSON Schema object of type object"),
        ({"inputSchema": {"type": "object", "properties": {"a": {"$ref": "https://evil/x"}}}}, "remote \\$ref"),
        ({"outputSchema": {"type": "object", "$defs": {"a": {"$dynamicRef": "https://e/x"}}}}, "remote \\$ref"),
        ({"inputSchema": {"type": "object", "properties": {"a": {"type": 5}}}}, "not a valid JSON Schema"),
        ({"inputSchema": {"type": "object", "description": "x" * 70_000}}, "inputSchema over 65536 bytes"),
        ({"name": ""}, "no usable name"),
    ],
)
def test_definitions_outside_the_bounds_are_refused(change, message):
    with pytest.raises(DefinitionRefused, match=message):
        check_definition({**BASE, **change}, DiscoveryBounds())


def test_local_refs_are_fine():
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/n"}}, "$defs": {"n": {"type": "integer"}}}

    check_definition({**BASE, "inputSchema": schema}, DiscoveryBounds())


@pytest.mark.parametrize(
    ("annotations", "effect"),
    [
        (None, ToolEffect.EXTERNAL_SIDE_EFFECT),
        ({}, ToolEffect.EXTERNAL_SIDE_EFFECT),
        ({"readOnlyHint": True}, ToolEffect.READ_ONLY),
        ({"readOnlyHint": False, "openWorldHint": False}, ToolEffect.STATE_CHANGE),
        ({"destructiveHint": True}, ToolEffect.EXTERNAL_SIDE_EFFECT),
    ],
)
def test_hints_suggest_an_effect_and_no_hints_mean_the_most_restrictive(annotations, effect):
    assert suggested_effect(annotations) is effect


def test_the_default_allowlist_keeps_declared_leaves_and_drops_the_rest():
    schema = {
        "type": "object",
        "properties": {
            "number": {"type": "integer"},
            "labels": {"type": "array", "items": {"type": "string"}},
            "owner": {"type": "object", "properties": {"login": {"type": "string"}}},
            "items": {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer"}}}},
            "blob": {"type": "object"},
        },
    }
    paths = default_allowlist(schema)
    value = {
        "number": 1,
        "labels": ["a"],
        "owner": {"login": "o", "token": "t"},
        "items": [{"id": 1, "secret": 2}],
        "blob": {"k": "v"},
        "extra": "dropped",
    }

    assert paths == ("items[].id", "labels", "number", "owner.login")
    assert redact(value, compile_allowlist(paths)) == {
        "items": [{"id": 1}],
        "labels": ["a"],
        "number": 1,
        "owner": {"login": "o"},
    }
    assert default_allowlist(None) == CONTENT_ALLOWLIST  # every field of every block type
    assert {"content[].type", "content[].text", "content[].data", "content[].resource.blob"} <= set(CONTENT_ALLOWLIST)


def test_nul_characters_are_refused_before_any_database_sees_them():
    with pytest.raises(DefinitionRefused, match="NUL"):
        check_definition({**BASE, "description": "a\x00b"}, DiscoveryBounds())


@pytest.mark.parametrize(
    ("char", "what"),
    [
        ("\u202e", "right-to-left override"),
        ("\u202a", "left-to-right embedding"),
        ("\u2066", "left-to-right isolate"),
        ("\u200e", "left-to-right mark"),
        ("\u061c", "Arabic letter mark"),
        ("\u200b", "zero-width space"),
        ("\u200d", "zero-width joiner"),
        ("\u2060", "word joiner"),
        ("\ufeff", "byte order mark"),
        ("\U000e0041", "tag latin capital letter A (ASCII smuggling)"),
        ("\u2028", "line separator"),
        ("\u3164", "Hangul filler"),
        ("\x1b", "escape"),
        ("\U000e0100", "variation selector 17"),
    ],
)
def test_hidden_characters_in_descriptions_and_titles_are_written_out(char, what):
    raw = {"name": "t", "title": f"a{char}b", "description": f"x{char}y", "inputSchema": {"type": "object"}}

    definition = canonical_definition(raw)

    code_point = f"[U+{ord(char):04X}]"
    assert (definition["title"], definition["description"]) == (f"a{code_point}b", f"x{code_point}y"), what
    assert definition_hash(raw) == definition_hash(definition)  # the hash covers what agents are shown


def test_tabs_line_breaks_and_ordinary_text_are_kept_as_they_are():
    text = "Line one.\n\tIndented — naïve café, 東京, emoji 🙂."

    assert visible_text(text) == text


PINNED_BEFORE_ICONS = {
    "name": "add",
    "title": "Add",
    "description": "Add two integers.",
    "inputSchema": {"type": "object", "properties": {"a": {"type": "integer"}}},
    "annotations": {"readOnlyHint": True},
}


def test_pins_of_tools_without_icons_keep_the_hashes_they_had_before_icons_were_pinned():
    # the hashes this definition had when the definition's fields did not include icons
    assert definition_hash(PINNED_BEFORE_ICONS) == "1477deb9fc2508423308c6256f3d7002f1f079aadf354873f8d33fac24bb072a"
    assert (
        pinned_schema_hash(
            tool_id="mcp__acme__add",
            definition=PINNED_BEFORE_ICONS,
            effect="read_only",
            provider=None,
            requires_connection=False,
        )
        == "91eee32c4910147941fb7b7fe31305f872e4278481332306ba7f45bc96186e5c"
    )


def test_icons_are_part_of_the_pinned_definition():
    with_icons = {**PINNED_BEFORE_ICONS, "icons": [{"src": "https://example.com/a.png"}]}
    other_icons = {**PINNED_BEFORE_ICONS, "icons": [{"src": "https://evil.example/a.png"}]}

    assert canonical_definition(with_icons)["icons"] == [{"src": "https://example.com/a.png"}]
    assert len({definition_hash(d) for d in (PINNED_BEFORE_ICONS, with_icons, other_icons)}) == 3


@pytest.mark.parametrize(
    "icons",
    [
        "https://example.com/a.png",
        [{"mimeType": "image/png"}],
        [{"src": 7}],
        [{"src": "https://example.com/a.png"}] * 17,
        [{"src": "x" * 70_000}],
    ],
)
def test_unusable_icons_refuse_the_definition(icons):
    with pytest.raises(DefinitionRefused, match="icon"):
        check_definition({**PINNED_BEFORE_ICONS, "icons": icons}, DiscoveryBounds())
