"""Argument rules and result guards: CEL conditions, precedence, checks at save, hostile rules, the change log."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from changes_app.models import Change
from policies_app import cel
from policies_app.governance import governance_cache
from policies_app.models import ArgumentRule, ResultGuard
from policies_app.rules import BUILTIN_DETECTORS, _condition, pattern_compile, rules_for_caller
from policies_app.services import RuleInvalid, argument_rule_save, result_guard_save, scoped_rule_delete
from runner import guardrails
from runner.rules import ArgumentRule as CompiledRule
from runner.rules import ConditionError, RuleAction, RuleScope, activation_for, decide
from runner.types import ToolEffect, ToolInvocationContext, ToolSpec
from tests.factories import TenantFactory, service_account_with_key
from tests.support.api import enable_tools

NOW = datetime(2026, 12, 2, 9, 30, tzinfo=UTC)
SPEC = ToolSpec(
    name="github__create_issue",
    description="",
    input_schema={},
    effect=ToolEffect.EXTERNAL_SIDE_EFFECT,
    requires_connection=True,
    provider="github",
    schema_hash="sha256:x",
    tags=("github", "write"),
)
ARGS = {
    "repo": "acme/widgets",
    "title": "Broken",
    "amount": 150,
    "price": 9.5,
    "to": ["ann@acme.com", "bob@acme.com"],
    "path": "/data/reports/q4.csv",
    "meta": {"labels": ["bug", "p1"], "owner": {"login": "octocat"}},
}


def variables(args=ARGS, *, subject=None, connection="c1", personal=False):
    return activation_for(
        args=args,
        spec=SPEC,
        caller={"tenant": "acme", "tenant_id": "1", "service_account": "bot", "service_account_id": "sa1"},
        subject_id=subject,
        connection_id=connection,
        personal_connection=personal,
        now=NOW,
    )


def evaluate(source: str, args=ARGS, **kw) -> bool:
    return _condition(cel.condition_compile(source))(cel.activation(variables(args, **kw)))


# --- CEL conditions, table-driven ----------------------------------------------------------------

CASES = [
    ('args.repo.startsWith("acme/")', True),
    ('!args.repo.startsWith("acme/")', False),
    ('args.path.startsWith("/data/reports/")', True),
    ('args.path.matches("^/data/reports/[^/]+$")', True),
    ('args.path.matches("^/etc/")', False),
    ("args.amount > 100", True),
    ("args.amount <= 100", False),
    ("args.price < 10.0", True),
    ("args.amount > 100.5", True),  # int against double: CEL compares numbers across types
    ('args.to.all(t, t.endsWith("@acme.com"))', True),
    ('args.to.exists(t, !t.endsWith("@acme.com"))', False),
    ("size(args.to) == 2", True),
    ('"p1" in args.meta.labels', True),
    ('args.meta.owner.login == "octocat"', True),
    ("has(args.missing)", False),
    ("has(args.missing) && args.missing > 1", False),
    ("!has(args.missing) || args.missing > 1", True),
    ('tool.id == "github__create_issue" && "write" in tool.tags', True),
    ('tool.effect == "external_side_effect"', True),
    ('caller.tenant == "acme" && caller.service_account == "bot"', True),
    ("subject.present", False),
    ('connection.provider == "github" && !connection.personal', True),
    ("now.getHours() == 9", True),
    ('now < timestamp("2027-01-01T00:00:00Z")', True),
]


@pytest.mark.parametrize(("source", "expected"), CASES)
def test_conditions_read_nested_args_lists_strings_numbers_and_the_context(source, expected):
    assert evaluate(source) is expected


@pytest.mark.parametrize(
    ("source", "args", "says"),
    [
        ("args.amount > 100", {}, 'no field "amount"'),
        ("args.meta.owner.login == 'x'", {"meta": {}}, 'no field "owner"'),
        ("args.amount > 100", {"amount": "150"}, "another type"),
        ("args.to.all(t, t.endsWith('@acme.com'))", {"to": [1]}, "another type"),
        ("args.amount", {"amount": 3}, "true or false"),
        ("args.path.matches(args.pattern)", {"path": "a", "pattern": "(?=a)"}, "invalid regular expression"),
    ],
)
def test_a_condition_that_errors_at_run_time_is_a_refusal_that_says_why(source, args, says):
    rule = CompiledRule(
        "7",
        "strict",
        RuleScope.GLOBAL,
        RuleAction.ALLOW,
        "",
        lambda spec: True,
        _condition(cel.condition_compile(source)),
    )

    match = decide([rule], SPEC, cel.activation(variables(args)))

    assert match is not None
    assert (match.action, match.failed, match.rule_id) == (RuleAction.DENY, True, "7")
    assert says in match.message
    assert "nothing ran" in match.message


# --- precedence -------------------------------------------------------------------------------------


def rule(rule_id, scope, action, matched=True, *, covers=True):
    def condition(_prepared):
        if matched is None:
            raise ConditionError("boom")
        return matched

    return CompiledRule(rule_id, f"r{rule_id}", scope, action, f"message {rule_id}", lambda s: covers, condition)


G, T, S = RuleScope.GLOBAL, RuleScope.TENANT, RuleScope.SERVICE_ACCOUNT
DENY, APPROVE, CONFIRM, ALLOW = (
    RuleAction.DENY,
    RuleAction.REQUIRE_APPROVAL,
    RuleAction.REQUIRE_CONFIRMATION,
    RuleAction.ALLOW,
)


@pytest.mark.parametrize(
    ("rules", "winner"),
    [
        ([], None),
        ([rule("1", G, DENY, matched=False)], None),
        ([rule("1", G, DENY)], ("1", DENY)),
        ([rule("1", G, DENY), rule("2", T, ALLOW)], ("2", ALLOW)),  # an exception to a broader deny
        ([rule("1", G, DENY), rule("2", T, ALLOW, matched=False)], ("1", DENY)),  # the exception did not match
        ([rule("1", T, ALLOW), rule("2", T, DENY)], ("2", DENY)),  # within a scope deny overrides
        ([rule("1", T, CONFIRM), rule("2", T, APPROVE)], ("2", APPROVE)),
        ([rule("1", T, ALLOW), rule("2", T, CONFIRM)], ("2", CONFIRM)),
        ([rule("1", S, ALLOW), rule("2", T, DENY), rule("3", G, DENY)], ("1", ALLOW)),
        ([rule("1", S, APPROVE), rule("2", T, DENY)], ("1", APPROVE)),
        ([rule("1", S, DENY, covers=False), rule("2", T, ALLOW)], ("2", ALLOW)),  # a rule for other tools
        ([rule("1", T, ALLOW), rule("2", T, DENY, matched=None)], ("2", DENY)),  # an error in the winning scope
        ([rule("1", S, ALLOW), rule("2", G, DENY, matched=None)], ("1", ALLOW)),  # a broader one is not asked
        ([rule("1", G, ALLOW)], ("1", ALLOW)),
    ],
)
def test_the_most_specific_scope_wins_and_within_it_the_strictest_action(rules, winner):
    match = decide(rules, SPEC, {})

    assert (None if match is None else (match.rule_id, match.action)) == winner


# --- checks at save, and hostile rules ---------------------------------------------------------------


@pytest.fixture
def acme(db):
    enable_tools("core__get_current_time")
    tenant = TenantFactory(slug="acme")
    account, _key = service_account_with_key(tenant, name="bot")
    return tenant, account


def new_rule(**fields):
    values = {"name": "r", "tools": ["core__get_current_time"], "condition": "true", "action": "deny"}
    return ArgumentRule(**{**values, **fields})


HOSTILE = [
    ("huge", {"condition": " || ".join(f"args.n == {i}" for i in range(400))}, "condition", "at most 2000"),
    ("deep", {"condition": "(" * 40 + "true" + ")" * 40}, "condition", "nests 40 levels"),
    (
        "nested-comprehensions",
        {"condition": "args.l.all(x, args.l.all(y, args.l.all(z, x + y + z > 0)))"},
        "condition",
        "inside another one",
    ),
    ("map", {"condition": "args.l.map(x, x + 1).all(y, y > 0)"}, "condition", "map() builds a list"),
    ("filter", {"condition": "size(args.l.filter(x, x > 0)) > 1"}, "condition", "filter() builds a list"),
    ("many-comprehensions", {"condition": " && ".join(["args.l.all(x, x > 0)"] * 5)}, "condition", "5 comprehensions"),
    ("lookaround", {"condition": 'args.s.matches("(?=secret)")'}, "condition", "not valid RE2"),
    ("syntax", {"condition": "args.repo.startsWith("}, "condition", "Syntax error"),
    ("types", {"condition": "args.n + 'x' > 1"}, "condition", "no matching overload"),
    ("undeclared", {"condition": "request.path == '/'"}, "condition", "undeclared reference to 'request.path'"),
    ("not-bool", {"condition": "1 + 2"}, "condition", "true or false"),
    ("no-tool", {"tools": [], "tags": []}, "tools", "covers no tool"),
    ("unknown-tool", {"tools": ["core__nope"]}, "tools", "unknown tool id"),
    ("unknown-action", {"action": "explode"}, "action", "one of deny"),
]


@pytest.mark.parametrize(("label", "fields", "field", "says"), HOSTILE, ids=[case[0] for case in HOSTILE])
def test_hostile_and_broken_rules_are_refused_at_save_with_what_is_wrong(acme, label, fields, field, says):
    with pytest.raises(RuleInvalid) as refused:
        argument_rule_save(rule=new_rule(name=label, **fields))

    assert says in refused.value.problems[field]
    assert not ArgumentRule.objects.exists()
    assert not Change.objects.filter(action__startswith="argument_rule").exists()


def test_a_syntax_error_names_its_position():
    assert "at 1:22" in cel.condition_problem("args.repo.startsWith(")


def test_a_backtracking_regex_in_a_condition_runs_in_linear_time():
    # (a+)+$ against 8000 a's and a '!' takes exponential time in a backtracking engine; RE2 is linear.
    started = time.perf_counter()
    assert evaluate('args.s.matches("(a+)+$")', {"s": "a" * 8000 + "!"}) is False
    assert time.perf_counter() - started < 0.05


def test_comprehensions_over_8_kib_of_args_stay_bounded_and_past_the_iteration_budget_refuse():
    # two flat comprehensions over a list as long as 8 KiB of args can hold (4000 one-digit items): 8000 steps
    two = " && ".join(f"args.l.all(x{i}, x{i} >= 0)" for i in range(2))
    args = {"l": [1] * 4000}
    started = time.perf_counter()
    assert evaluate(two, args) is True
    assert time.perf_counter() - started < 0.05
    # four of them pass cel-cpp's budget of 10,000 iterations: a refusal, quickly
    four = " && ".join(f"args.l.all(x{i}, x{i} >= 0)" for i in range(4))
    rule = CompiledRule(
        "8", "four", RuleScope.GLOBAL, RuleAction.ALLOW, "", lambda spec: True, _condition(cel.condition_compile(four))
    )
    started = time.perf_counter()
    match = decide([rule], SPEC, cel.activation(variables(args)))
    assert time.perf_counter() - started < 0.05
    assert (match.action, match.failed) == (RuleAction.DENY, True)
    assert "Iteration budget exceeded" in match.message


# --- saving, the cache and the change log ------------------------------------------------------------


def test_a_saved_rule_is_in_the_change_log_and_reaches_the_callers_rules(acme):
    tenant, account = acme
    ctx = ToolInvocationContext(run_id="r", tool_call_id="c", tenant_id=str(tenant.pk), actor_id=str(account.pk))

    saved = argument_rule_save(rule=new_rule(name="no-paris", tenant=tenant, condition='args.timezone == "Paris"'))

    change = Change.objects.get(action="argument_rule.create")
    assert change.after["condition"] == 'args.timezone == "Paris"'
    assert change.after["tenant"] == tenant.pk
    [compiled] = rules_for_caller(ctx=ctx).arguments
    assert (compiled.rule_id, compiled.scope, compiled.action) == (str(saved.pk), RuleScope.TENANT, RuleAction.DENY)
    assert rules_for_caller(ctx=ctx).caller == {
        "tenant": "acme",
        "tenant_id": str(tenant.pk),
        "service_account": "bot",
        "service_account_id": str(account.pk),
    }

    saved.action = "allow"
    argument_rule_save(rule=saved)
    update = Change.objects.get(action="argument_rule.update")
    assert (update.before["action"], update.after["action"]) == ("deny", "allow")

    scoped_rule_delete(row=saved)
    governance_cache.refresh()  # what the runner's freshness stage does first in every call
    assert Change.objects.get(action="argument_rule.delete").before["name"] == "no-paris"
    assert rules_for_caller(ctx=ctx).arguments == ()


def test_another_tenants_rules_do_not_reach_a_caller(acme):
    tenant, account = acme
    other = TenantFactory(slug="other")
    argument_rule_save(rule=new_rule(name="theirs", tenant=other))
    ctx = ToolInvocationContext(run_id="r", tool_call_id="c", tenant_id=str(tenant.pk), actor_id=str(account.pk))

    assert rules_for_caller(ctx=ctx).arguments == ()


# --- result guards ---------------------------------------------------------------------------------------

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA1234567890abcdef\nQWERTY==\n-----END RSA PRIVATE KEY-----"


def builtin_guard(action=guardrails.GuardAction.REDACT):
    detectors = tuple(guardrails.Detector(label, pattern_compile(p)) for label, p in BUILTIN_DETECTORS.values())
    return guardrails.ResultGuard("9", "secrets", action, "", detectors, lambda spec: True)


def test_the_builtin_detectors_redact_an_aws_key_and_a_pem_block_and_count_them():
    text = f"config: {AWS_KEY}\n{PEM}\nbye"

    value, content, outcome = guardrails.scan(
        [builtin_guard()], {"text": text, "n": 3}, ({"type": "text", "text": text},)
    )

    expected = "config: [redacted: aws key]\n[redacted: private key]\nbye"
    assert value == {"text": expected, "n": 3}
    assert content == ({"type": "text", "text": expected},)
    assert outcome.audit() == {"action": "redact", "guards": ["9"], "found": {"aws key": 2, "private key": 2}}


def test_a_pem_block_cut_short_is_redacted_to_the_end_and_a_clean_result_passes_untouched():
    cut = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA"
    assert guardrails.scan([builtin_guard()], {"t": f"x {cut}"}, None)[0] == {"t": "x [redacted: private key]"}
    assert guardrails.scan([builtin_guard()], {"t": "AKIA is a prefix"}, None) == (
        {"t": "AKIA is a prefix"},
        None,
        None,
    )


def test_guards_refuse_patterns_re2_cannot_run_or_that_match_everything(acme):
    base = {"name": "g", "tools": ["*"], "detectors": []}
    for patterns, says in [
        (["(?<=x)secret"], "not a valid RE2 pattern"),
        ([r"(\w+)\1"], "not a valid RE2 pattern"),
        (["a*"], "matches the empty text"),
        (["x" * 600], "at most 500"),
    ]:
        with pytest.raises(RuleInvalid) as refused:
            result_guard_save(guard=ResultGuard(**base, patterns=patterns))
        assert says in refused.value.problems["patterns"]
    with pytest.raises(RuleInvalid) as refused:
        result_guard_save(guard=ResultGuard(**base, patterns=[]))
    assert "looks for nothing" in refused.value.problems["detectors"]
    with pytest.raises(RuleInvalid) as refused:
        result_guard_save(guard=ResultGuard(name="g", tools=[], detectors=["private_key"]))
    assert "covers no tool" in refused.value.problems["tools"]


def test_an_operator_pattern_built_to_backtrack_runs_in_linear_time(acme):
    guard = result_guard_save(guard=ResultGuard(name="g", tools=["*"], patterns=["(x+x+)+y"]))
    ctx = ToolInvocationContext(run_id="r", tool_call_id="c", tenant_id=str(acme[0].pk), actor_id=str(acme[1].pk))
    [compiled] = rules_for_caller(ctx=ctx).guards
    assert compiled.guard_id == str(guard.pk)

    started = time.perf_counter()
    _value, _content, outcome = guardrails.scan([compiled], {"t": "x" * 100_000}, None)
    assert outcome is None
    assert time.perf_counter() - started < 0.1


def test_every_worked_example_of_the_docs_compiles():
    text = (Path(__file__).resolve().parents[2] / "docs/rules.md").read_text()
    examples = re.findall(r"```cel\n(.*?)\n```", text, re.DOTALL)

    assert len(examples) >= 12
    assert {example: cel.condition_problem(example) for example in examples} == dict.fromkeys(examples)
