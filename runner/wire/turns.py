"""A model's whole assistant turn in, its tool-result messages out, for every supported wire format.

`POST /api/v1/tools/calls` takes the turn exactly as the model's API returned
it. This module turns it into `ModelCall`s the runner can execute (through the
per-format decoders, which stay the single assemblers of tool calls) and the
runner's results back into the messages the next request appends:

| format | turn | results |
|---|---|---|
| `openai` | a Chat Completions `message` with `tool_calls` | one `role: tool` message per call |
| `openai_responses` | a response's `output` list (`function_call` items) | one `function_call_output` item per call |
| `anthropic` | a Messages `content` list (`tool_use` blocks) | one `user` turn of `tool_result` blocks |

Two kinds of bad input are told apart. A body that is not a model's turn at
all (wrong types, a call without id or name, two calls with one id, too many
calls) raises `WireFormatError`: nothing runs. A model's own mistake in one
call (arguments that are not a JSON object, or too large) becomes that call's
`MalformedArgs`, which the runner answers and audits while the others run
(docs/api.md, "Running a model's tool calls").

Model call ids become Toolgate's `tool_call_id` (the idempotency key), so a
retried turn replays instead of running twice. An id outside
`[A-Za-z0-9_-]{1,128}` is mapped deterministically to `tc_` + the SHA-256 hex
of the id: the same model id always names the same Toolgate call, and the
result message still answers the model's own id.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runner import strict_json
from runner.types import ErrorCode, MalformedArgs, ToolExecResult, ToolInvocationRecord
from runner.wire import anthropic, openai, openai_responses
from runner.wire.openai import INVALID_ARGS_MESSAGE, WireFormatError

MAX_CALLS_PER_TURN = 16
MAX_ARGS_BYTES = 8 * 1024
MAX_TOOL_NAME_LENGTH = 128
MAX_MODEL_CALL_ID_LENGTH = 512
TOOL_CALL_ID = re.compile(r"\A[A-Za-z0-9_-]{1,128}\Z")
MAPPED_ID_PREFIX = "tc_"
ARGS_TOO_LARGE_MESSAGE = f"tool arguments must be at most {MAX_ARGS_BYTES} bytes serialized"


class WireFormat(enum.StrEnum):
    OPENAI = "openai"
    OPENAI_RESPONSES = "openai_responses"
    ANTHROPIC = "anthropic"


@dataclass(frozen=True, slots=True)
class ModelCall:
    """One tool call of a model's turn, ready for the runner.

    `model_call_id` is the id the model gave and its result must answer;
    `tool_call_id` is the id Toolgate runs and audits it under (the same
    unless the model's id is outside the contract's charset). `args` is the
    parsed object, or `MalformedArgs` for a call the runner must refuse.
    """

    model_call_id: str
    tool_call_id: str
    tool_id: str
    args: dict[str, Any] | MalformedArgs


def toolgate_call_id(model_call_id: str) -> str:
    """The model's id when it fits `[A-Za-z0-9_-]{1,128}`, else `tc_<sha256 hex>` of it (deterministic)."""
    if TOOL_CALL_ID.match(model_call_id):
        return model_call_id
    return MAPPED_ID_PREFIX + hashlib.sha256(model_call_id.encode("utf-8", "surrogatepass")).hexdigest()


def decode_turn(wire_format: WireFormat, message: Any) -> list[ModelCall]:
    """The calls of one assistant turn, in the model's order; `WireFormatError` if it is not such a turn."""
    if wire_format is WireFormat.OPENAI:
        items, records = _openai_calls(message)
    elif wire_format is WireFormat.OPENAI_RESPONSES:
        items, records = _responses_calls(message)
    else:
        items, records = _anthropic_calls(message)
    if len(records) > MAX_CALLS_PER_TURN:
        raise WireFormatError(f"a turn may carry at most {MAX_CALLS_PER_TURN} tool calls")
    calls = []
    seen: set[str] = set()
    for (where, model_call_id, name), record in zip(items, records, strict=True):
        if not model_call_id:
            raise WireFormatError(f"{where} has no call id")
        if len(model_call_id) > MAX_MODEL_CALL_ID_LENGTH:
            raise WireFormatError(f"{where} has a call id over {MAX_MODEL_CALL_ID_LENGTH} characters")
        if not name:
            raise WireFormatError(f"{where} has no tool name")
        if len(name) > MAX_TOOL_NAME_LENGTH:
            raise WireFormatError(f"{where} has a tool name over {MAX_TOOL_NAME_LENGTH} characters")
        if model_call_id in seen:
            raise WireFormatError(f"{where} repeats the call id of an earlier call")
        seen.add(model_call_id)
        calls.append(
            ModelCall(
                model_call_id=model_call_id,
                tool_call_id=toolgate_call_id(model_call_id),
                tool_id=name,
                args=_call_args(record),
            )
        )
    return calls


def _call_args(record: ToolInvocationRecord) -> dict[str, Any] | MalformedArgs:
    if record.error_code is not None:
        return MalformedArgs(error_code=record.error_code, safe_message=record.safe_message or "")
    args = dict(record.args or {})
    if not strict_json.strings_are_clean(args):  # decoded from a string, or handed over by Python code
        return MalformedArgs(error_code=ErrorCode.INVALID_JSON, safe_message=INVALID_ARGS_MESSAGE)
    if len(json.dumps(args, separators=(",", ":"), ensure_ascii=False).encode()) > MAX_ARGS_BYTES:
        return MalformedArgs(error_code=ErrorCode.VALIDATION, safe_message=ARGS_TOO_LARGE_MESSAGE)
    return args


_Item = tuple[str, str, str]  # where, model call id, tool name


def _openai_calls(message: Any) -> tuple[list[_Item], list[ToolInvocationRecord]]:
    if not isinstance(message, Mapping):
        raise WireFormatError("message must be an object")
    tool_calls = message.get("tool_calls") or []
    if not isinstance(tool_calls, list):
        raise WireFormatError("message.tool_calls must be a list")
    items = []
    for index, tool_call in enumerate(tool_calls):
        where = f"message.tool_calls[{index}]"
        if not isinstance(tool_call, Mapping):
            raise WireFormatError(f"{where} must be an object")
        if tool_call.get("type", "function") != "function":
            raise WireFormatError(f"{where} is not a function tool call")
        function = tool_call.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
        items.append((where, _str_or_empty(tool_call.get("id")), _str_or_empty(name)))
    return items, openai.decode_message_tool_calls(message)


def _responses_calls(message: Any) -> tuple[list[_Item], list[ToolInvocationRecord]]:
    output = _listed(message, "output", "message must be a response's output list (or an object with one)")
    items = _typed_items(output, item_type="function_call", id_key="call_id")
    return items, openai_responses.decode_output_function_calls(output)


def _anthropic_calls(message: Any) -> tuple[list[_Item], list[ToolInvocationRecord]]:
    content = _listed(message, "content", "message must be a Messages content list (or an assistant message with one)")
    items = _typed_items(content, item_type="tool_use", id_key="id")
    return items, anthropic.decode_content_tool_uses(content)


def _listed(message: Any, key: str, refusal: str) -> list[Any]:
    """The list of a turn given whole (`{key: [...]}`) or as the list itself."""
    listed = message.get(key) if isinstance(message, Mapping) else message
    if not isinstance(listed, list):
        raise WireFormatError(refusal)
    return listed


def _typed_items(listed: list[Any], *, item_type: str, id_key: str) -> list[_Item]:
    """(where, id, name) of the entries of `item_type`, in order (other entries are not calls)."""
    return [
        (f"message[{index}]", _str_or_empty(entry.get(id_key)), _str_or_empty(entry.get("name")))
        for index, entry in enumerate(listed)
        if isinstance(entry, Mapping) and entry.get("type") == item_type
    ]


def _str_or_empty(value: Any) -> str:
    """The decoders reject a non-string id or name with a precise message; here only its presence counts."""
    return value if isinstance(value, str) else ""


def encode_results(
    wire_format: WireFormat, calls: Sequence[ModelCall], results: Sequence[ToolExecResult]
) -> list[dict[str, Any]]:
    """The messages answering the turn, in the calls' order, each naming the model's own call id."""
    pairs = list(zip(calls, results, strict=True))
    if wire_format is WireFormat.OPENAI:
        return [{**openai.encode_tool_result(result), "tool_call_id": call.model_call_id} for call, result in pairs]
    if wire_format is WireFormat.OPENAI_RESPONSES:
        return [openai_responses.encode_tool_result(result, call_id=call.model_call_id) for call, result in pairs]
    if not pairs:
        return []
    blocks = [anthropic.encode_tool_result_block(result, tool_use_id=call.model_call_id) for call, result in pairs]
    return [anthropic.encode_tool_results(blocks)]
