"""Run a model's whole tool-calling turn: decode it, run each call through `tool_exec`, encode the answers.

A service beside tools_app/services.py (`tool_exec` stays the one way into the
runner). Decoding and encoding are the wire adapters' (runner/wire/turns.py);
this module only strings them together with the caller's out-of-band fields.

The calls run one after another, in the model's order, in the request's
thread. The runner is synchronous and reads and writes through the ORM in its
calling thread; worker threads would each need their own database connection
(closed when done), could not see a transaction the request holds, and would
contend for the embedded default's single SQLite writer. Ordered execution also
keeps the audit trail in the model's order. The cost is latency: the answer
takes the sum of the calls' runtimes, bounded by `MAX_CALLS_PER_TURN` calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.errors import AppError
from policies_app.selectors import Caller
from runner.pipeline import ToolRunner
from runner.types import ToolExecResult
from runner.wire.common import WireCodec, WireFormatError
from runner.wire.turns import ModelCall, decode_turn, encode_results
from tools_app.routing import CallRouting
from tools_app.services import ExecRequest, tool_exec


@dataclass(frozen=True, slots=True)
class CallsRequest:
    """`POST /api/v1/tools/calls`, shape-checked: the model's turn and the out-of-band fields of every call."""

    wire_format: WireCodec
    message: object
    routing: CallRouting = field(default_factory=CallRouting)


@dataclass(frozen=True, slots=True)
class CallsOutcome:
    """What the turn's calls came to: the messages to append, and each call with its result."""

    results: list[dict[str, object]]
    calls: list[tuple[ModelCall, ToolExecResult]]


def tool_calls_run(
    *, runner: ToolRunner, caller: Caller, request: CallsRequest, subject_token: str | None = None
) -> CallsOutcome:
    """Run every call of the turn through the pipeline under the model's call id; an AppError if it is no turn.

    A malformed call reaches the runner as `MalformedArgs` and comes back as
    its own refusal (audited like any call); it does not stop the others.
    """
    try:
        calls = decode_turn(request.wire_format, request.message)
    except WireFormatError as exc:  # its message names a location and a type, never a value
        raise AppError("the message is not a turn of this format", field_errors=[("message", str(exc))]) from None
    results = [
        tool_exec(
            runner=runner,
            caller=caller,
            request=ExecRequest(
                tool_id=call.tool_id, args=call.args, tool_call_id=call.tool_call_id, routing=request.routing
            ),
            subject_token=subject_token,
        )
        for call in calls
    ]
    return CallsOutcome(
        results=encode_results(request.wire_format, calls, results), calls=list(zip(calls, results, strict=True))
    )
