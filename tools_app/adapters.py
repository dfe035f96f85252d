"""tools_app's side of the runner's ports: tool source, idempotency and audit."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from runner.bound import BoundTool
from runner.ports import Claimed, Conflict, Replay
from runner.types import ErrorCode, ToolExecResult, ToolInvocationContext, ToolInvocationRecord
from tools_app.models import ToolInvocation
from tools_app.selectors import enabled_tool_ids
from tools_app.services import invocation_claim, invocation_record

# How long a repeat waits for the first call with its id to finish (the longest tool budget).
IDEMPOTENCY_WAIT_S = 65.0
CLAIM_ATTEMPTS = 3


class CatalogToolSource:
    """Bound code tools, switched on and off by their Tool rows."""

    def __init__(self, tools: Mapping[str, BoundTool]) -> None:
        self._tools = dict(tools)
        self._ordered = tuple(self._tools[tool_id] for tool_id in sorted(self._tools))

    def get(self, tool_id: str) -> BoundTool | None:
        return self._tools.get(tool_id)

    def list(self) -> Sequence[BoundTool]:
        return self._ordered

    def is_enabled(self, tool_id: str) -> bool:
        return tool_id in enabled_tool_ids()


class DatabaseIdempotencyStore:
    """tool_call_id claims as pending audit rows; repeats replay what was recorded."""

    def __init__(self, *, wait_s: float = IDEMPOTENCY_WAIT_S) -> None:
        self._wait_s = wait_s

    def claim(
        self, ctx: ToolInvocationContext, tool_id: str, *, args_sha256: str | None
    ) -> Claimed | Replay | Conflict:
        for _attempt in range(CLAIM_ATTEMPTS):
            row = invocation_claim(ctx=ctx, tool_id=tool_id, args_sha256=args_sha256)
            if row is not None:
                return Claimed(ref=str(row.pk))
            holder = self._wait_for_holder(ctx)
            if holder is None:
                continue  # the holder was refused before running and let the id go: decide afresh
            if holder.state == ToolInvocation.State.PENDING:
                return Conflict("a call with this tool_call_id is still running")
            same_request = (
                holder.tool_id == tool_id
                and holder.args_sha256 == (args_sha256 or "")
                and holder.connection_id == (ctx.connection_id or "")
            )
            if not same_request:
                return Conflict("tool_call_id was already used for a different request")
            return Replay(_recorded_result(holder))
        return Conflict("tool_call_id is contended; retry")

    def _wait_for_holder(self, ctx: ToolInvocationContext) -> ToolInvocation | None:
        deadline = time.monotonic() + self._wait_s
        pause = 0.01
        while True:
            holder = ToolInvocation.objects.filter(
                tenant_id=ctx.tenant_id, tool_call_id=ctx.tool_call_id, executed=True
            ).first()
            if holder is None or holder.state == ToolInvocation.State.DONE or time.monotonic() >= deadline:
                return holder
            time.sleep(pause)
            pause = min(pause * 2, 0.2)


def _recorded_result(row: ToolInvocation) -> ToolExecResult:
    return ToolExecResult(
        tool_call_id=row.tool_call_id,
        tool_id=row.tool_id,
        ok=row.ok,
        value=row.result,
        error_code=ErrorCode(row.error_code) if row.error_code else None,
        safe_message=row.safe_message or None,
        started_at=row.started_at,
        ended_at=row.ended_at,
        executed=True,
    )


class DatabaseAuditSink:
    def record(self, record: ToolInvocationRecord) -> None:
        invocation_record(record)
