"""tools_app's side of the runner's ports: tool source, idempotency and audit."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence

from django.utils import timezone

from core.outages import outage_guard
from runner.bound import BoundTool
from runner.ports import Claimed, Conflict, Replay
from runner.types import ErrorCode, ToolExecResult, ToolInvocationContext, ToolInvocationRecord
from tools_app.audit import claim_ref, invocation_claim, invocation_record, invocation_take_over
from tools_app.models import ToolInvocation
from tools_app.selectors import enabled_tool_ids

CLAIM_ATTEMPTS = 3
OTHER_REQUEST = "tool_call_id was already used for a different request; use a new tool_call_id"
STILL_RUNNING = "a call with this tool_call_id is still running; repeat it later"


class CatalogToolSource:
    """Bound code tools, switched on and off by their Tool rows."""

    def __init__(self, tools: Mapping[str, BoundTool]) -> None:
        self._tools = dict(tools)
        self._ordered = tuple(self._tools[tool_id] for tool_id in sorted(self._tools))

    def get(self, tool_id: str) -> BoundTool | None:
        return self._tools.get(tool_id)

    def list(self) -> Sequence[BoundTool]:
        return self._ordered

    @outage_guard
    def is_enabled(self, tool_id: str) -> bool:
        return tool_id in enabled_tool_ids()

    def is_pending(self, tool_id: str) -> bool:
        return False  # a code tool is bound from the start


class DatabaseIdempotencyStore:
    """tool_call_id claims as leased pending audit rows; repeats replay what was recorded, to its caller only."""

    @outage_guard
    def claim(
        self, ctx: ToolInvocationContext, tool_id: str, *, args_sha256: str | None, lease_s: float, wait_s: float
    ) -> Claimed | Replay | Conflict:
        deadline = time.monotonic() + wait_s  # no repeat waits past its own budget
        for _attempt in range(CLAIM_ATTEMPTS):
            row = invocation_claim(ctx=ctx, tool_id=tool_id, args_sha256=args_sha256, lease_s=lease_s)
            if row is not None:
                return Claimed(ref=claim_ref(row))
            holder = self._settled_holder(ctx, tool_id, args_sha256, deadline)
            if holder is None:
                continue  # the holder was refused before running and let the id go: decide afresh
            if not _same_request(holder, ctx, tool_id, args_sha256):
                return Conflict(OTHER_REQUEST)
            if holder.state == ToolInvocation.State.DONE:
                return Replay(_recorded_result(holder))
            if not _lease_expired(holder):
                return Conflict(STILL_RUNNING, retry_after_s=_seconds_left(holder))
            taken = invocation_take_over(row=holder, lease_s=lease_s)
            if taken is not None:
                return Claimed(ref=claim_ref(taken))
        return Conflict(STILL_RUNNING, retry_after_s=1)

    def _settled_holder(
        self, ctx: ToolInvocationContext, tool_id: str, args_sha256: str | None, deadline: float
    ) -> ToolInvocation | None:
        """The row holding the id, once it is done, leased out, or our patience is.

        Another caller's row is answered at once: it learns nothing and waits for nothing.
        """
        pause = 0.01
        while True:
            holder = ToolInvocation.objects.filter(
                tenant_id=ctx.tenant_id, tool_call_id=ctx.tool_call_id, executed=True
            ).first()
            if (
                holder is None
                or holder.state == ToolInvocation.State.DONE
                or not _same_request(holder, ctx, tool_id, args_sha256)
                or _lease_expired(holder)
                or time.monotonic() >= deadline
            ):
                return holder
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, 0.2)


def _same_request(row: ToolInvocation, ctx: ToolInvocationContext, tool_id: str, args_sha256: str | None) -> bool:
    """The same caller (service account, subject and grant) asking the same thing (tool, args, connection)."""
    return (
        str(row.service_account_id) == ctx.actor_id
        and row.subject_id == (ctx.subject_id or "")
        and row.grant_id == (ctx.grant_id or "")
        and row.connection_id == (ctx.connection_id or "")
        and row.tool_id == tool_id
        and row.args_sha256 == (args_sha256 or "")
    )


def _lease_expired(row: ToolInvocation) -> bool:
    return row.lease_expires_at is not None and row.lease_expires_at <= timezone.now()


def _seconds_left(row: ToolInvocation) -> int:
    if row.lease_expires_at is None:
        return 1
    return max(1, math.ceil((row.lease_expires_at - timezone.now()).total_seconds()))


def _recorded_result(row: ToolInvocation) -> ToolExecResult:
    content = tuple(row.content) if row.content is not None else None
    return ToolExecResult(
        tool_call_id=row.tool_call_id,
        tool_id=row.tool_id,
        ok=row.ok,
        value=row.result,
        content=content,
        # A value that only wraps the blocks is no structured content of the tool's own.
        structured=content is None or row.result != {"content": list(content)},
        error_code=ErrorCode(row.error_code) if row.error_code else None,
        safe_message=row.safe_message or None,
        started_at=row.started_at,
        ended_at=row.ended_at,
        executed=True,
    )


class DatabaseAuditSink:
    @outage_guard
    def record(self, record: ToolInvocationRecord) -> None:
        invocation_record(record)
