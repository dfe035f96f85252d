"""A model's whole assistant turn in, its tool-result messages out, for every supported wire format.

`POST /api/v1/tools/calls` takes the turn exactly as the model's API returned
it. This module turns it into `ModelCall`s the runner can execute (through the
format's codec, runner/wire/codecs.py, whose decoder reads the calls) and the
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
`MalformedArgs`, which the runner answers and audits while the others run.

Model call ids become Toolgate's `tool_call_id` (the idempotency key), so a
retried turn replays instead of running twice. An id outside
`[A-Za-z0-9_-]{1,128}` is mapped deterministically to `tc_` + the SHA-256 hex
of the id: the same model id always names the same Toolgate call, and the
result message still answers the model's own id.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runner import strict_json
from runner.types import ErrorCode, MalformedArgs, ToolExecResult
from runner.wire.common import INVALID_ARGS, WireCodec, WireFormatError

MAX_CALLS_PER_TURN = 16
MAX_ARGS_BYTES = 8 * 1024
MAX_TOOL_NAME_LENGTH = 128
MAX_MODEL_CALL_ID_LENGTH = 512
TOOL_CALL_ID = re.compile(r"\A[A-Za-z0-9_-]{1,128}\Z")
MAPPED_ID_PREFIX = "tc_"
ARGS_TOO_LARGE_MESSAGE = f"tool arguments must be at most {MAX_ARGS_BYTES} bytes serialized"


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


def decode_turn(codec: WireCodec, message: Any) -> list[ModelCall]:
    """The calls of one assistant turn, in the model's order; `WireFormatError` if it is not such a turn."""
    decoded = codec.decode_turn(message)
    if len(decoded) > MAX_CALLS_PER_TURN:
        raise WireFormatError(f"a turn may carry at most {MAX_CALLS_PER_TURN} tool calls")
    calls = []
    seen: set[str] = set()
    for call in decoded:
        if not call.call_id:
            raise WireFormatError(f"{call.where} has no call id")
        if len(call.call_id) > MAX_MODEL_CALL_ID_LENGTH:
            raise WireFormatError(f"{call.where} has a call id over {MAX_MODEL_CALL_ID_LENGTH} characters")
        if not call.name:
            raise WireFormatError(f"{call.where} has no tool name")
        if len(call.name) > MAX_TOOL_NAME_LENGTH:
            raise WireFormatError(f"{call.where} has a tool name over {MAX_TOOL_NAME_LENGTH} characters")
        if call.call_id in seen:
            raise WireFormatError(f"{call.where} repeats the call id of an earlier call")
        seen.add(call.call_id)
        calls.append(
            ModelCall(
                model_call_id=call.call_id,
                tool_call_id=toolgate_call_id(call.call_id),
                tool_id=call.name,
                args=_call_args(call.args),
            )
        )
    return calls


def _call_args(args: dict[str, Any] | MalformedArgs) -> dict[str, Any] | MalformedArgs:
    if isinstance(args, MalformedArgs):
        return args
    if not strict_json.strings_are_clean(args):  # decoded from a string, or handed over by Python code
        return INVALID_ARGS
    if len(json.dumps(args, separators=(",", ":"), ensure_ascii=False).encode()) > MAX_ARGS_BYTES:
        return MalformedArgs(error_code=ErrorCode.VALIDATION, safe_message=ARGS_TOO_LARGE_MESSAGE)
    return args


def encode_results(
    codec: WireCodec, calls: Sequence[ModelCall], results: Sequence[ToolExecResult]
) -> list[dict[str, Any]]:
    """The messages answering the turn, in the calls' order, each naming the model's own call id."""
    return codec.encode_results([(call.model_call_id, result) for call, result in zip(calls, results, strict=True)])
