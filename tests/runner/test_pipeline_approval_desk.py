"""The approval stage with a desk of its own: spent only when the tool ran, and a failing desk never hides a run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runner.pipeline import ApprovalStage, Call
from runner.ports import PolicyDecision
from runner.types import Decision, ErrorCode, ToolExecResult, ToolInvocationContext


@dataclass
class Desk:
    verdict: PolicyDecision
    fail_used: bool = False
    used_ids: list[str] = field(default_factory=list)
    seen_args: list[Any] = field(default_factory=list)

    def request(self, ctx, spec, *, args_sha256, args):
        self.seen_args.append(args)
        return self.verdict

    def used(self, approval_id: str) -> None:
        if self.fail_used:
            raise RuntimeError("database gone")
        self.used_ids.append(approval_id)


class _Bound:
    spec = None


def _call() -> Call:
    ctx = ToolInvocationContext(run_id="r", tool_call_id="c", tenant_id="1", actor_id="a")
    call = Call(tool_id="t__x", raw_args={"k": 1}, ctx=ctx, started_at=None)  # type: ignore[arg-type]
    call.tool = _Bound()  # type: ignore[assignment]
    call.decision = Decision.REQUIRE_APPROVAL
    return call


def _answer(executed: bool):
    return lambda call: ToolExecResult(tool_call_id="c", tool_id="t__x", ok=executed, executed=executed)


def test_an_approval_is_spent_only_by_a_call_that_ran() -> None:
    desk = Desk(PolicyDecision(Decision.ALLOW, approval_id="apr-1"))

    refused = ApprovalStage(desk)(_call(), _answer(executed=False))
    ran = ApprovalStage(desk)(_call(), _answer(executed=True))

    assert (refused.executed, ran.executed) == (False, True)
    assert desk.used_ids == ["apr-1"]
    assert desk.seen_args == [{"k": 1}, {"k": 1}]


def test_a_desk_that_fails_after_the_run_does_not_change_the_answer() -> None:
    desk = Desk(PolicyDecision(Decision.ALLOW, approval_id="apr-1"), fail_used=True)

    result = ApprovalStage(desk)(_call(), _answer(executed=True))

    assert (result.ok, result.executed) == (True, True)


def test_pending_answers_approval_required_with_its_id_and_runs_nothing() -> None:
    desk = Desk(PolicyDecision(Decision.REQUIRE_APPROVAL, approval_id="apr-2", safe_message="wait"))

    def never(call):
        raise AssertionError("must not proceed")

    result = ApprovalStage(desk)(_call(), never)

    assert (result.error_code, result.approval_id, result.safe_message) == (
        ErrorCode.APPROVAL_REQUIRED,
        "apr-2",
        "wait",
    )
