"""The runner's pipeline, stage by stage, with in-memory ports (no database)."""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
import time
from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.contracts import ON_LOOP, ToolDefinition
from runner.errors import BrokerError, DependencyUnavailable
from runner.grants import effective_connection_ids
from runner.pipeline import CLAIM_LEASE_GRACE_S, CREDENTIAL_IN_OUTPUT, TOOL_ERROR_MESSAGE, ToolRunner, args_digest
from runner.ports import Claimed, Conflict, Replay
from runner.types import Budgets, Decision, ErrorCode, EventKind, MalformedArgs, ToolExecResult
from runner.wording import refusal_for_model
from tests.runner import tools
from tests.runner.fakes import ACTOR, CONNECTION, GRANT, OTHER_CONNECTION, T0, TENANT, grant, make_harness

CONNECTED = {"connection_id": CONNECTION, "grant_id": GRANT, "declared_connection_ids": (CONNECTION,)}


def test_allowed_call_runs_and_returns_the_redacted_value():
    h = make_harness(tools.ALL)

    result = h.exec("test__echo", {"text": "hi", "repeat": 2})

    assert result.ok is True
    assert result.value == {"text": "hihi"}  # internal_note is not on the allowlist
    assert result.executed is True
    assert (result.started_at, result.ended_at) == (T0, T0)


def test_unknown_tool_is_unavailable_and_audited():
    h = make_harness(tools.ALL)

    result = h.exec("test__nope")

    assert (result.ok, result.error_code) == (False, ErrorCode.UNAVAILABLE)
    [record] = h.audit.records
    assert (record.tool_id, record.error_code, record.decision) == ("test__nope", ErrorCode.UNAVAILABLE, "not_decided")
    assert all(args_sha256 is None for _name, args_sha256 in h.policy.asked)  # listing the catalog only


def test_a_known_tool_with_no_approved_definition_is_refused_as_disabled_and_audited():
    h = make_harness(tools.ALL)
    h.source.pending.add("mcp__acme__add")

    result = h.exec("mcp__acme__add")

    assert (result.ok, result.error_code, result.safe_message) == (False, ErrorCode.POLICY_DENIED, "tool is disabled")
    [record] = h.audit.records
    assert (record.tool_id, record.error_code, record.decision) == ("mcp__acme__add", ErrorCode.POLICY_DENIED, "deny")
    assert h.policy.asked == []  # refused before any policy is asked


def test_unknown_tool_suggests_the_closest_id_of_the_callers_catalog_only():
    h = make_harness(tools.ALL, allowed={"test__echo"})

    typo = h.exec("test__ecoh")
    not_listed = h.exec("test__bad_outptu")  # close to test__bad_output, which this caller may not run
    far = h.exec("something_else")

    assert typo.safe_message == "no such tool; did you mean 'test__echo'?"
    assert not_listed.safe_message == far.safe_message
    assert far.safe_message == (
        "no such tool; the catalog (GET /api/v1/tools, or MCP tools/list) lists the tools you may call"
    )


def test_each_call_refreshes_governance_first_so_a_change_made_elsewhere_applies_to_it():
    h = make_harness(tools.ALL)
    assert h.exec("test__echo", {"text": "hi"}).ok

    # when: an operator disables the tool elsewhere; this process learns of it at its next refresh
    h.governance.changes.append(lambda: h.source.disabled.add("test__echo"))
    result = h.exec("test__echo", {"text": "hi"})

    # then: the very next call sees it, and each call refreshed once
    assert (result.error_code, result.safe_message) == (ErrorCode.POLICY_DENIED, "tool is disabled")
    assert h.governance.refreshes == 2


def test_governance_that_cannot_be_refreshed_fails_closed_and_is_audited():
    h = make_harness(tools.ALL)

    def outage() -> None:
        raise DependencyUnavailable("generation unreadable")

    h.governance.changes.append(outage)
    result = h.exec("test__echo", {"text": "hi"})

    assert result.error_code is ErrorCode.UNAVAILABLE_DEPENDENCY
    assert [record.error_code for record in h.audit.records] == [ErrorCode.UNAVAILABLE_DEPENDENCY]
    assert h.policy.asked == []


def test_deny_by_default_when_policy_does_not_list_the_tool():
    h = make_harness(tools.ALL, allowed=set())

    result = h.exec("test__echo", {"text": "hi"})

    assert result.error_code is ErrorCode.POLICY_DENIED
    assert h.audit.records[0].decision is Decision.DENY
    assert h.audit.records[0].executed is False


def test_kill_switch_wins_over_an_allowing_policy_and_policy_is_not_asked():
    h = make_harness(tools.ALL, disabled={"test__echo"})

    result = h.exec("test__echo", {"text": "hi"})

    assert (result.error_code, result.safe_message) == (ErrorCode.POLICY_DENIED, "tool is disabled")
    assert h.policy.asked == []


def test_approval_required_returns_the_approval_id_and_does_not_run():
    h = make_harness(tools.ALL, approval_effects={"external_side_effect"})

    result = h.exec("test__send", {"text": "hi"})

    assert (result.error_code, result.approval_id, result.executed) == (ErrorCode.APPROVAL_REQUIRED, "apr-1", False)
    assert [e.kind for e in h.events.events] == [EventKind.TOOL_CALL_RESULT]  # never started


def test_policy_is_asked_for_the_approval_with_the_args_hash_only_after_validation():
    h = make_harness(tools.ALL, approval_effects={"external_side_effect"})

    h.exec("test__send", {"repeat": 1, "text": "hi"})
    invalid = h.exec("test__send", {"text": 5}, tool_call_id="call-2")

    digest = args_digest({"text": "hi", "repeat": 1})
    assert h.policy.asked == [("test__send", None), ("test__send", digest), ("test__send", None)]
    assert h.audit.records[0].args_sha256 == digest
    assert invalid.error_code is ErrorCode.VALIDATION  # never sent to an approver


def test_an_allowed_call_never_asks_about_approvals():
    h = make_harness(tools.ALL)

    h.exec("test__echo", {"text": "hi"})

    assert h.policy.asked == [("test__echo", None)]


def test_rate_limited_carries_retry_after_and_releases_nothing_it_did_not_take():
    h = make_harness(tools.ALL, budgets=Budgets(rate_limit_per_minute=1))

    first = h.exec("test__echo", {"text": "a"})
    second = h.exec("test__echo", {"text": "b"}, tool_call_id="call-2")

    assert first.ok is True
    assert (second.error_code, second.retry_after_s) == (ErrorCode.RATE_LIMITED, 60)
    assert (h.limiter.calls, h.limiter.released, h.limiter.in_flight) == (1, 1, 0)


def test_concurrency_lease_is_released_even_when_the_tool_fails():
    h = make_harness(tools.ALL, budgets=Budgets(max_concurrency=1))

    h.exec("test__boom")
    result = h.exec("test__echo", {"text": "a"}, tool_call_id="call-2")

    assert result.ok is True
    assert h.limiter.in_flight == 0


def test_invalid_args_answer_validation_with_paths_and_no_values():
    h = make_harness(tools.ALL)

    result = h.exec("test__echo", {"text": "x" * 101 + "VALUE-CANARY", "KEY-CANARY": "EXTRA-CANARY"})

    assert result.error_code is ErrorCode.VALIDATION
    assert sorted(e.path for e in result.errors) == ["(unknown field)", "text"]
    assert "CANARY" not in repr(result)


def test_malformed_args_are_answered_at_the_input_stage_after_policy_and_audited():
    # given a decoder's verdict on arguments it could not parse
    h = make_harness(tools.ALL)
    malformed = MalformedArgs(error_code=ErrorCode.INVALID_JSON, safe_message="Invalid tool arguments JSON")

    # when
    result = h.exec("test__echo", malformed)
    denied = make_harness(tools.ALL, allowed=set()).exec("test__echo", malformed)

    # then the tool did not run, the policy was asked, and one audit row says invalid_json
    assert (result.ok, result.error_code, result.safe_message) == (
        False,
        ErrorCode.INVALID_JSON,
        "Invalid tool arguments JSON",
    )
    assert result.executed is False
    assert [call[0] for call in h.policy.asked] == ["test__echo"]
    [record] = h.audit.records
    assert (record.error_code, record.decision, record.executed) == (ErrorCode.INVALID_JSON, Decision.ALLOW, False)
    assert [event.kind for event in h.events.events] == [EventKind.TOOL_CALL_RESULT]
    assert denied.error_code is ErrorCode.POLICY_DENIED  # malformed args never skip the policy


def test_strict_validation_refuses_coercion():
    h = make_harness(tools.ALL)

    result = h.exec("test__echo", {"text": "a", "repeat": "2"})

    assert [e.path for e in result.errors] == ["repeat"]


def test_args_that_are_not_an_object_fail_validation():
    h = make_harness(tools.ALL)

    assert h.exec("test__echo", ["not", "an", "object"]).error_code is ErrorCode.VALIDATION


def test_tool_exception_is_execution_without_traceback_or_secret(caplog):
    h = make_harness(tools.ALL)

    result = h.exec("test__boom")

    assert (result.error_code, result.safe_message, result.executed) == (ErrorCode.EXECUTION, "the tool failed", True)
    everything = repr(result) + repr(h.audit.records) + repr(h.events.events) + caplog.text
    assert tools.SECRET_IN_EXCEPTION not in everything
    assert "Traceback" not in everything


def test_timeout_cancels_a_slow_tool_within_budget_plus_100ms():
    h = make_harness(tools.ALL, budgets=Budgets(max_runtime_ms=200))

    started = time.monotonic()
    result = h.exec("test__sleep", {"ms": 3_000})
    elapsed = time.monotonic() - started

    assert result.error_code is ErrorCode.TIMEOUT
    assert 0.2 <= elapsed < 0.3


def test_timeout_holds_even_for_a_tool_that_blocks_the_event_loop():
    h = make_harness(tools.ALL)  # the tool's own default budget: 200 ms

    started = time.monotonic()
    result = h.exec("test__block", {"ms": 600})
    elapsed = time.monotonic() - started

    assert result.error_code is ErrorCode.TIMEOUT
    assert elapsed < 0.3
    time.sleep(0.45)  # let the blocked loop drain before other tests use it


def test_a_plain_function_tool_runs_on_the_calling_thread_and_an_async_one_on_the_loop_thread():
    h = make_harness([tools.WHERE, tools.WHERE_SYNC])

    plain = h.exec("test__where_sync")
    async_ = h.exec("test__where", tool_call_id="call-2")

    assert plain.value == {"text": str(threading.get_ident())}
    assert async_.ok
    assert async_.value != {"text": str(threading.get_ident())}


def test_a_plain_function_tool_that_returns_after_its_budget_answers_timeout():
    h = make_harness([tools.SLOW_SYNC])

    late = h.exec("test__slow_sync", {"ms": 150})
    in_time = h.exec("test__slow_sync", {"ms": 0}, tool_call_id="call-2")

    assert (late.error_code, late.safe_message) == (ErrorCode.TIMEOUT, "the tool ran past its 100 ms budget")
    assert late.executed is True
    assert in_time.ok


def test_a_plain_function_tool_runs_in_a_copy_of_the_callers_context():
    marker = contextvars.ContextVar("marker", default="caller")

    def _set_marker(args, ctx, caps):
        marker.set("tool")
        return {"text": marker.get()}

    tool = ToolDefinition(replace(tools.WHERE_SYNC.contract, name="test__marker"), _set_marker)
    h = make_harness([tool])

    result = h.exec("test__marker")

    assert result.value == {"text": "tool"}
    assert marker.get() == "caller"


def _with_fast_path(name: str, blocking, *, timeout_ms: int = 200) -> ToolDefinition:
    """An async tool (it answers where it ran) with a blocking fast path."""

    async def on_loop(args, ctx, caps):
        return {"text": f"loop {threading.get_ident()}"}

    contract = replace(tools.WHERE.contract, name=name, default_timeout_ms=timeout_ms)
    return ToolDefinition(contract, on_loop, execute_blocking=blocking)


def test_a_blocking_fast_path_answers_on_the_calling_thread_with_the_calls_deadline():
    seen = []

    def blocking(args, ctx, caps, deadline):
        seen.append(deadline - time.monotonic())
        return {"text": f"here {threading.get_ident()}"}

    h = make_harness([_with_fast_path("test__fast", blocking)])

    result = h.exec("test__fast")

    assert result.value == {"text": f"here {threading.get_ident()}"}
    assert 0.15 < seen[0] <= 0.2  # the tool's 200 ms budget, as a monotonic deadline


def test_a_fast_path_that_answers_on_loop_hands_the_call_to_the_loop_with_what_is_left_of_the_budget():
    def declines(args, ctx, caps, deadline):
        time.sleep(0.12)
        return ON_LOOP

    async def slow(args, ctx, caps):
        await asyncio.sleep(0.15)  # within the 200 ms budget, not within what is left of it
        return {"text": "late"}

    declining = _with_fast_path("test__declines", declines)
    h = make_harness(
        [declining, replace(declining, contract=replace(declining.contract, name="test__slow"), execute=slow)]
    )

    handed = h.exec("test__declines")
    started = time.monotonic()
    cut = h.exec("test__slow", tool_call_id="call-2")

    assert handed.ok
    assert handed.value["text"].startswith("loop ")
    assert handed.value != {"text": f"loop {threading.get_ident()}"}  # the loop thread, not this one
    elapsed = time.monotonic() - started
    assert cut.error_code is ErrorCode.TIMEOUT  # with a whole budget of its own it would have answered
    assert 0.2 <= elapsed < 0.26  # one budget for both paths together


def test_a_fast_path_timeout_at_the_deadline_answers_timeout_and_one_before_it_is_the_tools_failure():
    def waits_past(args, ctx, caps, deadline):
        time.sleep(max(deadline - time.monotonic(), 0))
        raise TimeoutError

    def times_out_early(args, ctx, caps, deadline):
        raise TimeoutError("the tool's own")

    def answers_late(args, ctx, caps, deadline):
        time.sleep(max(deadline - time.monotonic(), 0) + 0.01)
        return {"text": "late"}

    h = make_harness(
        [
            _with_fast_path("test__past", waits_past),
            _with_fast_path("test__early", times_out_early),
            _with_fast_path("test__late", answers_late),
        ]
    )

    past = h.exec("test__past")
    early = h.exec("test__early", tool_call_id="call-2")
    late = h.exec("test__late", tool_call_id="call-3")

    assert (past.error_code, past.safe_message) == (ErrorCode.TIMEOUT, "the tool ran past its 200 ms budget")
    assert (early.error_code, early.safe_message) == (ErrorCode.EXECUTION, "the tool failed")
    assert late.error_code is ErrorCode.TIMEOUT
    assert (past.executed, late.executed) == (True, True)


def test_budget_is_the_smaller_of_tool_default_and_policy():
    generous = make_harness(tools.ALL, budgets=Budgets(max_runtime_ms=60_000))
    strict = make_harness(tools.ALL, budgets=Budgets(max_runtime_ms=100))

    tool_default_wins = generous.exec("test__block", {"ms": 400})  # tool default: 200 ms
    policy_wins = strict.exec("test__sleep", {"ms": 1_000})  # tool default: 5 s

    assert tool_default_wins.safe_message == "the tool ran past its 200 ms budget"
    assert policy_wins.safe_message == "the tool ran past its 100 ms budget"
    time.sleep(0.25)  # let the blocked loop drain


def test_output_invalid_when_the_tool_breaks_its_schema():
    h = make_harness(tools.ALL)

    result = h.exec("test__bad_output")

    assert (result.error_code, [e.path for e in result.errors]) == (ErrorCode.OUTPUT_INVALID, ["text"])


def test_missing_allowlist_is_redaction_failed_never_pass_through():
    h = make_harness(tools.ALL)

    result = h.exec("test__no_allowlist", {"text": "hi"})

    assert (result.error_code, result.value) == (ErrorCode.REDACTION_FAILED, None)
    assert h.audit.records[0].value is None


def test_result_too_large_measures_the_redacted_serialised_value():
    h = make_harness(tools.ALL, budgets=Budgets(max_result_bytes=20))

    fits = h.exec("test__echo", {"text": "a", "repeat": 9})  # {"text":"aaaaaaaaa"} = 20 bytes
    too_big = h.exec("test__echo", {"text": "a", "repeat": 10}, tool_call_id="call-2")

    assert fits.ok is True
    assert h.audit.records[0].result_bytes == 20
    assert (too_big.error_code, too_big.value) == (ErrorCode.RESULT_TOO_LARGE, None)


def test_runner_default_result_budget_applies_without_a_policy_budget():
    h = make_harness(tools.ALL, default_max_result_bytes=50)

    assert h.exec("test__echo", {"text": "a", "repeat": 100}).error_code is ErrorCode.RESULT_TOO_LARGE


def test_every_outcome_writes_exactly_one_audit_record_and_one_result_event():
    h = make_harness(tools.ALL, allowed={"test__echo", "test__boom"})
    calls = [("test__nope", {}), ("test__sleep", {"ms": 1}), ("test__echo", {}), ("test__echo", {"text": "x"})]

    for index, (tool_id, args) in enumerate(calls):
        h.exec(tool_id, args, tool_call_id=f"call-{index}")

    assert [r.tool_call_id for r in h.audit.records] == ["call-0", "call-1", "call-2", "call-3"]
    results = [e for e in h.events.events if e.kind is EventKind.TOOL_CALL_RESULT]
    assert [e.tool_call_id for e in results] == ["call-0", "call-1", "call-2", "call-3"]


def test_start_and_result_events_share_the_tool_call_id():
    h = make_harness(tools.ALL)

    h.exec("test__echo", {"text": "hi"}, tool_call_id="call-stable")

    assert [(e.kind, e.tool_call_id) for e in h.events.events] == [
        (EventKind.TOOL_CALL_START, "call-stable"),
        (EventKind.TOOL_CALL_RESULT, "call-stable"),
    ]


# --- connection gate and broker ----------------------------------------------------


def test_connection_tool_gets_credentials_through_the_capability_only():
    h = make_harness(tools.ALL, grants=[grant()])

    result = h.exec("test__connected", **CONNECTED)

    assert result.value == {"text": "hello"}  # the echoed authorization field was redacted away
    assert h.broker.resolved == [CONNECTION]
    assert h.broker.token not in repr(h.audit.records) + repr(h.events.events) + repr(result)


@pytest.mark.parametrize(
    ("ctx_fields", "code"),
    [
        ({}, ErrorCode.VALIDATION),  # no connection for a tool that needs one
        ({"connection_id": "not-a-uuid", "grant_id": GRANT}, ErrorCode.VALIDATION),
        ({"connection_id": CONNECTION, "declared_connection_ids": (CONNECTION,)}, ErrorCode.VALIDATION),  # no grant
        ({**CONNECTED, "grant_id": "grant-unknown"}, ErrorCode.POLICY_DENIED),
        ({**CONNECTED, "declared_connection_ids": ()}, ErrorCode.POLICY_DENIED),  # empty intersection
        ({**CONNECTED, "declared_connection_ids": (OTHER_CONNECTION,)}, ErrorCode.POLICY_DENIED),
        ({**CONNECTED, "connection_id": OTHER_CONNECTION}, ErrorCode.POLICY_DENIED),  # not granted
        ({**CONNECTED, "tenant_id": "tenant-b"}, ErrorCode.POLICY_DENIED),  # another tenant's grant
        ({**CONNECTED, "actor_id": "service-2"}, ErrorCode.POLICY_DENIED),  # another caller's grant
    ],
)
def test_connection_gate_refuses_before_the_broker(ctx_fields, code):
    h = make_harness(tools.ALL, grants=[grant()])

    result = h.exec("test__connected", **ctx_fields)

    assert result.error_code is code
    assert h.broker.resolved == []


def test_connection_given_to_a_tool_that_takes_none_is_a_validation_error():
    h = make_harness(tools.ALL, grants=[grant()])

    result = h.exec("test__echo", {"text": "hi"}, **CONNECTED)

    assert (result.error_code, [e.path for e in result.errors]) == (ErrorCode.VALIDATION, ["connection_id"])


@pytest.mark.parametrize(
    "bad_grant",
    [grant(revoked=True), grant(expires_at=T0), grant(expires_at=T0 - timedelta(seconds=1))],
)
def test_revoked_or_expired_grant_is_denied(bad_grant):
    h = make_harness(tools.ALL, grants=[bad_grant])

    assert h.exec("test__connected", **CONNECTED).error_code is ErrorCode.POLICY_DENIED
    assert h.broker.resolved == []


def test_grant_gate_runs_before_input_validation_and_broker():
    h = make_harness(tools.ALL, grants=[grant(revoked=True)])

    result = h.exec("test__connected", {"bogus": 1}, **CONNECTED)

    assert result.error_code is ErrorCode.POLICY_DENIED


@pytest.mark.parametrize("code", [ErrorCode.CONNECTION_UNAVAILABLE, ErrorCode.AUTH_REFRESH_FAILED])
def test_broker_errors_pass_through_with_their_code(code):
    h = make_harness(tools.ALL, grants=[grant()])
    h.broker.error = BrokerError(code, "connection is revoked")

    result = h.exec("test__connected", **CONNECTED)

    assert (result.error_code, result.safe_message, result.executed) == (code, "connection is revoked", False)


@given(
    granted=st.frozensets(st.sampled_from("abcdef")),
    declared=st.frozensets(st.sampled_from("abcdef")),
    wanted=st.sampled_from("abcdef"),
)
def test_grant_intersection_property(granted, declared, wanted):
    ids = {letter: f"00000000-0000-4000-8000-00000000000{ord(letter) - 87:x}" for letter in "abcdef"}
    h = make_harness(tools.ALL, grants=[grant(ids[g] for g in granted)])

    result = h.exec(
        "test__connected",
        connection_id=ids[wanted],
        grant_id=GRANT,
        declared_connection_ids=tuple(ids[d] for d in declared),
    )

    allowed = wanted in (granted & declared)
    assert result.ok is allowed
    assert result.error_code is (None if allowed else ErrorCode.POLICY_DENIED)
    assert h.broker.resolved == ([ids[wanted]] if allowed else [])
    assert effective_connection_ids(granted, declared) == granted & declared
    if not (granted & declared):
        assert result.ok is False  # empty intersection always denies


# --- composition ---------------------------------------------------------------------


def test_a_deployment_can_add_a_stage_without_touching_the_core():
    h = make_harness(tools.ALL)
    cache: dict[tuple[str, str | None], object] = {}

    def caching_stage(call, proceed):
        key = (call.tool_id, call.args_sha256)
        if key in cache:
            return replace(cache[key], tool_call_id=call.ctx.tool_call_id)
        result = proceed(call)
        if result.ok:
            cache[key] = result
        return result

    stages = h.stages()
    stages.insert(4, caching_stage)  # after policy and budgets, before the connection gate
    h.runner = ToolRunner(stages, h.clock)

    first = h.exec("test__echo", {"text": "hi"})
    second = h.exec("test__echo", {"text": "hi"}, tool_call_id="call-2")

    assert (first.value, second.value, second.tool_call_id) == ({"text": "hi"}, {"text": "hi"}, "call-2")
    starts = [e for e in h.events.events if e.kind is EventKind.TOOL_CALL_START]
    assert len(starts) == 1  # the second call never reached the tool
    assert len(h.audit.records) == 2


def test_context_fields_reach_the_audit_record_untouched():
    h = make_harness(tools.ALL, grants=[grant()])

    h.exec("test__connected", run_id="run-9", tool_call_id="call-9", **CONNECTED)

    ctx = h.audit.records[0].context
    assert (ctx.run_id, ctx.tool_call_id, ctx.tenant_id, ctx.actor_id) == ("run-9", "call-9", TENANT, ACTOR)
    assert (ctx.connection_id, ctx.grant_id) == (CONNECTION, GRANT)


# --- idempotency stage -----------------------------------------------------------------


class MemoryIdempotency:
    """Claims by tool_call_id; a claim is kept only if the call executed (as the real store does)."""

    def __init__(self, audit) -> None:
        self.audit = audit
        self.leases_s: list[float] = []

    def claim(self, ctx, tool_id, *, args_sha256, lease_s, wait_s):
        self.leases_s.append(lease_s)
        for record in self.audit.records:
            if record.tool_call_id == ctx.tool_call_id and record.executed:
                if (record.tool_id, record.args_sha256, record.context.actor_id) != (
                    tool_id,
                    args_sha256,
                    ctx.actor_id,
                ):
                    return Conflict("tool_call_id was already used for a different request")
                return Replay(
                    ToolExecResult(
                        tool_call_id=record.tool_call_id,
                        tool_id=record.tool_id,
                        ok=bool(record.ok),
                        value=record.value,
                        error_code=record.error_code,
                        safe_message=record.safe_message,
                        content=record.content,
                        started_at=record.started_at,
                        ended_at=record.ended_at,
                        executed=True,
                    )
                )
        return Claimed(ref=f"claim-{ctx.tool_call_id}")


def _with_idempotency(h):
    h.runner = ToolRunner(h.stages(idempotency=MemoryIdempotency(h.audit)), h.clock)
    return h


def test_repeat_replays_the_recorded_result_without_running():
    h = _with_idempotency(make_harness(tools.ALL))

    first = h.exec("test__echo", {"text": "hi"})
    h.clock.advance(5)
    again = h.exec("test__echo", {"text": "hi"})

    assert (again.ok, again.value, again.executed) == (True, first.value, False)
    assert (again.started_at, again.ended_at) == (first.started_at, first.ended_at)  # the recorded times
    assert len([e for e in h.events.events if e.kind is EventKind.TOOL_CALL_START]) == 1
    assert [r.decision for r in h.audit.records] == [Decision.ALLOW, Decision.REPLAYED]
    assert h.audit.records[0].audit_ref == "claim-call-1"
    replay_row = h.audit.records[1]  # the replay's own audit row has its own times
    assert replay_row.started_at == replay_row.ended_at == h.clock.now()


def test_replay_is_refused_once_the_policy_or_the_kill_switch_no_longer_allows_the_tool():
    h = _with_idempotency(make_harness(tools.ALL))
    h.exec("test__echo", {"text": "hi"})

    h.policy.allowed.clear()
    after_policy_change = h.exec("test__echo", {"text": "hi"})
    h.policy.allowed.add("test__echo")
    h.source.disabled.add("test__echo")
    after_kill_switch = h.exec("test__echo", {"text": "hi"})

    assert [r.error_code for r in (after_policy_change, after_kill_switch)] == [ErrorCode.POLICY_DENIED] * 2
    assert (after_policy_change.value, after_kill_switch.value) == (None, None)
    assert [r.decision for r in h.audit.records] == [Decision.ALLOW, Decision.DENY, Decision.DENY]


def test_replay_is_refused_to_another_caller_of_the_same_tenant():
    h = _with_idempotency(make_harness(tools.ALL))
    h.exec("test__echo", {"text": "hi"}, tool_call_id="shared")

    other = h.exec("test__echo", {"text": "hi"}, tool_call_id="shared", actor_id="another-service")

    assert (other.ok, other.error_code, other.value) == (False, ErrorCode.IDEMPOTENCY_CONFLICT, None)


def test_claim_lease_covers_the_calls_runtime_budget():
    h = make_harness(tools.ALL)
    store = MemoryIdempotency(h.audit)
    h.runner = ToolRunner(h.stages(idempotency=store), h.clock)

    h.exec("test__sleep", {"ms": 0})

    assert store.leases_s == [5.0 + CLAIM_LEASE_GRACE_S]  # the tool's 5,000 ms timeout and the grace


def test_generated_tool_call_ids_are_not_claimed():
    h = make_harness(tools.ALL)
    store = MemoryIdempotency(h.audit)
    h.runner = ToolRunner(h.stages(idempotency=store), h.clock)

    result = h.exec("test__echo", {"text": "hi"}, tool_call_id_generated=True)

    assert (result.ok, store.leases_s, h.audit.records[0].audit_ref) == (True, [], None)


def test_refused_call_is_decided_afresh_when_repeated():
    h = _with_idempotency(make_harness(tools.ALL, allowed=set()))

    refused = h.exec("test__echo", {"text": "hi"})
    h.policy.allowed.add("test__echo")
    allowed = h.exec("test__echo", {"text": "hi"})

    assert (refused.error_code, allowed.ok) == (ErrorCode.POLICY_DENIED, True)


# --- content blocks and errors meant for the model ------------------------------------------------


def test_a_tools_own_error_for_the_model_is_tool_error_with_its_text_and_audited_as_executed():
    h = make_harness([*tools.ALL, *tools.CONTENT_TOOLS])

    result = h.exec("test__refuse", {"text": "Atlantis"})

    assert (result.ok, result.error_code, result.executed, result.value) == (False, ErrorCode.TOOL_ERROR, True, None)
    assert result.content == ({"type": "text", "text": "no city of that name; send one of: Paris, Oslo"},)
    assert result.safe_message == TOOL_ERROR_MESSAGE  # Toolgate's words; the tool's are the content
    [record] = h.audit.records
    assert (record.error_code, record.executed, record.content) == (ErrorCode.TOOL_ERROR, True, result.content)
    assert record.result_bytes == len(json.dumps(list(result.content), separators=(",", ":")).encode())


def test_a_tool_error_is_replayed_to_a_repeat_without_running_again():
    h = _with_idempotency(make_harness([*tools.ALL, *tools.CONTENT_TOOLS]))

    first = h.exec("test__refuse", {"text": "Atlantis"})
    again = h.exec("test__refuse", {"text": "Atlantis"})

    assert (again.error_code, again.content, again.executed) == (ErrorCode.TOOL_ERROR, first.content, False)
    assert len([e for e in h.events.events if e.kind is EventKind.TOOL_CALL_START]) == 1
    assert [r.decision for r in h.audit.records] == [Decision.ALLOW, Decision.REPLAYED]


def test_a_tool_error_that_carries_the_connections_credential_is_withheld():
    h = make_harness([*tools.ALL, *tools.CONTENT_TOOLS], grants=[grant()])

    result = h.exec("test__refuse_connected", **CONNECTED)

    assert (result.error_code, result.safe_message, result.content) == (
        ErrorCode.REDACTION_FAILED,
        CREDENTIAL_IN_OUTPUT,
        None,
    )
    assert h.broker.token not in repr(h.audit.records) + repr(result)


def test_a_tool_error_is_held_to_the_result_budget():
    h = make_harness([*tools.ALL, *tools.CONTENT_TOOLS], budgets=Budgets(max_result_bytes=40))

    result = h.exec("test__refuse", {"text": "Atlantis"})

    assert (result.error_code, result.content) == (ErrorCode.RESULT_TOO_LARGE, None)


def test_content_blocks_pass_as_sent_with_the_value_wrapping_them_and_unreviewed_meta_dropped():
    h = make_harness([*tools.ALL, *tools.CONTENT_TOOLS])

    result = h.exec("test__blocks", {"text": "hi", "repeat": 2})

    blocks = ({"type": "text", "text": "hihi"}, {"type": "image", "data": tools.PIXEL, "mimeType": "image/png"})
    assert (result.ok, result.content, result.structured) == (True, blocks, False)
    assert result.value == {"content": list(blocks)}
    # the blocks are counted once: the value is nothing but them
    assert h.audit.records[0].result_bytes == len(json.dumps({"content": list(blocks)}, separators=(",", ":")))


def test_a_validation_refusal_reads_for_a_model_with_each_wrong_argument():
    h = make_harness(tools.ALL)

    result = h.exec("test__echo", {"repeat": 0})

    assert refusal_for_model(result.safe_message, result.errors) == (
        "arguments do not match the tool's schema: text: required; repeat: must be at least 1"
    )
