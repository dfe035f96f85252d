"""Which calls need a person: the policy's effects, level and named tools, and the tool's own confirmation."""

from __future__ import annotations

import pytest

from policies_app.selectors import EffectivePolicy
from runner.types import Budgets, ConsequenceLevel, ToolEffect, ToolSpec


def spec(*, effect=ToolEffect.READ_ONLY, level=ConsequenceLevel.LOW, confirm=False, name="core__x") -> ToolSpec:
    return ToolSpec(
        name=name,
        description="x",
        input_schema={"type": "object"},
        effect=effect,
        requires_connection=False,
        provider=None,
        schema_hash="0" * 64,
        consequence_level=level,
        requires_confirmation=confirm,
    )


def policy(**overrides) -> EffectivePolicy:
    fields = {
        "name": "p",
        "allowed_tools": frozenset({"core__x"}),
        "approval_effects": frozenset(),
        "budgets": Budgets(),
    }
    return EffectivePolicy(**{**fields, **overrides})


def test_nothing_asks_for_approval_by_default() -> None:
    assert policy().approval_reason(spec()) is None


def test_a_tool_that_requires_confirmation_needs_approval_under_any_policy() -> None:
    assert policy().approval_reason(spec(confirm=True)) == "the tool requires confirmation of every call"


def test_requires_confirmation_is_never_inferred_from_the_effect() -> None:
    harmful = spec(effect=ToolEffect.EXTERNAL_SIDE_EFFECT, level=ConsequenceLevel.HIGH)

    assert policy().approval_reason(harmful) is None


def test_named_tools_need_approval() -> None:
    assert policy(approval_tools=frozenset({"core__x"})).approval_reason(spec()) == (
        "policy p requires approval for this tool"
    )
    assert policy(approval_tools=frozenset({"core__y"})).approval_reason(spec()) is None


def test_effects_need_approval() -> None:
    rule = policy(approval_effects=frozenset({"state_change"}))

    assert (
        rule.approval_reason(spec(effect=ToolEffect.STATE_CHANGE))
        == "policy p requires approval for state_change tools"
    )
    assert rule.approval_reason(spec(effect=ToolEffect.READ_ONLY)) is None


@pytest.mark.parametrize(
    ("threshold", "level", "needed"),
    [
        (ConsequenceLevel.MEDIUM, ConsequenceLevel.LOW, False),
        (ConsequenceLevel.MEDIUM, ConsequenceLevel.MEDIUM, True),
        (ConsequenceLevel.MEDIUM, ConsequenceLevel.HIGH, True),
        (ConsequenceLevel.HIGH, ConsequenceLevel.MEDIUM, False),
        (ConsequenceLevel.LOW, ConsequenceLevel.LOW, True),
    ],
)
def test_a_consequence_level_and_above_need_approval(threshold, level, needed) -> None:
    reason = policy(approval_at_or_above=threshold).approval_reason(spec(level=level))

    assert (reason is not None) is needed
    if needed:
        assert f"at consequence level {threshold.value} or above (this tool: {level.value})" in reason
