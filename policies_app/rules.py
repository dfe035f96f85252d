"""Argument rules and result guards: their checks at save, the detector table, and the runner's compiled view.

Rows (models.ArgumentRule, models.ResultGuard) are validated here before any
write (`rule_problems`, `guard_problems`: what an operator reads, the fix
included) and compiled into the runner's objects (runner/rules.py,
runner/guardrails.py) once per governance generation: every active row is
read into the governance cache (one query per table), and each caller's share
is cut from it (one query for the caller's names). Whether any rule is active
at all rides on the generation read (policies_app/governance.py), so a
deployment without rules never queries the rule tables.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import re2
from django.db.models import Q

from policies_app.catalog import tool_ids_known, tool_server_prefixes
from policies_app.cel import ConditionInvalid, activation, condition_compile, condition_evaluate
from policies_app.governance import governance_cache
from policies_app.models import (
    ArgumentRule,
    ResultGuard,
    ScopedRule,
    ServiceAccount,
)
from policies_app.toolpatterns import ToolPatterns, is_pattern, pattern_problem
from runner import guardrails, rules
from runner.ports import NO_RULES, CallRules
from runner.types import ToolInvocationContext, ToolSpec

logger = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 500
MAX_TOOL_ENTRIES = 200
MAX_PATTERNS = 20
MAX_PATTERN_CHARS = 500
# RE2's own memory bound per compiled pattern: a pattern whose automaton would grow past it is refused at save.
RE2_MAX_MEM = 1 << 20

# The built-in detectors: kind -> (label in `[redacted: ...]` and the audit, RE2 pattern). Each is written
# for RE2 (linear time whatever the text); a PEM block without its END line is redacted to the end of the text.
BUILTIN_DETECTORS: dict[str, tuple[str, str]] = {
    "aws_access_key": ("aws key", r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA|ANVA|APKA)[A-Z0-9]{16}\b"),
    "aws_secret_key": (
        "aws secret key",
        r"(?i)aws.{0,20}?(?:secret|private).{0,20}?['\"]?\s*[:=]\s*['\"]?[A-Za-z0-9/+]{40}\b",
    ),
    "private_key": (
        "private key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----(?s:.*?)"
        r"(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\z)",
    ),
}


def _re2_options() -> Any:
    options = re2.Options()
    options.max_mem = RE2_MAX_MEM
    options.log_errors = False
    return options


def pattern_compile(pattern: str) -> Any:
    return re2.compile(pattern, options=_re2_options())


# --- checks at save -------------------------------------------------------------------------


def _scope_problems(row: ScopedRule) -> dict[str, str]:
    problems: dict[str, str] = {}
    if row.service_account_id is not None:
        account = ServiceAccount.objects.filter(pk=row.service_account_id).only("tenant_id").first()
        if account is None:
            problems["service_account"] = "no such service account"
        elif row.tenant_id is None:
            row.tenant_id = account.tenant_id  # a service account names its tenant
        elif account.tenant_id != row.tenant_id:
            problems["service_account"] = "this service account belongs to another tenant"
    return problems


def _tools_problems(tools: Any, tags: Any) -> dict[str, str]:
    problems: dict[str, str] = {}
    if not isinstance(tools, list) or not all(isinstance(entry, str) and entry for entry in tools):
        return {"tools": "a list of tool ids or patterns"}
    if not isinstance(tags, list) or not all(isinstance(tag, str) and tag for tag in tags):
        return {"tags": "a list of tags"}
    if not tools and not tags:
        return {"tools": "the rule covers no tool: name tool ids, patterns (e.g. github__*, or * for all) or tags"}
    if len(tools) + len(tags) > MAX_TOOL_ENTRIES:
        return {"tools": f"at most {MAX_TOOL_ENTRIES} tool ids, patterns and tags"}
    known = tool_ids_known()
    prefixes = tool_server_prefixes()
    for entry in tools:
        if is_pattern(entry):
            problem = pattern_problem(entry, known_ids=known, server_prefixes=prefixes)
        elif entry not in known and not any(entry.startswith(prefix) for prefix in prefixes):
            problem = f"unknown tool id {entry!r}; check it against `policy export` or the admin's tool list"
        else:
            problem = None
        if problem is not None:
            problems["tools"] = problem
            break
    return problems


def rule_problems(rule: ArgumentRule) -> dict[str, str]:
    """Why this rule cannot be saved, field by field (empty: it can)."""
    problems = _scope_problems(rule)
    problems.update(_tools_problems(rule.tools, rule.tags))
    if rule.action not in rules.RuleAction.__members__.values():
        problems["action"] = "one of " + ", ".join(action.value for action in rules.RuleAction)
    if len(rule.message or "") > MAX_MESSAGE_CHARS:
        problems["message"] = f"at most {MAX_MESSAGE_CHARS} characters"
    try:
        condition_compile(rule.condition or "")
    except ConditionInvalid as exc:
        problems["condition"] = str(exc)
    return problems


def guard_problems(guard: ResultGuard) -> dict[str, str]:
    problems = _scope_problems(guard)
    problems.update(_tools_problems(guard.tools, guard.tags))
    detectors, patterns = guard.detectors, guard.patterns
    if not isinstance(detectors, list) or not all(kind in BUILTIN_DETECTORS for kind in detectors):
        problems["detectors"] = "a list of: " + ", ".join(BUILTIN_DETECTORS)
    if not isinstance(patterns, list) or not all(isinstance(p, str) and p for p in patterns):
        problems["patterns"] = "a list of regular expressions"
    elif len(patterns) > MAX_PATTERNS:
        problems["patterns"] = f"at most {MAX_PATTERNS} patterns"
    else:
        for number, pattern in enumerate(patterns, start=1):
            problem = _pattern_problem(pattern)
            if problem is not None:
                problems["patterns"] = f"pattern {number}: {problem}"
                break
    if not problems and not detectors and not patterns:
        problems["detectors"] = "the guard looks for nothing: choose detectors or write patterns"
    if guard.action not in guardrails.GuardAction.__members__.values():
        problems["action"] = "one of " + ", ".join(action.value for action in guardrails.GuardAction)
    if guard.arguments not in guardrails.ArgumentScan.__members__.values():
        problems["arguments"] = "one of " + ", ".join(scan.value for scan in guardrails.ArgumentScan)
    if len(guard.message or "") > MAX_MESSAGE_CHARS:
        problems["message"] = f"at most {MAX_MESSAGE_CHARS} characters"
    return problems


def _pattern_problem(pattern: str) -> str | None:
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"{len(pattern)} characters; at most {MAX_PATTERN_CHARS}"
    try:
        compiled = pattern_compile(pattern)
    except re2.error as exc:
        return f"not a valid RE2 pattern ({exc}); look-around and back-references do not exist in RE2"
    if compiled.search("") is not None:
        return "it matches the empty text, so it would mark every string; make it match the secret itself"
    return None


# --- the runner's compiled view ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Loaded:
    """Every active rule and guard, compiled, with the scope each belongs to (for cutting per caller)."""

    arguments: tuple[tuple[int | None, str | None, rules.ArgumentRule], ...]
    guards: tuple[tuple[int | None, str | None, guardrails.ResultGuard], ...]


def _scope_of(row: ScopedRule) -> rules.RuleScope:
    if row.service_account_id:
        return rules.RuleScope.SERVICE_ACCOUNT
    return rules.RuleScope.TENANT if row.tenant_id else rules.RuleScope.GLOBAL


def _covers(tools: Iterable[str], tags: Iterable[str]) -> rules.ToolCover:
    patterns = ToolPatterns.compile(tools)
    tag_set = frozenset(tags)

    def covers(spec: ToolSpec) -> bool:
        return patterns.allows(spec.name) or not tag_set.isdisjoint(spec.tags)

    return covers


def _condition(expression: Any) -> rules.Condition:
    def condition(prepared: Any) -> bool:
        return condition_evaluate(expression, prepared)

    return condition


def _load() -> _Loaded:
    """One query per table per governance generation; a row that no longer compiles is refused, not skipped."""
    arguments = []
    for row in ArgumentRule.objects.filter(is_active=True):
        try:
            condition = _condition(condition_compile(row.condition))
        except ConditionInvalid as exc:  # saved before a stricter check: it refuses what it covers
            logger.error("argument rule %s no longer compiles: %s", row.name, exc)
            condition = _failing(str(exc))
        rule = rules.ArgumentRule(
            rule_id=str(row.pk),
            name=row.name,
            scope=_scope_of(row),
            action=rules.RuleAction(row.action),
            message=row.message,
            covers=_covers(row.tools, row.tags),
            condition=condition,
        )
        arguments.append((row.tenant_id, str(row.service_account_id) if row.service_account_id else None, rule))
    guards = []
    for row in ResultGuard.objects.filter(is_active=True):
        detectors = [
            guardrails.Detector(label, pattern_compile(pattern))
            for label, pattern in (BUILTIN_DETECTORS[kind] for kind in row.detectors if kind in BUILTIN_DETECTORS)
        ]
        detectors += [guardrails.Detector(f"{row.name} pattern {n}", pattern_compile(p)) for n, p in _numbered(row)]
        guard = guardrails.ResultGuard(
            guard_id=str(row.pk),
            name=row.name,
            action=guardrails.GuardAction(row.action),
            message=row.message,
            detectors=tuple(detectors),
            covers=_covers(row.tools, row.tags),
            arguments=guardrails.ArgumentScan(row.arguments),
        )
        guards.append((row.tenant_id, str(row.service_account_id) if row.service_account_id else None, guard))
    return _Loaded(arguments=tuple(arguments), guards=tuple(guards))


def _numbered(row: ResultGuard) -> list[tuple[int, str]]:
    return list(enumerate(row.patterns, start=1))


def _failing(reason: str) -> rules.Condition:
    def condition(prepared: Any) -> bool:
        raise rules.ConditionError(reason)

    return condition


def _applies(tenant_id: int | None, service_account_id: str | None, ctx: ToolInvocationContext) -> bool:
    if tenant_id is None:
        return True
    if str(tenant_id) != str(ctx.tenant_id):
        return False
    return service_account_id is None or service_account_id == ctx.actor_id


def rules_for_caller(*, ctx: ToolInvocationContext) -> CallRules:
    """The compiled rules and guards covering this caller, from the governance cache (no query when warm)."""
    if not governance_cache.rules_active:  # known from the generation read: no rule table is queried
        return NO_RULES
    loaded = governance_cache.get(("rules",), _load)
    if not loaded.arguments and not loaded.guards:
        return NO_RULES
    return governance_cache.get(("rules", str(ctx.tenant_id), ctx.actor_id), lambda: _cut(loaded, ctx))


def _cut(loaded: _Loaded, ctx: ToolInvocationContext) -> CallRules:
    arguments = tuple(rule for t, s, rule in loaded.arguments if _applies(t, s, ctx))
    guards = tuple(guard for t, s, guard in loaded.guards if _applies(t, s, ctx))
    if not arguments and not guards:
        return NO_RULES
    return CallRules(arguments=arguments, guards=guards, caller=_caller_variable(ctx), prepare=activation)


def _caller_variable(ctx: ToolInvocationContext) -> dict[str, Any]:
    """`caller` in conditions: the tenant's slug and the account's name (what operators write), and their ids."""
    account = ServiceAccount.objects.select_related("tenant").filter(pk=ctx.actor_id).first()
    return {
        "tenant": account.tenant.slug if account is not None else "",
        "tenant_id": str(ctx.tenant_id),
        "service_account": account.name if account is not None else "",
        "service_account_id": ctx.actor_id,
    }


# --- what a tenant's portal shows ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RuleShown:
    """One active rule or guard as a tenant's members read it: what it covers, does and says; no operator secret.

    A guard's own regular expressions are not shown (an operator may write part
    of an internal token format in one), only how many there are; a global
    rule's condition that reads `caller` may name other tenants, so it is
    described, not shown.
    """

    kind: str  # "rule" or "guard"
    name: str
    scope: str  # "global", "tenant" or "service account <name>"
    tools: tuple[str, ...]
    tags: tuple[str, ...]
    action: str
    message: str
    condition: str | None
    detectors: tuple[str, ...] = ()
    pattern_count: int = 0
    arguments: str = "ignore"


def _scope_shown(row: ScopedRule) -> str:
    if row.service_account_id:
        return f"service account {row.service_account.name}"
    return "tenant" if row.tenant_id else "global"


def rules_shown_to_tenant(*, tenant_id: int) -> list[RuleShown]:
    """The active argument rules and result guards that can apply to this tenant's calls, most specific first."""
    shown: list[RuleShown] = []
    for rule in (
        ArgumentRule.objects.filter(is_active=True)
        .filter(Q(tenant_id=tenant_id) | Q(tenant__isnull=True))
        .select_related("service_account")
        .order_by("name")
    ):
        hidden = rule.tenant_id is None and "caller" in rule.condition
        shown.append(
            RuleShown(
                kind="rule",
                name=rule.name,
                scope=_scope_shown(rule),
                tools=tuple(rule.tools),
                tags=tuple(rule.tags),
                action=rule.action,
                message=rule.message,
                condition=None if hidden else rule.condition,
            )
        )
    for guard in (
        ResultGuard.objects.filter(is_active=True)
        .filter(Q(tenant_id=tenant_id) | Q(tenant__isnull=True))
        .select_related("service_account")
        .order_by("name")
    ):
        shown.append(
            RuleShown(
                kind="guard",
                name=guard.name,
                scope=_scope_shown(guard),
                tools=tuple(guard.tools),
                tags=tuple(guard.tags),
                action=guard.action,
                message=guard.message,
                condition=None,
                detectors=tuple(BUILTIN_DETECTORS[kind][0] for kind in guard.detectors if kind in BUILTIN_DETECTORS),
                pattern_count=len(guard.patterns),
                arguments=guard.arguments,
            )
        )
    return sorted(shown, key=lambda row: (row.kind, _rank(row.scope), row.name))


def _rank(scope: str) -> int:
    """Most specific first, the order precedence reads them in."""
    if scope.startswith("service account"):
        return 0
    return 1 if scope == "tenant" else 2
