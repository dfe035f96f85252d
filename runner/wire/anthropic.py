"""Anthropic Messages tool-use wire format: an adapter beside runner/wire/openai.py.

The runner speaks `ToolSpec`, `ToolInvocationRecord` and `ToolExecResult`;
this module is the only place that knows the Messages API's shapes
(WIRE_FORMATS_ARE_ADAPTERS):

- `encode_tools` turns specs into the request's `tools[]`: exactly `name`,
  `description` and `input_schema`. The native ToolSpec's `effect`,
  `requires_connection` and `provider` are Toolgate's governance data; the SDK
  would pass them through unchanged to an API that refuses unknown keys.
- `AnthropicToolUseDecoder` is the single assembler of a streamed message's
  `tool_use` blocks (DECODER_ASSEMBLES_TOOLCALLS): `content_block_start`
  opens a block, `input_json_delta` events append to its `partial_json`,
  `finish()` returns the records and resets the session.
  `decode_content_tool_uses` reads a whole (non-streamed) `content` list.
- Input that is not a JSON object becomes an `invalid_json` record with the
  fixed message and no raw text, as in the OpenAI adapter.
- `encode_tool_results` writes the `user` turn of `tool_result` blocks that
  answers an assistant turn, errors included (`is_error: true`), so the model
  can correct itself.

Standard library and the runner package only: no Django, no HTTP client.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runner.pipeline import new_tool_call_id
from runner.types import ErrorCode, ToolExecResult, ToolInvocationRecord, ToolSpec
from runner.wire.blocks import ANTHROPIC_IMAGE_TYPES, answers_with_blocks, block_text, error_text, is_image
from runner.wire.openai import (
    INVALID_ARGS_MESSAGE,
    MISSING_NAME_MESSAGE,
    WireFormatError,
    _is_int,
    _optional_str,
    _parse_arguments,
    _plain_copy,
)

__all__ = [
    "AnthropicToolUseDecoder",
    "decode_content_tool_uses",
    "decode_stream",
    "encode_tool",
    "encode_tool_result_block",
    "encode_tool_results",
    "encode_tools",
]


# --- encoder -------------------------------------------------------------------


def encode_tool(spec: ToolSpec) -> dict[str, Any]:
    """One `tools[]` entry of a Messages request; `input_schema` is a copy the caller may edit."""
    return {"name": spec.name, "description": spec.description, "input_schema": _plain_copy(spec.input_schema)}


def encode_tools(specs: Iterable[ToolSpec]) -> list[dict[str, Any]]:
    """The request's `tools[]` for the catalog's specs, in the order given."""
    return [encode_tool(spec) for spec in specs]


# --- decoder -------------------------------------------------------------------


@dataclass(slots=True)
class _PartialToolUse:
    """One `tool_use` block as it streams in: id and name from its start, input from its deltas."""

    tool_call_id: str | None
    name: str
    partial_json: str
    # The start event's own `input` (an object, `{}` when streamed): used when no delta arrives.
    start_input: Any


class AnthropicToolUseDecoder:
    """Assembles a streamed Messages response's `tool_use` blocks into records.

    Blocks are keyed by their content-block `index`, so text blocks between
    tool uses and interleaved deltas cannot mix two calls' inputs. One instance
    serves one stream at a time; `finish()` ends the session and empties it,
    so nothing of one response can leak into the next.
    """

    def __init__(self) -> None:
        self._blocks: dict[int, _PartialToolUse] = {}

    def feed(self, event: Mapping[str, Any]) -> None:
        """Take one stream event; events other than tool-use starts and input deltas change nothing.

        A malformed event raises `WireFormatError` and leaves the session as it
        was: the event is checked whole before anything is applied.
        """
        if not isinstance(event, Mapping):
            raise WireFormatError("event must be an object")
        kind = event.get("type")
        if kind == "content_block_start":
            index = _block_index(event)
            block = event.get("content_block")
            if not isinstance(block, Mapping):
                raise WireFormatError("event.content_block must be an object")
            if block.get("type") != "tool_use":
                return
            tool_call_id = _optional_str(block.get("id"), "event.content_block.id")
            name = _optional_str(block.get("name"), "event.content_block.name")
            self._blocks[index] = _PartialToolUse(
                tool_call_id=tool_call_id or None, name=name or "", partial_json="", start_input=block.get("input")
            )
        elif kind == "content_block_delta":
            index = _block_index(event)
            delta = event.get("delta")
            if not isinstance(delta, Mapping):
                raise WireFormatError("event.delta must be an object")
            if delta.get("type") != "input_json_delta":
                return
            fragment = _optional_str(delta.get("partial_json"), "event.delta.partial_json")
            block_in_progress = self._blocks.get(index)
            if block_in_progress is None:
                raise WireFormatError("input_json_delta for a content block that is not a started tool_use")
            block_in_progress.partial_json += fragment or ""

    def finish(self) -> list[ToolInvocationRecord]:
        """The session's tool uses in content-block order; the decoder is then empty and reusable."""
        blocks, self._blocks = self._blocks, {}
        records = []
        for index, block in sorted(blocks.items()):
            if block.partial_json.strip():
                args = _parse_arguments(block.partial_json)
            else:  # no delta: the start event's input is the whole input (a tool without arguments)
                args = _input_object(block.start_input)
            records.append(_to_record(index=index, tool_call_id=block.tool_call_id, name=block.name, args=args))
        return records

    def reset(self) -> None:
        """Drop a session without producing records (e.g. after a stream broke off)."""
        self._blocks = {}


def decode_stream(events: Iterable[Mapping[str, Any]]) -> list[ToolInvocationRecord]:
    """Assemble a whole stream with a fresh decoder."""
    decoder = AnthropicToolUseDecoder()
    for event in events:
        decoder.feed(event)
    return decoder.finish()


def decode_content_tool_uses(content: Sequence[Any]) -> list[ToolInvocationRecord]:
    """Records for the `tool_use` blocks of a non-streamed assistant `content` list, in order."""
    if not isinstance(content, list):
        raise WireFormatError("content must be a list")
    records = []
    for index, block in enumerate(content):
        where = f"content[{index}]"
        if not isinstance(block, Mapping):
            raise WireFormatError(f"{where} must be an object")
        if block.get("type") != "tool_use":
            continue
        tool_call_id = _optional_str(block.get("id"), f"{where}.id")
        name = _optional_str(block.get("name"), f"{where}.name")
        records.append(
            _to_record(
                index=index, tool_call_id=tool_call_id or None, name=name or "", args=_input_object(block.get("input"))
            )
        )
    return records


def _block_index(event: Mapping[str, Any]) -> int:
    index = event.get("index")
    if not _is_int(index) or index < 0:
        raise WireFormatError("event.index must be a non-negative integer")
    return index


def _input_object(value: Any) -> dict[str, Any] | None:
    """A block's `input` when it is an object (None means no input: no arguments)."""
    if value is None:
        return {}
    return dict(value) if isinstance(value, Mapping) else None


def _to_record(*, index: int, tool_call_id: str | None, name: str, args: dict[str, Any] | None) -> ToolInvocationRecord:
    """One assembled tool use; a failed one keeps only its block index in `raw`, never its input."""
    call_id = tool_call_id or new_tool_call_id()
    if not name:
        return ToolInvocationRecord(
            tool_call_id=call_id,
            tool_id="",
            ok=False,
            error_code=ErrorCode.VALIDATION,
            safe_message=MISSING_NAME_MESSAGE,
            raw={"index": index},
        )
    if args is None:
        return ToolInvocationRecord(
            tool_call_id=call_id,
            tool_id=name,
            ok=False,
            error_code=ErrorCode.INVALID_JSON,
            safe_message=INVALID_ARGS_MESSAGE,
            raw={"index": index},
        )
    return ToolInvocationRecord(
        tool_call_id=call_id, tool_id=name, args=args, raw={"index": index, "id": tool_call_id, "name": name}
    )


# --- tool results --------------------------------------------------------------


def encode_tool_result_block(result: ToolExecResult, *, tool_use_id: str | None = None) -> dict[str, Any]:
    """One `tool_result` block; `tool_use_id` is the model's id when Toolgate ran the call under another.

    A tool that answered content blocks is answered with them as `tool_result`
    content blocks (images as image blocks); its own error for the model is
    the same with `is_error: true`.
    """
    content: str | list[dict[str, Any]]
    if answers_with_blocks(result):
        content = [_result_block(block) for block in result.content or ()]
    elif result.ok:
        content = json.dumps(result.value)
    else:
        content = error_text(result)
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id or result.tool_call_id,
        "content": content,
        "is_error": not result.ok,
    }


def _result_block(block: Mapping[str, Any]) -> dict[str, Any]:
    if is_image(block) and block["mimeType"] in ANTHROPIC_IMAGE_TYPES:
        return {"type": "image", "source": {"type": "base64", "media_type": block["mimeType"], "data": block["data"]}}
    return {"type": "text", "text": block_text(block)}


def encode_tool_results(blocks: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The `user` turn answering an assistant turn: all its tool results in one message, as the API requires."""
    return {"role": "user", "content": [dict(block) for block in blocks]}
