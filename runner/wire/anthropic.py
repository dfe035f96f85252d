"""Anthropic Messages tool-use wire format: an adapter beside runner/wire/openai.py.

The runner speaks `ToolSpec` and `ToolExecResult`; this module is the only
place that knows the Messages API's shapes:

- `encode_tools` turns specs into the request's `tools[]`: exactly `name`,
  `description` and `input_schema`. The native ToolSpec's `effect`,
  `requires_connection` and `provider` are Toolgate's governance data; the SDK
  would pass them through unchanged to an API that refuses unknown keys.
- `decode_content_tool_uses` reads the `tool_use` blocks of an assistant
  `content` list. An input that is not a JSON object becomes `MalformedArgs`
  with the fixed message and no raw text, as in the OpenAI adapter.
- `encode_tool_results` writes the `user` turn of `tool_result` blocks that
  answers an assistant turn, errors included (`is_error: true`), so the model
  can correct itself.

Standard library and the runner package only: no Django, no HTTP client.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from runner.types import MalformedArgs, ToolExecResult, ToolSpec
from runner.wire.blocks import ANTHROPIC_IMAGE_TYPES, answer_payload, block_text, is_image
from runner.wire.common import (
    INVALID_ARGS,
    Answer,
    DecodedCall,
    WireCodec,
    listed,
    optional_str,
    plain_copy,
    typed_items,
)

__all__ = [
    "CODEC",
    "decode_content_tool_uses",
    "encode_tool",
    "encode_tool_result_block",
    "encode_tool_results",
    "encode_tools",
]


# --- encoder -------------------------------------------------------------------


def encode_tool(spec: ToolSpec) -> dict[str, Any]:
    """One `tools[]` entry of a Messages request; `input_schema` is a copy the caller may edit."""
    return {"name": spec.name, "description": spec.description, "input_schema": plain_copy(spec.input_schema)}


def encode_tools(specs: Iterable[ToolSpec]) -> list[dict[str, Any]]:
    """The request's `tools[]` for the catalog's specs, in the order given."""
    return [encode_tool(spec) for spec in specs]


# --- decoder -------------------------------------------------------------------


def decode_content_tool_uses(content: Sequence[Any]) -> list[DecodedCall]:
    """The `tool_use` blocks of a non-streamed assistant `content` list, in order; other blocks are skipped."""
    return [
        _decoded(index, where, block)
        for index, where, block in typed_items(content, name="content", item_type="tool_use")
    ]


def _decoded(index: int, where: str, block: Mapping[str, Any]) -> DecodedCall:
    call_id = optional_str(block.get("id"), f"{where}.id")
    name = optional_str(block.get("name"), f"{where}.name")
    args = _input_object(block.get("input"))
    return DecodedCall(where=f"message[{index}]", call_id=call_id or "", name=name or "", args=args)


def decode_turn(message: Any) -> list[DecodedCall]:
    """The calls of a Messages turn: its `content` list, or an assistant message holding one."""
    return decode_content_tool_uses(
        listed(message, "content", "message must be a Messages content list (or an assistant message with one)")
    )


def _input_object(value: Any) -> dict[str, Any] | MalformedArgs:
    """A block's `input` when it is an object (None means no input: no arguments)."""
    if value is None:
        return {}
    return dict(value) if isinstance(value, Mapping) else INVALID_ARGS


# --- tool results --------------------------------------------------------------


def encode_tool_result_block(result: ToolExecResult, *, tool_use_id: str | None = None) -> dict[str, Any]:
    """One `tool_result` block; `tool_use_id` is the model's id when Toolgate ran the call under another.

    A tool that answered content blocks is answered with them as `tool_result`
    content blocks (images as image blocks); its own error for the model is
    the same with `is_error: true`.
    """
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id or result.tool_call_id,
        "content": answer_payload(result, _result_block),
        "is_error": not result.ok,
    }


def _result_block(block: Mapping[str, Any]) -> dict[str, Any]:
    if is_image(block) and block["mimeType"] in ANTHROPIC_IMAGE_TYPES:
        return {"type": "image", "source": {"type": "base64", "media_type": block["mimeType"], "data": block["data"]}}
    return {"type": "text", "text": block_text(block)}


def encode_tool_results(blocks: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The `user` turn answering an assistant turn: all its tool results in one message, as the API requires."""
    return {"role": "user", "content": [dict(block) for block in blocks]}


def encode_results(answers: Sequence[Answer]) -> list[dict[str, Any]]:
    """One `user` turn holding every call's `tool_result` block, or none for a turn without calls."""
    if not answers:
        return []
    return [encode_tool_results(encode_tool_result_block(result, tool_use_id=call_id) for call_id, result in answers)]


CODEC = WireCodec(
    name="anthropic",
    catalog_doc="Messages API tools",
    turn_doc="the Messages `content` list (or the message)",
    encode_tools=encode_tools,
    decode_turn=decode_turn,
    encode_results=encode_results,
)
