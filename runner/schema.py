"""Contract -> ToolSpec: compile the input model to a restricted JSON Schema.

The subset is what every model provider understands and what we can reason
about: closed objects, local `$defs` references only, no combinators or
conditionals. A connection id never appears among a tool's arguments: it travels
out of band in the invocation context, so the schema refuses any property that
looks like one. All of this is checked once, at registration.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from runner.contracts import ToolContract
from runner.errors import ContractError, SchemaError
from runner.redaction import LIST_SEGMENT, Trie, compile_allowlist
from runner.types import ToolSpec

FORBIDDEN_KEYWORDS = frozenset(
    {"oneOf", "anyOf", "allOf", "not", "if", "then", "else", "patternProperties", "dependentSchemas"}
)
LOCAL_REF_PREFIX = "#/$defs/"
# `connectionId`, `connection_id`, `conn-ids`, `ConnectionRef`, `connection_uuid`, `connections`...
# once case and separators go.
CONNECTION_LIKE = re.compile(r"^conn(ection)?s?(id|ids|identifiers?|uuids?|refs?)?$")
# Keywords whose value maps names to subschemas (the names themselves are data).
SCHEMA_MAPS = ("properties", "$defs")
SCHEMA_LISTS = ("prefixItems",)
SCHEMA_VALUES = ("items", "additionalProperties", "contains", "propertyNames")
# How many `$ref`s deep a redacted output schema is inlined; deeper (recursive models) accepts anything.
MAX_INLINE_DEPTH = 16


class _ToolJsonSchema(GenerateJsonSchema):
    """Pydantic's generator, minus the constructs the subset forbids.

    `X | None` becomes `{"type": [x, "null"]}` instead of `anyOf`, and titles
    (noise for a model) are left out.
    """

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        inner = self.generate_inner(schema["schema"])
        inner_type = inner.get("type")
        if isinstance(inner_type, str) and "$ref" not in inner:
            nullable = {**inner, "type": [inner_type, "null"]}
            # An enum (or const) must list null too, or the schema refuses what the model accepts.
            if "const" in nullable:
                nullable["enum"] = [nullable.pop("const")]
            if "enum" in nullable and None not in nullable["enum"]:
                nullable["enum"] = [*nullable["enum"], None]
            return nullable
        return super().nullable_schema(schema)

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def generate(self, schema: Any, mode: Any = "validation") -> JsonSchemaValue:
        result = super().generate(schema, mode=mode)
        result.pop("title", None)
        for definition in result.get("$defs", {}).values():
            definition.pop("title", None)
        return result


def compile_input_schema(contract: ToolContract) -> dict[str, Any]:
    """The contract's input model as a checked, closed JSON Schema."""
    schema = contract.input_model.model_json_schema(schema_generator=_ToolJsonSchema)
    check_schema_subset(schema, tool_id=contract.name)
    return schema


def check_schema_subset(schema: Mapping[str, Any], *, tool_id: str) -> None:
    """Raise SchemaError naming the first construct outside the subset."""
    if schema.get("type") != "object":
        raise SchemaError(f"{tool_id}: input schema must be an object")
    for path, node in _walk(schema, "#"):
        forbidden = FORBIDDEN_KEYWORDS.intersection(node)
        if forbidden:
            raise SchemaError(f"{tool_id}: {path} uses forbidden keyword {sorted(forbidden)[0]}")
        ref = node.get("$ref")
        if ref is not None and not (isinstance(ref, str) and ref.startswith(LOCAL_REF_PREFIX)):
            raise SchemaError(f"{tool_id}: {path} has a non-local $ref")
        if _is_object(node) and node.get("additionalProperties") is not False:
            raise SchemaError(f"{tool_id}: {path} is an open object (additionalProperties must be false)")
        for name in node.get("properties", {}):
            if CONNECTION_LIKE.match(re.sub(r"[^a-z]", "", name.lower())):
                raise SchemaError(
                    f"{tool_id}: {path} declares {name!r}; connection ids travel in the context, never in args"
                )


def _is_object(node: Mapping[str, Any]) -> bool:
    node_type = node.get("type")
    return node_type == "object" or (isinstance(node_type, list) and "object" in node_type)


def _walk(node: Mapping[str, Any], path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every subschema with its JSON pointer-ish path (property names are not descended as schemas)."""
    yield path, node
    for keyword in SCHEMA_MAPS:
        for name, child in node.get(keyword, {}).items():
            if isinstance(child, Mapping):
                yield from _walk(child, f"{path}/{keyword}/{name}")
    for keyword in SCHEMA_LISTS:
        for index, child in enumerate(node.get(keyword, [])):
            if isinstance(child, Mapping):
                yield from _walk(child, f"{path}/{keyword}/{index}")
    for keyword in SCHEMA_VALUES:
        child = node.get(keyword)
        if isinstance(child, Mapping):
            yield from _walk(child, f"{path}/{keyword}")


def canonical_json(value: Any) -> bytes:
    """One byte string per JSON value, whatever the key order: the basis of every hash."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def schema_hash(
    *,
    name: str,
    description: str,
    input_schema: Mapping[str, Any],
    effect: str,
    requires_connection: bool,
    provider: str | None,
) -> str:
    """Stable across runs and processes: sha256 of the spec's canonical JSON."""
    payload = {
        "name": name,
        "description": description,
        "input_schema": input_schema,
        "effect": effect,
        "requires_connection": requires_connection,
        "provider": provider,
    }
    return hashlib.sha256(canonical_json(payload)).hexdigest()


def compile_output_schema(contract: ToolContract) -> dict[str, Any] | None:
    """The schema of what a caller receives: the output model cut to the redaction allowlist.

    Not the output model itself: redaction drops every field the allowlist does
    not name, and a client that validates the value against the model's schema
    (MCP clients check `structuredContent` against `outputSchema`) would refuse
    a value missing a required field that was cut. None when the tool names no
    allowlist: its calls never answer a value.
    """
    if contract.redaction_allowlist is None:
        return None
    full = contract.output_model.model_json_schema(schema_generator=_ToolJsonSchema, mode="serialization")
    return redacted_schema(full, compile_allowlist(contract.redaction_allowlist))


def redacted_schema(schema: Mapping[str, Any], allowlist: Trie) -> dict[str, Any]:
    """`schema` cut to the paths of `allowlist`, self-contained (local `$ref`s inlined).

    Mirrors runner.redaction: kept objects are closed and list only the named
    fields (required where the model requires them), lists keep their item
    schema cut the same way, and a leaf keeps its whole schema.
    """
    if not allowlist:  # redaction refuses every value: no field can come back
        return {"type": "object", "properties": {}, "additionalProperties": False}
    return _cut(schema, allowlist, schema.get("$defs", {}))


def _cut(node: Mapping[str, Any], allowlist: Trie, defs: Mapping[str, Any]) -> dict[str, Any]:
    node = _resolve_ref(node, defs)
    if not allowlist:
        leaf: dict[str, Any] = _inline_refs(node, defs, MAX_INLINE_DEPTH)
        return leaf
    alternatives = node.get("anyOf", node.get("oneOf"))
    if isinstance(alternatives, list):  # e.g. an optional nested model: [{"$ref": ...}, {"type": "null"}]
        return {"anyOf": [_cut(alternative, allowlist, defs) for alternative in alternatives]}
    kept: dict[str, Any] = {key: node[key] for key in ("type", "description") if key in node}
    node_types = node.get("type")
    types = set(node_types) if isinstance(node_types, list) else {node_types}
    if "object" in types or "properties" in node:
        properties = node.get("properties", {})
        extra = node.get("additionalProperties")
        undeclared = extra if isinstance(extra, Mapping) else {}
        fields = {
            name: _cut(properties.get(name, undeclared), child, defs)
            for name, child in allowlist.items()
            if name != LIST_SEGMENT
        }
        kept["properties"] = fields
        required = [name for name in node.get("required", []) if name in fields]
        if required:
            kept["required"] = required
        kept["additionalProperties"] = False
    if LIST_SEGMENT in allowlist and ("array" in types or "items" in node):
        items = node.get("items")
        kept["items"] = _cut(items if isinstance(items, Mapping) else {}, allowlist[LIST_SEGMENT], defs)
    return kept


def _resolve_ref(node: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any]:
    """Follow a local `$ref` (siblings of the ref win); an unresolvable one accepts anything."""
    for _ in range(MAX_INLINE_DEPTH):
        ref = node.get("$ref")
        if not isinstance(ref, str):
            return node
        target = defs.get(ref.removeprefix(LOCAL_REF_PREFIX)) if ref.startswith(LOCAL_REF_PREFIX) else None
        if not isinstance(target, Mapping):
            return {}
        node = {**target, **{key: value for key, value in node.items() if key != "$ref"}}
    return {}


def _inline_refs(value: Any, defs: Mapping[str, Any], depth: int) -> Any:
    if isinstance(value, list):
        return [_inline_refs(item, defs, depth) for item in value]
    if not isinstance(value, Mapping):
        return value
    if isinstance(value.get("$ref"), str):
        if depth == 0:
            return {}
        return _inline_refs(_resolve_ref(value, defs), defs, depth - 1)
    return {key: _inline_refs(item, defs, depth) for key, item in value.items() if key != "$defs"}


def to_tool_spec(contract: ToolContract) -> ToolSpec:
    """Compile a contract into the ToolSpec every executor and wire adapter uses."""
    input_schema = compile_input_schema(contract)
    _check_allowlist_roots(contract)
    return ToolSpec(
        name=contract.name,
        description=contract.description,
        input_schema=input_schema,
        effect=contract.effect,
        requires_connection=contract.requires_connection,
        provider=contract.provider,
        schema_hash=schema_hash(
            name=contract.name,
            description=contract.description,
            input_schema=input_schema,
            effect=contract.effect.value,
            requires_connection=contract.requires_connection,
            provider=contract.provider,
        ),
        output_schema=compile_output_schema(contract),
        consequence_level=contract.consequence_level,
        requires_confirmation=contract.requires_confirmation,
        tags=contract.tags,
        version=contract.version,
        title=contract.title,
    )


def _check_allowlist_roots(contract: ToolContract) -> None:
    """An allowlist naming a field the output model lacks is a typo that would strip real data."""
    if contract.redaction_allowlist is None:
        return
    fields = contract.output_model.model_fields
    for path in contract.redaction_allowlist:
        root = path.split(".", 1)[0]
        while root.endswith("[]"):  # `matrix[][]` is a list of lists named `matrix`
            root = root.removesuffix("[]")
        if root not in fields:
            raise ContractError(f"{contract.name}: redaction path {path!r} names no output field")
