"""Safe default adapters: what a port does when a deployment binds nothing else.

Each one fails closed (no credentials) or is a neutral
observer (log events, system clock), so a runner wired only with defaults can
never run more than it should.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

from runner.capabilities import AuthCapability
from runner.errors import BrokerError
from runner.ports import Lease, RateLimited
from runner.types import Budgets, ErrorCode, ToolEvent, ToolInvocationContext, ToolSpec

logger = logging.getLogger("toolgate.events")


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


class NoConnections:
    def resolve(self, ctx: ToolInvocationContext, spec: ToolSpec) -> AuthCapability:
        raise BrokerError(ErrorCode.CONNECTION_UNAVAILABLE, "no connection store is configured")


class _NoLease:
    def release(self) -> None:
        return None


class Unlimited:
    """No rate or concurrency limit beyond what the policy's own adapter enforces."""

    _lease = _NoLease()

    def admit(self, ctx: ToolInvocationContext) -> RateLimited | None:
        return None

    def acquire(
        self, ctx: ToolInvocationContext, tool_id: str, budgets: Budgets, *, lease_s: float
    ) -> Lease | RateLimited:
        return self._lease


class LoggingEventSink:
    def emit(self, event: ToolEvent) -> None:
        logger.debug(
            "%s %s %s run=%s ok=%s error=%s",
            event.kind.value,
            event.tool_call_id,
            event.tool_id,
            event.run_id,
            event.ok,
            event.error_code.value if event.error_code else "-",
        )
