"""OpenAI function-calling wire format: an adapter, not a core type.

The runner speaks `ToolSpec`, `ToolInvocationRecord` and `ToolExecResult`
(runner/types.py). This module is the only place that knows OpenAI's Chat
Completions shapes (WIRE_FORMATS_ARE_ADAPTERS), so another provider's format is
another adapter beside it, never a change to the core types:

- `encode_tools` turns specs into the `tools[]` a request sends, nothing more.
- `OpenAIToolCallDecoder` is the single assembler of streamed tool-call deltas
  (DECODER_ASSEMBLES_TOOLCALLS): callers feed it chunks and execute tools only
  from the records it returns, never from raw deltas. Its state belongs to one
  decode session and `finish()` resets it, so nothing of one completion can
  leak into the next.
- Arguments that are not a JSON object become an `invalid_json` record whose
  message is fixed and whose fields never hold the raw argument text: a model
  may echo secrets or user data there, and a record is logged and audited.
- `encode_tool_result` writes the tool message fed back to the model, including
  error results, so the model can correct itself instead of the run halting.

Standard library and the runner package only: no Django, no HTTP client.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from runner import strict_json
from runner.errors import ToolgateError
from runner.pipeline import new_tool_call_id
from runner.types import ErrorCode, ToolExecResult, ToolInvocationRecord, ToolSpec
from runner.wire.blocks import answers_with_blocks, block_text, error_text

INVALID_ARGS_MESSAGE = "Invalid tool arguments JSON"
MISSING_NAME_MESSAGE = "tool call has no function name"


class WireFormatError(ToolgateError, ValueError):
    """A provider payload whose shape is not OpenAI's.

    Messages name the offending location and expected type only, never a value
    from the payload, so the error may be logged or shown as is.
    """


# --- encoder -------------------------------------------------------------------


def encode_tool(spec: ToolSpec) -> dict[str, Any]:
    """One `tools[]` entry; `parameters` is a copy, so a caller editing the request cannot alter the spec."""
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": _plain_copy(spec.input_schema),
        },
    }


def encode_tools(specs: Iterable[ToolSpec]) -> list[dict[str, Any]]:
    """The request's `tools[]` for the catalog's specs, in the order given."""
    return [encode_tool(spec) for spec in specs]


def _plain_copy(value: Any) -> Any:
    """Deep copy into plain dicts and lists, the types `json.dumps` and HTTP clients expect."""
    if isinstance(value, Mapping):
        return {key: _plain_copy(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain_copy(item) for item in value]
    return value


# --- decoder -------------------------------------------------------------------


@dataclass(slots=True)
class _PartialCall:
    """What has arrived so far for one tool-call index."""

    tool_call_id: str | None = None
    name: str = ""
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class _Fragment:
    """One validated `delta.tool_calls[]` entry, applied only once the whole chunk is known good."""

    index: int
    tool_call_id: str | None
    name: str | None
    arguments: str | None


class OpenAIToolCallDecoder:
    """Assembles streamed `chat.completion.chunk` tool-call deltas into records.

    Only choice index 0 is assembled: the executor requests one completion
    (n=1), and other choices are alternative answers to the same turn, so
    merging their tool calls would execute calls no single answer asked for.

    Fragments are keyed by their tool-call `index`, so a provider that
    interleaves two calls' argument fragments still yields two whole calls.
    One instance serves one session at a time; `finish()` ends the session.
    """

    def __init__(self) -> None:
        self._calls: dict[int, _PartialCall] = {}

    def feed(self, chunk: Mapping[str, Any]) -> None:
        """Take one chunk; chunks without tool-call deltas (content, usage, finish) change nothing.

        A malformed chunk raises `WireFormatError` and leaves the session as it
        was before the chunk: its fragments are validated before any is applied.
        """
        for fragment in _tool_call_fragments(chunk):
            call = self._calls.setdefault(fragment.index, _PartialCall())
            # The first id wins: some proxies repeat the id on every fragment.
            if call.tool_call_id is None and fragment.tool_call_id:
                call.tool_call_id = fragment.tool_call_id
            if fragment.name:
                call.name += fragment.name
            if fragment.arguments:
                call.arguments += fragment.arguments

    def finish(self) -> list[ToolInvocationRecord]:
        """The session's calls in ascending index order; the decoder is then empty and reusable."""
        calls, self._calls = self._calls, {}
        return [
            _to_record(index=index, tool_call_id=call.tool_call_id, name=call.name, arguments=call.arguments)
            for index, call in sorted(calls.items())
        ]

    def reset(self) -> None:
        """Drop a session without producing records (e.g. after a stream broke off)."""
        self._calls = {}


def decode_stream(chunks: Iterable[Mapping[str, Any]]) -> list[ToolInvocationRecord]:
    """Assemble a whole stream with a fresh decoder."""
    decoder = OpenAIToolCallDecoder()
    for chunk in chunks:
        decoder.feed(chunk)
    return decoder.finish()


def decode_message_tool_calls(message: Mapping[str, Any]) -> list[ToolInvocationRecord]:
    """Records for a non-streamed assistant message, with the same parse rules as the stream decoder."""
    if not isinstance(message, Mapping):
        raise WireFormatError("message must be an object")
    tool_calls = message.get("tool_calls")
    if tool_calls is None:
        return []
    if not isinstance(tool_calls, list):
        raise WireFormatError("message.tool_calls must be a list")
    records = []
    for index, tool_call in enumerate(tool_calls):
        where = f"message.tool_calls[{index}]"
        if not isinstance(tool_call, Mapping):
            raise WireFormatError(f"{where} must be an object")
        tool_call_id = _optional_str(tool_call.get("id"), f"{where}.id")
        function = _optional_mapping(tool_call.get("function"), f"{where}.function")
        name = _optional_str(function.get("name"), f"{where}.function.name")
        arguments = _optional_str(function.get("arguments"), f"{where}.function.arguments")
        records.append(
            _to_record(index=index, tool_call_id=tool_call_id or None, name=name or "", arguments=arguments or "")
        )
    return records


def _tool_call_fragments(chunk: Mapping[str, Any]) -> list[_Fragment]:
    """The tool-call fragments of choice 0 in one chunk, shape-checked."""
    if not isinstance(chunk, Mapping):
        raise WireFormatError("chunk must be an object")
    choices = chunk.get("choices")
    if choices is None:
        return []
    if not isinstance(choices, list):
        raise WireFormatError("chunk.choices must be a list")
    fragments: list[_Fragment] = []
    for position, choice in enumerate(choices):
        where = f"chunk.choices[{position}]"
        if not isinstance(choice, Mapping):
            raise WireFormatError(f"{where} must be an object")
        # LiteLLM's examples omit the choice index; a single choice is choice 0.
        choice_index = choice.get("index", 0)
        if not _is_int(choice_index):
            raise WireFormatError(f"{where}.index must be an integer")
        if choice_index != 0:
            continue
        delta = _optional_mapping(choice.get("delta"), f"{where}.delta")
        tool_calls = delta.get("tool_calls")
        if tool_calls is None:
            continue
        if not isinstance(tool_calls, list):
            raise WireFormatError(f"{where}.delta.tool_calls must be a list")
        for call_position, tool_call in enumerate(tool_calls):
            fragments.append(_fragment(tool_call, f"{where}.delta.tool_calls[{call_position}]"))
    return fragments


def _fragment(tool_call: Any, where: str) -> _Fragment:
    if not isinstance(tool_call, Mapping):
        raise WireFormatError(f"{where} must be an object")
    index = tool_call.get("index")
    if not _is_int(index) or index < 0:
        raise WireFormatError(f"{where}.index must be a non-negative integer")
    function = _optional_mapping(tool_call.get("function"), f"{where}.function")
    return _Fragment(
        index=index,
        tool_call_id=_optional_str(tool_call.get("id"), f"{where}.id"),
        name=_optional_str(function.get("name"), f"{where}.function.name"),
        arguments=_optional_str(function.get("arguments"), f"{where}.function.arguments"),
    )


def _is_int(value: Any) -> TypeGuard[int]:
    """A JSON integer; `bool` is an `int` subclass in Python but not in JSON."""
    return isinstance(value, int) and not isinstance(value, bool)


def _optional_str(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise WireFormatError(f"{where} must be a string")


def _optional_mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return value
    raise WireFormatError(f"{where} must be an object")


def _to_record(*, index: int, tool_call_id: str | None, name: str, arguments: str) -> ToolInvocationRecord:
    """One assembled call as a record; failed calls keep only their index in `raw`, never the argument text.

    A call without a name is checked first: there is no tool to run or to
    attribute an argument error to. Either failure still gets a stable
    `tool_call_id` (stable across retries) so the error can be fed back to the model.
    """
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
    args = _parse_arguments(arguments)
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
        tool_call_id=call_id,
        tool_id=name,
        args=args,
        raw={"index": index, "id": tool_call_id, "name": name, "arguments": arguments},
    )


def _parse_arguments(arguments: str) -> dict[str, Any] | None:
    """The arguments as a JSON object, or None; empty means no arguments (models send "" for no-arg tools)."""
    if not arguments.strip():
        return {}
    try:
        parsed = strict_json.loads(arguments)
    except strict_json.StrictJsonError:  # malformed, too deep, or what the body parser refuses too
        return None
    return parsed if isinstance(parsed, dict) else None


# --- tool result ---------------------------------------------------------------


def encode_tool_result(result: ToolExecResult) -> dict[str, Any]:
    """The `role: tool` message answering one call; errors are answered too so the model can self-correct.

    A tool that answered content blocks (an upstream MCP tool, a tool's own
    error for the model) is answered with one text part per block: a tool
    message carries text parts only, so other blocks say what they were.
    """
    content: str | list[dict[str, Any]]
    if answers_with_blocks(result):
        content = [{"type": "text", "text": block_text(block)} for block in result.content or ()]
    elif result.ok:
        content = json.dumps(result.value)
    else:
        content = error_text(result)
    return {"role": "tool", "tool_call_id": result.tool_call_id, "content": content}
