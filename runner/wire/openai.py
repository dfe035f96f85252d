"""OpenAI Chat Completions function-calling wire format: an adapter, not a core type.

The runner speaks `ToolSpec` and `ToolExecResult` (runner/types.py). This
module is the only place that knows Chat Completions' shapes, so another
provider's format is another adapter beside it (registered in
runner/wire/codecs.py), never a change to the core types:

- `encode_tools` turns specs into the `tools[]` a request sends, nothing more.
- `decode_message_tool_calls` reads the `tool_calls` of an assistant
  `message` into `DecodedCall`s. Arguments that are not a JSON object become
  `MalformedArgs` with a fixed message and no trace of the raw text: a model
  may echo secrets or user data there, and a call is logged and audited.
- `encode_tool_result` writes the tool message fed back to the model,
  including error results, so the model can correct itself instead of the run
  halting.

Standard library and the runner package only: no Django, no HTTP client.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from runner.types import ToolExecResult, ToolSpec
from runner.wire.blocks import answer_payload, block_text
from runner.wire.common import (
    Answer,
    DecodedCall,
    WireCodec,
    WireFormatError,
    optional_mapping,
    optional_str,
    parse_arguments,
    plain_copy,
)

__all__ = ["CODEC", "decode_message_tool_calls", "encode_tool", "encode_tool_result", "encode_tools"]


# --- encoder -------------------------------------------------------------------


def encode_tool(spec: ToolSpec) -> dict[str, Any]:
    """One `tools[]` entry; `parameters` is a copy, so a caller editing the request cannot alter the spec."""
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": plain_copy(spec.input_schema),
        },
    }


def encode_tools(specs: Iterable[ToolSpec]) -> list[dict[str, Any]]:
    """The request's `tools[]` for the catalog's specs, in the order given."""
    return [encode_tool(spec) for spec in specs]


# --- decoder -------------------------------------------------------------------


def decode_message_tool_calls(message: Any) -> list[DecodedCall]:
    """The calls of a (non-streamed) assistant message, in order; `WireFormatError` if it is not one.

    Every entry is checked to be a function tool call before any is read, so a
    turn with several faults is refused for the same one whatever else it holds.
    """
    if not isinstance(message, Mapping):
        raise WireFormatError("message must be an object")
    tool_calls = message.get("tool_calls")
    if tool_calls is None:
        return []
    if not isinstance(tool_calls, list):
        raise WireFormatError("message.tool_calls must be a list")
    for index, tool_call in enumerate(tool_calls):
        where = f"message.tool_calls[{index}]"
        if not isinstance(tool_call, Mapping):
            raise WireFormatError(f"{where} must be an object")
        if tool_call.get("type", "function") != "function":
            raise WireFormatError(f"{where} is not a function tool call")
    return [_decoded(tool_call, f"message.tool_calls[{index}]") for index, tool_call in enumerate(tool_calls)]


def _decoded(tool_call: Mapping[str, Any], where: str) -> DecodedCall:
    call_id = optional_str(tool_call.get("id"), f"{where}.id")
    function = optional_mapping(tool_call.get("function"), f"{where}.function")
    name = optional_str(function.get("name"), f"{where}.function.name")
    arguments = optional_str(function.get("arguments"), f"{where}.function.arguments")
    return DecodedCall(where=where, call_id=call_id or "", name=name or "", args=parse_arguments(arguments or ""))


# --- tool result ---------------------------------------------------------------


def encode_tool_result(result: ToolExecResult, *, tool_call_id: str | None = None) -> dict[str, Any]:
    """The `role: tool` message answering one call; `tool_call_id` is the model's id when it differs from ours.

    A tool that answered content blocks (an upstream MCP tool, a tool's own
    error for the model) is answered with one text part per block: a tool
    message carries text parts only, so other blocks say what they were.
    """
    content = answer_payload(result, lambda block: {"type": "text", "text": block_text(block)})
    return {"role": "tool", "tool_call_id": tool_call_id or result.tool_call_id, "content": content}


def encode_results(answers: Sequence[Answer]) -> list[dict[str, Any]]:
    """One tool message per call, in the turn's order."""
    return [encode_tool_result(result, tool_call_id=call_id) for call_id, result in answers]


CODEC = WireCodec(
    name="openai",
    catalog_doc="Chat Completions function tools",
    turn_doc="the Chat Completions `message` (with `tool_calls`)",
    encode_tools=encode_tools,
    decode_turn=decode_message_tool_calls,
    encode_results=encode_results,
)
