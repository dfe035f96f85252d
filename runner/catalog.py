"""The catalog a caller sees: enabled tools its policy lets it run.

Derived from the same source and policy the runner enforces, so what a model is
offered and what the runner accepts cannot drift apart (the runner checks again
at call time: defense in depth).
"""

from __future__ import annotations

from runner.ports import PolicyDecider, ToolSource
from runner.types import Decision, ToolInvocationContext, ToolSpec

# A tool awaiting approval is still offered: the caller needs to know it exists
# to ask; the runner answers approval_required until an operator approves.
VISIBLE_DECISIONS = frozenset({Decision.ALLOW, Decision.REQUIRE_APPROVAL})


def catalog_for(ctx: ToolInvocationContext, source: ToolSource, policy: PolicyDecider) -> list[ToolSpec]:
    """Specs the caller may run now, in id order."""
    specs = []
    for tool in source.list():
        if not source.is_enabled(tool.tool_id):
            continue
        if policy.decide(ctx, tool.spec, args_sha256=None).decision in VISIBLE_DECISIONS:
            specs.append(tool.spec)
    return sorted(specs, key=lambda spec: spec.name)
