"""OpenAI Responses API function-calling wire format: an adapter beside runner/wire/openai.py.

The Responses API flattens a function tool (`{"type": "function", "name",
"description", "parameters", "strict"}`, no nested `function`), returns calls
as `function_call` items of the response's `output` list, and takes results
as `function_call_output` items of the next request's `input`. This module is
the only place that knows those shapes.

`strict` is true only when the schema is one OpenAI's strict mode accepts as
is: every object closed and every property required, and only keywords strict
mode supports. Anything else is sent with `strict: false`, because a schema
rewritten to fit strict mode (optional fields made nullable) would no longer be
the schema the runner validates against.

Standard library and the runner package only: no Django, no HTTP client.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from runner.types import ToolExecResult, ToolSpec
from runner.wire.blocks import answer_payload, block_text, is_image
from runner.wire.common import (
    Answer,
    DecodedCall,
    WireCodec,
    listed,
    optional_str,
    parse_arguments,
    plain_copy,
    typed_items,
)

__all__ = [
    "CODEC",
    "STRICT_KEYWORDS",
    "decode_output_function_calls",
    "encode_tool",
    "encode_tool_result",
    "encode_tools",
    "strict_compatible",
]

# Keywords OpenAI's strict mode (Structured Outputs) supports; any other keyword means strict: false.
STRICT_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "description",
        "$defs",
        "$ref",
        "anyOf",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
    }
)
# Keywords whose value maps names to subschemas (the names are data, not keywords).
_SCHEMA_MAPS = ("properties", "$defs")


# --- encoder -------------------------------------------------------------------


def encode_tool(spec: ToolSpec) -> dict[str, Any]:
    """One flat function tool of a Responses request; `parameters` is a copy the caller may edit."""
    return {
        "type": "function",
        "name": spec.name,
        "description": spec.description,
        "parameters": plain_copy(spec.input_schema),
        "strict": strict_compatible(spec.input_schema),
    }


def encode_tools(specs: Iterable[ToolSpec]) -> list[dict[str, Any]]:
    """The request's `tools[]` for the catalog's specs, in the order given."""
    return [encode_tool(spec) for spec in specs]


def strict_compatible(schema: Mapping[str, Any]) -> bool:
    """Whether strict mode accepts `schema` unchanged: closed objects, all properties required, known keywords."""
    if schema.get("type") != "object":
        return False
    return _strict_node(schema)


def _strict_node(node: Any) -> bool:
    if isinstance(node, list):
        return all(_strict_node(item) for item in node)
    if not isinstance(node, Mapping):
        return True
    if not STRICT_KEYWORDS.issuperset(node):
        return False
    types = node.get("type")
    is_object = types == "object" or (isinstance(types, list) and "object" in types)
    if is_object or "properties" in node:
        properties = node.get("properties", {})
        if node.get("additionalProperties") is not False:
            return False
        if not isinstance(properties, Mapping) or set(node.get("required", [])) != set(properties):
            return False
    for key, value in node.items():
        if key in _SCHEMA_MAPS:
            if not isinstance(value, Mapping) or not all(_strict_node(child) for child in value.values()):
                return False
        elif key in ("items", "anyOf", "additionalProperties") and not _strict_node(value):
            return False
    return True


# --- decoder -------------------------------------------------------------------


def decode_output_function_calls(output: Sequence[Any]) -> list[DecodedCall]:
    """The `function_call` items of a response's `output` list, in order.

    The call's id is the item's `call_id`, the id a `function_call_output`
    answers (the item's own `id`, `fc_...`, names the output item instead).
    Other items (reasoning, messages) are skipped.
    """
    return [
        _decoded(index, where, item)
        for index, where, item in typed_items(output, name="output", item_type="function_call")
    ]


def _decoded(index: int, where: str, item: Mapping[str, Any]) -> DecodedCall:
    call_id = optional_str(item.get("call_id"), f"{where}.call_id")
    name = optional_str(item.get("name"), f"{where}.name")
    arguments = optional_str(item.get("arguments"), f"{where}.arguments")
    args = parse_arguments(arguments or "")
    return DecodedCall(where=f"message[{index}]", call_id=call_id or "", name=name or "", args=args)


def decode_turn(message: Any) -> list[DecodedCall]:
    """The calls of a Responses turn: its `output` list, or the whole response holding one."""
    return decode_output_function_calls(
        listed(message, "output", "message must be a response's output list (or an object with one)")
    )


# --- tool result ---------------------------------------------------------------


def encode_tool_result(result: ToolExecResult, *, call_id: str | None = None) -> dict[str, Any]:
    """The `function_call_output` input item answering one call; errors are answered too.

    A tool that answered content blocks is answered with the output's list
    form: `input_image` parts (data URLs) for images, `input_text` for the rest.
    """
    return {
        "type": "function_call_output",
        "call_id": call_id or result.tool_call_id,
        "output": answer_payload(result, _output_part),
    }


def _output_part(block: Mapping[str, Any]) -> dict[str, Any]:
    if is_image(block):
        return {"type": "input_image", "image_url": f"data:{block['mimeType']};base64,{block['data']}"}
    return {"type": "input_text", "text": block_text(block)}


def encode_results(answers: Sequence[Answer]) -> list[dict[str, Any]]:
    """One `function_call_output` item per call, in the turn's order."""
    return [encode_tool_result(result, call_id=call_id) for call_id, result in answers]


CODEC = WireCodec(
    name="openai_responses",
    catalog_doc="Responses API function tools",
    turn_doc="the response's `output` list (or the response)",
    encode_tools=encode_tools,
    decode_turn=decode_turn,
    encode_results=encode_results,
)
