"""The catalog a caller sees: enabled tools its policy lets it run.

Derived from the same source and policy the runner enforces, so what a model is
offered and what the runner accepts cannot drift apart (the runner checks again
at call time: defense in depth).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from runner.ports import PolicyDecider, ToolSource
from runner.types import Decision, ToolInvocationContext, ToolSpec

# A tool awaiting approval is still offered: the caller needs to know it exists
# to ask; the runner answers approval_required until an operator approves.
VISIBLE_DECISIONS = frozenset({Decision.ALLOW, Decision.REQUIRE_APPROVAL})


def catalog_for(ctx: ToolInvocationContext, source: ToolSource, policy: PolicyDecider) -> list[ToolSpec]:
    """Specs the caller may run now, in id order; a toolset's scope (`ctx.tool_scope`) only narrows them."""
    specs = []
    scope = ctx.tool_scope
    for tool in source.list():
        if scope is not None and tool.tool_id not in scope:
            continue
        if not source.is_enabled(tool.tool_id):
            continue
        if policy.decide(ctx, tool.spec, args_sha256=None).decision in VISIBLE_DECISIONS:
            specs.append(tool.spec)
    return sorted(specs, key=lambda spec: spec.name)


SUGGESTION_CUTOFF = 0.6
NAMESPACE_SEPARATOR = "__"


def closest_tool_id(tool_id: str, names: Iterable[str]) -> str | None:
    """The id among `names` that `tool_id` most likely misspells, or None when none is near.

    Ids are compared by their own name (after the last `__`), not as whole
    strings: `mcp__everything__echo` and `mcp__everything__get-tiny-image`
    share a long server prefix, which alone made difflib call them close. A
    bare name (`echo`) finds the id of that name; an id with a namespace must
    be near as a whole too (difflib's ratio ≥ 0.6 both ways).
    """
    wanted = _own_name(tool_id)
    scored = []
    for name in names:
        own = difflib.SequenceMatcher(None, wanted, _own_name(name)).ratio()
        if own < SUGGESTION_CUTOFF:
            continue
        whole = difflib.SequenceMatcher(None, tool_id, name).ratio()
        if NAMESPACE_SEPARATOR in tool_id and whole < SUGGESTION_CUTOFF:
            continue
        scored.append((own, whole, name))
    return max(scored)[2] if scored else None


def _own_name(tool_id: str) -> str:
    return tool_id.rsplit(NAMESPACE_SEPARATOR, 1)[-1]


def unknown_tool_message(tool_id: str, catalog: Iterable[ToolSpec]) -> str:
    """What an unknown id answers: the closest id of the caller's own catalog when one is near.

    Only ids the caller may list anyway are ever suggested, so the hint reveals nothing.
    """
    closest = closest_tool_id(tool_id, (spec.name for spec in catalog))
    if closest is None:
        return "no such tool; the catalog (GET /api/v1/tools, or MCP tools/list) lists the tools you may call"
    return f"no such tool; did you mean {closest!r}?"
