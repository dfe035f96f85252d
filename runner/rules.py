"""Argument rules: what a call may do, decided on its arguments, after input validation and before the broker.

A rule covers some tools (the adapter gives each rule a `covers` test built
from ids, `*` patterns and tags), holds a compiled condition over the call
(`args`, `tool`, `caller`, `subject`, `connection`, `now`) and an action. The
conditions are CEL, compiled by the adapter when the rules are loaded into
the governance cache (once per governance generation): the runner sees only
callables, so it depends on no expression library.

Precedence, the one rule of this module (docs/rules.md says it for operators):

1. The most specific scope that has a say wins: service account, then tenant,
   then global. A scope has a say when one of its rules covering the tool
   matched, or failed to evaluate.
2. Within that scope the strictest action wins: deny, then require_approval,
   then require_confirmation, then allow. An `allow` is the exception to a
   broader scope's deny, and only that: it never widens what the policy allows.
3. A condition that fails to evaluate (a missing field, a type mismatch) counts
   as a deny of its scope: a rule that cannot be read is a refusal, never a pass.

No rule has a say: the call goes on as the policy decided.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runner.types import ToolSpec


class RuleAction(enum.StrEnum):
    DENY = "deny"
    REQUIRE_APPROVAL = "require_approval"
    REQUIRE_CONFIRMATION = "require_confirmation"
    ALLOW = "allow"


# Within one scope the strictest matched action wins.
STRICTNESS = {
    RuleAction.DENY: 3,
    RuleAction.REQUIRE_APPROVAL: 2,
    RuleAction.REQUIRE_CONFIRMATION: 1,
    RuleAction.ALLOW: 0,
}


class RuleScope(enum.IntEnum):
    """How specific a rule is: a higher value wins over a lower one."""

    GLOBAL = 0
    TENANT = 1
    SERVICE_ACCOUNT = 2


class ConditionError(Exception):
    """A condition could not be evaluated on this call; the message names why, never an argument's value."""


# A compiled condition: true when the rule applies; raises ConditionError when it cannot say.
Condition = Callable[[Any], bool]
ToolCover = Callable[[ToolSpec], bool]


@dataclass(frozen=True, slots=True)
class ArgumentRule:
    """One active rule as the runner evaluates it (compiled once per governance generation)."""

    rule_id: str
    name: str
    scope: RuleScope
    action: RuleAction
    message: str
    covers: ToolCover = field(repr=False)
    condition: Condition = field(repr=False)


@dataclass(frozen=True, slots=True)
class RuleMatch:
    """The rule that decided a call: its id, action and the operator's message for the model.

    `failed` is set when the deciding rule's condition could not be evaluated (the call is refused).
    """

    rule_id: str
    name: str
    action: RuleAction
    message: str
    scope: RuleScope
    failed: bool = False


def decide(rules: Sequence[ArgumentRule], spec: ToolSpec, activation: Any) -> RuleMatch | None:
    """The deciding rule for this call under the precedence above, or None when no rule has a say."""
    best: RuleMatch | None = None
    for rule in sorted((rule for rule in rules if rule.covers(spec)), key=_order):
        if best is not None and rule.scope < best.scope:
            break  # a more specific scope already had its say
        try:
            matched = rule.condition(activation)
        except ConditionError as exc:
            return RuleMatch(
                rule.rule_id,
                rule.name,
                RuleAction.DENY,
                f"refused: rule {rule.name!r} could not be evaluated on these arguments ({exc}); "
                "nothing ran. Ask an operator to fix the rule (has() guards optional fields).",
                rule.scope,
                failed=True,
            )
        if matched and (best is None or STRICTNESS[rule.action] > STRICTNESS[best.action]):
            best = RuleMatch(rule.rule_id, rule.name, rule.action, rule.message, rule.scope)
    return best


def _order(rule: ArgumentRule) -> tuple[int, int, str]:
    """Most specific scope first, strictest action first within it (ids break ties, for a stable audit)."""
    return (-rule.scope, -STRICTNESS[rule.action], rule.rule_id)


def activation_for(
    *,
    args: Any,
    spec: ToolSpec,
    caller: Mapping[str, Any],
    subject_id: str | None,
    connection_id: str | None,
    personal_connection: bool,
    now: Any,
) -> dict[str, Any]:
    """The variables a condition reads (docs/rules.md lists them); nothing here is a secret."""
    return {
        "args": args if isinstance(args, Mapping) else {},
        "tool": {
            "id": spec.name,
            "effect": spec.effect.value,
            "consequence": spec.consequence_level.value,
            "tags": list(spec.tags),
            "provider": spec.provider or "",
        },
        "caller": dict(caller),
        "subject": {"present": subject_id is not None, "id": subject_id or ""},
        "connection": {
            "present": connection_id is not None,
            "id": connection_id or "",
            "provider": (spec.provider or "") if connection_id is not None else "",
            "personal": personal_connection,
        },
        "now": now,
    }
