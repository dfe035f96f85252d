"""The argument-rule and result-guard stages with in-memory ports: where they sit, what they end, what is audited."""

from __future__ import annotations

import re

from runner.guardrails import Detector, GuardAction, ResultGuard
from runner.pipeline import ToolRunner
from runner.ports import CallRules
from runner.rules import ArgumentRule, ConditionError, RuleAction, RuleScope
from runner.types import Decision, ErrorCode
from tests.runner import tools
from tests.runner.fakes import make_harness
from tests.runner.test_pipeline import MemoryIdempotency


class Book:
    def __init__(self, rules: CallRules) -> None:
        self.rules = rules
        self.asked = 0

    def for_caller(self, ctx) -> CallRules:
        self.asked += 1
        return self.rules


def rule(action: RuleAction, condition, *, tool_id: str = "test__echo") -> ArgumentRule:
    return ArgumentRule(
        "r1", "long-texts", RuleScope.TENANT, action, "texts are short here", _covers(tool_id), condition
    )


def _covers(tool_id: str):
    return lambda spec: spec.name == tool_id


def harness_with(rules: CallRules):
    h = make_harness(tools.ALL)
    book = Book(rules)
    h.runner = ToolRunner(h.stages(rules=book), h.clock)
    return h, book


def test_a_deny_ends_the_call_with_the_message_before_the_tool_runs_and_the_audit_names_the_rule():
    seen = []
    h, _ = harness_with(CallRules(arguments=(rule(RuleAction.DENY, lambda v: seen.append(v) or True),)))

    result = h.exec("test__echo", {"text": "hi", "repeat": 2})

    assert (result.ok, result.error_code, result.safe_message, result.executed) == (
        False,
        ErrorCode.POLICY_DENIED,
        "texts are short here",
        False,
    )
    [variables] = seen
    assert variables["args"] == {"text": "hi", "repeat": 2}
    assert variables["tool"]["id"] == "test__echo"
    [record] = h.audit.records
    assert (record.decision, record.rule_id, record.rule_action, record.executed) == (
        Decision.DENY,
        "r1",
        "deny",
        False,
    )


def test_invalid_arguments_are_refused_before_any_rule_is_read():
    h, _ = harness_with(CallRules(arguments=(rule(RuleAction.DENY, lambda v: True),)))

    result = h.exec("test__echo", {"text": 3})

    assert result.error_code is ErrorCode.VALIDATION
    assert h.audit.records[0].rule_id is None


def test_a_condition_that_raises_refuses_and_one_for_another_tool_is_not_evaluated():
    def boom(_variables):
        raise ConditionError('no field "size"')

    def never(_variables):
        raise AssertionError("a rule for another tool was evaluated")

    h, _ = harness_with(
        CallRules(arguments=(rule(RuleAction.ALLOW, boom), rule(RuleAction.DENY, never, tool_id="other")))
    )

    result = h.exec("test__echo", {"text": "hi", "repeat": 1})

    assert result.error_code is ErrorCode.POLICY_DENIED
    assert 'no field "size"' in result.safe_message


def test_an_allow_rule_lets_the_call_run_and_is_audited():
    h, _ = harness_with(CallRules(arguments=(rule(RuleAction.ALLOW, lambda v: True),)))

    result = h.exec("test__echo", {"text": "hi", "repeat": 1})

    assert result.ok is True
    assert (h.audit.records[0].rule_id, h.audit.records[0].rule_action) == ("r1", "allow")


def test_a_guard_redacts_what_the_allowlist_let_through_and_the_audit_records_it():
    guard = ResultGuard(
        "g1", "hi", GuardAction.REDACT, "", (Detector("greeting", re.compile("h+i")),), _covers("test__echo")
    )
    h, _ = harness_with(CallRules(guards=(guard,)))

    result = h.exec("test__echo", {"text": "hi", "repeat": 2})

    assert result.value == {"text": "[redacted: greeting][redacted: greeting]"}
    assert h.audit.records[0].guardrail == {"action": "redact", "guards": ["g1"], "found": {"greeting": 2}}


def test_a_guard_that_withholds_answers_a_tool_error_with_its_message():
    guard = ResultGuard(
        "g1", "hi", GuardAction.WITHHOLD, "not shown", (Detector("greeting", re.compile("hi")),), _covers("test__echo")
    )
    h, _ = harness_with(CallRules(guards=(guard,)))

    result = h.exec("test__echo", {"text": "hi", "repeat": 1})

    assert (result.ok, result.error_code, result.content) == (
        False,
        ErrorCode.TOOL_ERROR,
        ({"type": "text", "text": "not shown"},),
    )


def test_a_replay_is_judged_again_by_todays_rules_and_guards():
    h = make_harness(tools.ALL)
    book = Book(CallRules())
    h.runner = ToolRunner(h.stages(rules=book, idempotency=MemoryIdempotency(h.audit)), h.clock)
    first = h.exec("test__echo", {"text": "hi", "repeat": 1})
    assert first.ok is True

    book.rules = CallRules(arguments=(rule(RuleAction.REQUIRE_APPROVAL, lambda v: True),))
    asks_for_a_person = h.exec("test__echo", {"text": "hi", "repeat": 1})  # nothing runs again: no approval
    guard = ResultGuard(
        "g1", "hi", GuardAction.REDACT, "", (Detector("greeting", re.compile("hi")),), _covers("test__echo")
    )
    book.rules = CallRules(guards=(guard,))
    guarded = h.exec("test__echo", {"text": "hi", "repeat": 1})
    book.rules = CallRules(arguments=(rule(RuleAction.DENY, lambda v: True),))
    denied = h.exec("test__echo", {"text": "hi", "repeat": 1})

    assert (asks_for_a_person.ok, asks_for_a_person.value) == (True, first.value)
    assert guarded.value == {"text": "[redacted: greeting]"}
    assert (denied.ok, denied.error_code, denied.safe_message, denied.value) == (
        False,
        ErrorCode.POLICY_DENIED,
        "texts are short here",
        None,
    )
    assert [(r.decision, r.rule_action) for r in h.audit.records] == [
        (Decision.ALLOW, None),
        (Decision.REPLAYED, "require_approval"),
        (Decision.REPLAYED, None),
        (Decision.DENY, "deny"),
    ]
    assert h.audit.records[2].guardrail == {"action": "redact", "guards": ["g1"], "found": {"greeting": 1}}
    assert len([r for r in h.audit.records if r.executed]) == 1


def test_the_result_budget_measures_the_redacted_result():
    guard = ResultGuard(
        "g1", "hi", GuardAction.REDACT, "", (Detector("greeting", re.compile("hi")),), _covers("test__echo")
    )
    h = make_harness(tools.ALL)
    raw = len('{"text":"hi"}')
    redacted = len('{"text":"[redacted: greeting]"}')
    h.runner = ToolRunner(h.stages(rules=Book(CallRules(guards=(guard,))), default_max_result_bytes=raw + 2), h.clock)

    result = h.exec("test__echo", {"text": "hi", "repeat": 1})

    assert (result.error_code, result.safe_message) == (
        ErrorCode.RESULT_TOO_LARGE,
        f"result is {redacted} bytes; the budget is {raw + 2}",
    )
