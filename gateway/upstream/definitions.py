"""Upstream tool definitions: canonical form, hashes, bounds, id mapping, effects.

Pure functions (no Django, no I/O), so discovery, approval, binding and policy
files all agree byte for byte on what "the same definition" means.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema_rs
from jsonschema import validators
from jsonschema.exceptions import SchemaError as JsonSchemaError
from jsonschema.protocols import Validator
from referencing import Registry

from gateway.hidden_characters import is_hidden_character, visible_text
from runner.contracts import TOOL_ID_MAX_LENGTH
from runner.redaction import CONTENT_ALLOWLIST
from runner.schema import canonical_json
from runner.types import ToolEffect

SERVER_SLUG_PATTERN = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
SERVER_SLUG_MAX_LENGTH = 32
# A name used as is must fit OpenAI's function-name alphabet and the tool id pattern.
DIRECT_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
MAPPED_HASH_CHARS = 8
# The fields of an upstream tool that make up its definition: what an operator reviews and pins.
# `icons` joined later: absent fields are left out of the hash, so pins of tools without icons
# kept their hash; a tool whose upstream lists icons is seen as changed once (quarantined for review).
DEFINITION_FIELDS = ("name", "title", "description", "inputSchema", "outputSchema", "annotations", "icons")
MAX_ICONS = 16
REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")
EFFECT_STRICTNESS = {ToolEffect.READ_ONLY: 0, ToolEffect.STATE_CHANGE: 1, ToolEffect.EXTERNAL_SIDE_EFFECT: 2}


class DefinitionRefused(ValueError):
    """An upstream definition (or listing) that must not be stored; the message names the tool."""


@dataclass(frozen=True, slots=True)
class DiscoveryBounds:
    """What one server's listing may hold; over any bound the whole discovery fails, nothing changes."""

    max_tools: int = 500
    max_pages: int = 50
    max_description_chars: int = 8_192
    max_schema_bytes: int = 65_536
    total_timeout_s: float = 30.0


# The free-text fields a model reads; `annotations.title` too.
TEXT_FIELDS = ("title", "description")


def canonical_definition(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The reviewed fields of a listed tool, absent ones left out (so null and missing hash alike).

    Hidden characters in the title, description and annotations' title are written out
    visibly here, so the pinned definition (and its hash) is exactly what agents are shown.
    """
    definition = {key: raw[key] for key in DEFINITION_FIELDS if raw.get(key) is not None}
    for key in TEXT_FIELDS:
        if isinstance(definition.get(key), str):
            definition[key] = visible_text(definition[key])
    annotations = definition.get("annotations")
    if isinstance(annotations, Mapping) and isinstance(annotations.get("title"), str):
        definition["annotations"] = {**annotations, "title": visible_text(annotations["title"])}
    return definition


def definition_hash(definition: Mapping[str, Any]) -> str:
    """sha256 hex of the canonical definition: equal hashes, equal definitions."""
    return hashlib.sha256(canonical_json(canonical_definition(definition))).hexdigest()


def pinned_schema_hash(
    *, tool_id: str, definition: Mapping[str, Any], effect: str, provider: str | None, requires_connection: bool
) -> str:
    """The Tool row's `schema_hash` (policy files pin it): the definition plus what Toolgate adds to it.

    The operator's effect is part of it, so tightening an effect is a reviewable change in git too.
    """
    payload = {
        "name": tool_id,
        "upstream": canonical_definition(definition),
        "effect": effect,
        "provider": provider,
        "requires_connection": requires_connection,
    }
    return hashlib.sha256(canonical_json(payload)).hexdigest()


def check_definition(raw: Mapping[str, Any], bounds: DiscoveryBounds) -> None:
    """Refuse a definition over the bounds, with a remote `$ref`, or with an invalid schema."""
    name = raw.get("name")
    if not isinstance(name, str) or not name or len(name) > 512:
        raise DefinitionRefused("a listed tool has no usable name")
    label = safe_label(name)
    if any(is_hidden_character(char) for char in name):
        raise DefinitionRefused(f"tool {label}: the name contains invisible or bidirectional control characters")
    if b"\\u0000" in canonical_json(canonical_definition(raw)):
        raise DefinitionRefused(f"tool {label}: the definition contains NUL characters")
    description = raw.get("description") or ""
    if not isinstance(description, str) or len(description) > bounds.max_description_chars:
        raise DefinitionRefused(f"tool {label}: description over {bounds.max_description_chars} characters")
    title = raw.get("title") or ""
    if not isinstance(title, str) or len(title) > bounds.max_description_chars:
        raise DefinitionRefused(f"tool {label}: title over {bounds.max_description_chars} characters")
    input_schema = raw.get("inputSchema")
    if not isinstance(input_schema, Mapping) or input_schema.get("type") != "object":
        raise DefinitionRefused(f"tool {label}: inputSchema must be a JSON Schema object of type object")
    for key in ("inputSchema", "outputSchema", "annotations"):
        _check_part(raw.get(key), key, label, bounds)
    _check_icons(raw.get("icons"), label, bounds)


def _check_icons(icons: Any, label: str, bounds: DiscoveryBounds) -> None:
    """Icons are a short list of objects with a string `src`, within the schema bound."""
    if icons is None:
        return
    if not isinstance(icons, list) or len(icons) > MAX_ICONS:
        raise DefinitionRefused(f"tool {label}: icons must be a list of at most {MAX_ICONS} icons")
    if not all(isinstance(icon, Mapping) and isinstance(icon.get("src"), str) for icon in icons):
        raise DefinitionRefused(f"tool {label}: every icon must be an object with a string src")
    if len(canonical_json(icons)) > bounds.max_schema_bytes:
        raise DefinitionRefused(f"tool {label}: icons over {bounds.max_schema_bytes} bytes")


def _check_part(value: Any, key: str, label: str, bounds: DiscoveryBounds) -> None:
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise DefinitionRefused(f"tool {label}: {key} must be an object")
    if len(canonical_json(value)) > bounds.max_schema_bytes:
        raise DefinitionRefused(f"tool {label}: {key} over {bounds.max_schema_bytes} bytes")
    if key == "annotations":
        return
    for ref in _refs(value):
        if not ref.startswith("#"):
            raise DefinitionRefused(f"tool {label}: {key} has a remote $ref (refused, never fetched)")
    try:
        compile_validator(value)
    except JsonSchemaError:
        raise DefinitionRefused(f"tool {label}: {key} is not a valid JSON Schema") from None


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key in REF_KEYWORDS and isinstance(value, str):
                yield value
            elif key in REF_KEYWORDS:
                yield ""  # a non-string $ref is as unusable as a remote one
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def compile_validator(schema: Mapping[str, Any]) -> Validator:
    """A validator compiled once per definition, with an empty registry: nothing is ever fetched."""
    validator_class = validators.validator_for(schema)
    validator_class.check_schema(schema)
    validator: Validator = validator_class(schema, registry=Registry())
    return validator


@dataclass(frozen=True, slots=True)
class PinnedSchema:
    """A pinned JSON Schema, compiled once: python-jsonschema's answer, and a quick yes from jsonschema-rs.

    Every upstream call validates its arguments and its answer against the
    pinned schemas, and nearly every one is valid. python-jsonschema walks a
    small schema in about 20 µs in a loop and over 100 µs inside a request;
    jsonschema-rs (Rust) says yes in under 1 µs. Only its yes is used: a
    schema whose keywords could mean something else to it than to
    python-jsonschema (patterns, formats' checks, references, dialect-specific
    keywords) gets no quick check, and every refusal, with its paths and
    messages, still comes from python-jsonschema. A property test holds the two
    to the same yes on the schemas that get one.
    """

    validator: Validator
    quick: Any = None  # a jsonschema-rs validator, or None: python-jsonschema alone decides

    def accepts_quickly(self, instance: Any) -> bool:
        """True only when `instance` is certainly valid; False says nothing (ask `validator`)."""
        if self.quick is None:
            return False
        try:
            return bool(self.quick.is_valid(instance))
        except Exception:  # whatever the Rust side cannot take, python-jsonschema decides
            return False


def compile_pinned(schema: Mapping[str, Any]) -> PinnedSchema:
    """The pinned schema's validator, with a quick check when every keyword in it is one both libraries share."""
    validator = compile_validator(schema)
    quick_class = _QUICK_DIALECTS.get(type(validator).__name__)
    if quick_class is None or not _quick_safe(schema):
        return PinnedSchema(validator)
    try:
        return PinnedSchema(validator, quick_class(schema, validate_formats=False, offline=True))
    except Exception:  # a schema jsonschema-rs refuses gets no quick check
        return PinnedSchema(validator)


_QUICK_DIALECTS = {
    "Draft202012Validator": jsonschema_rs.Draft202012Validator,
    "Draft201909Validator": jsonschema_rs.Draft201909Validator,
    "Draft7Validator": jsonschema_rs.Draft7Validator,
    "Draft6Validator": jsonschema_rs.Draft6Validator,
}
# Keywords both libraries read the same way (a test checks it); with any other, python-jsonschema alone decides.
_QUICK_ANNOTATIONS = frozenset(
    {"$schema", "$comment", "title", "description", "default", "examples", "readOnly", "writeOnly", "deprecated"}
)
_QUICK_VALUES = frozenset(
    {
        "type", "enum", "const", "required", "format",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
        "minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties",
    }
)  # fmt: skip
_QUICK_SUBSCHEMA = frozenset({"additionalProperties", "items", "not"})
_QUICK_SUBSCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})


def _quick_safe(schema: Any, depth: int = 0) -> bool:
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, Mapping) or depth > 32:
        return False
    for key, value in schema.items():
        if key in _QUICK_ANNOTATIONS or key in _QUICK_VALUES:
            continue
        if key in _QUICK_SUBSCHEMA:
            safe = _quick_safe(value, depth + 1)
        elif key in _QUICK_SUBSCHEMA_LISTS:
            safe = isinstance(value, list) and all(_quick_safe(item, depth + 1) for item in value)
        elif key == "properties":
            safe = isinstance(value, Mapping) and all(_quick_safe(item, depth + 1) for item in value.values())
        else:
            safe = False
        if not safe:
            return False
    return True


def safe_label(name: str, limit: int = 80) -> str:
    """An upstream name fit for a message or a log line: printable ASCII, bounded."""
    cleaned = "".join(ch if 32 <= ord(ch) < 127 else "?" for ch in name)
    return repr(cleaned[:limit] + ("…" if len(cleaned) > limit else ""))


def server_tool_id_prefix(slug: str) -> str:
    """What every tool id of one server starts with: a policy's `mcp__<slug>__*` allows them all."""
    return f"mcp__{slug}__"


def tool_id_for(slug: str, upstream_name: str) -> str:
    """`mcp__<slug>__<name>`, or a deterministic mapping when the name does not fit.

    A name outside `[A-Za-z0-9_-]` (or starting with `_`/`-`), or an id over 64
    characters, becomes its sanitised prefix plus 8 hex digits of the name's
    sha256: stable across runs, and different names almost never meet (when
    they do, discovery refuses naming both).
    """
    prefix = server_tool_id_prefix(slug)
    direct = prefix + upstream_name
    if DIRECT_NAME_PATTERN.match(upstream_name) and len(direct) <= TOOL_ID_MAX_LENGTH:
        return direct
    digest = hashlib.sha256(upstream_name.encode("utf-8", "surrogatepass")).hexdigest()[:MAPPED_HASH_CHARS]
    sanitised = re.sub(r"[^A-Za-z0-9_-]", "_", upstream_name).lstrip("_-")
    room = TOOL_ID_MAX_LENGTH - len(prefix) - MAPPED_HASH_CHARS - 1
    stem = sanitised[:room].rstrip("_-") or "tool"
    return f"{prefix}{stem}_{digest}"


def tool_ids_for(slug: str, names: Iterable[str]) -> dict[str, str]:
    """upstream name -> tool id for one listing; two names on one id refuse the listing, naming both."""
    ids: dict[str, str] = {}
    owners: dict[str, str] = {}
    for name in names:
        tool_id = tool_id_for(slug, name)
        if tool_id in owners:
            raise DefinitionRefused(
                f"tools {safe_label(owners[tool_id])} and {safe_label(name)} both map to the id {tool_id}"
            )
        owners[tool_id] = name
        ids[name] = tool_id
    return ids


def suggested_effect(annotations: Mapping[str, Any] | None) -> ToolEffect:
    """What the upstream's hints suggest; an operator confirms it or picks a stricter effect.

    Hints are untrusted and default to the most dangerous reading (MCP's own
    defaults: not read-only, destructive, open world), so no hints means
    `external_side_effect`.
    """
    hints = annotations or {}
    if hints.get("readOnlyHint") is True:
        return ToolEffect.READ_ONLY
    if hints.get("openWorldHint") is False:
        return ToolEffect.STATE_CHANGE
    return ToolEffect.EXTERNAL_SIDE_EFFECT


def at_least_as_strict(effect: ToolEffect, floor: ToolEffect) -> bool:
    return EFFECT_STRICTNESS[effect] >= EFFECT_STRICTNESS[floor]


def stricter(first: ToolEffect, second: ToolEffect) -> ToolEffect:
    return first if EFFECT_STRICTNESS[first] >= EFFECT_STRICTNESS[second] else second


def default_allowlist(output_schema: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The redaction allowlist a pinned definition gets: every declared field, else the content blocks.

    The output schema's top-level properties, expanded to their declared leaves
    (the runner refuses a path that selects a whole object); an object without
    declared properties has no field anyone reviewed and is dropped.
    """
    if not output_schema or not isinstance(output_schema.get("properties"), Mapping):
        return CONTENT_ALLOWLIST
    paths: list[str] = []
    _leaf_paths(output_schema, "", paths, depth=0)
    return tuple(paths)


def _leaf_paths(schema: Mapping[str, Any], path: str, out: list[str], *, depth: int) -> None:
    if depth > 8:
        return
    properties = schema.get("properties")
    if isinstance(properties, Mapping) and properties:
        for name, child in sorted(properties.items()):
            if isinstance(name, str) and "." not in name and "[" not in name and isinstance(child, Mapping):
                _leaf_paths(child, f"{path}.{name}" if path else name, out, depth=depth + 1)
        return
    kind = schema.get("type")
    if kind == "array" or (isinstance(kind, list) and "array" in kind):
        items = schema.get("items")
        if isinstance(items, Mapping) and isinstance(items.get("properties"), Mapping):
            _leaf_paths(items, f"{path}[]", out, depth=depth + 1)
        elif path and not (isinstance(items, Mapping) and _is_object(items)):
            out.append(path)  # a list of scalars is kept whole by a leaf path
        return
    if path and not _is_object(schema):
        out.append(path)


def _is_object(schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind)
