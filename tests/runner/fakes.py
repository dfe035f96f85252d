"""In-memory fakes of the runner's ports: the runner's tests need no database."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from runner.bound import BoundTool, bind_tool
from runner.capabilities import AuthCapability, BearerAuth
from runner.contracts import ToolDefinition
from runner.errors import BrokerError
from runner.pipeline import ToolRunner, default_stages
from runner.ports import GrantView, Lease, PolicyDecision, RateLimited
from runner.types import (
    Budgets,
    Decision,
    ErrorCode,
    EventKind,
    ToolEvent,
    ToolInvocationContext,
    ToolInvocationRecord,
    ToolSpec,
)

TENANT = "tenant-a"
ACTOR = "service-1"
CONNECTION = "5b0c1a52-3d3c-4b8e-9a40-0d6f6c1f7e11"
OTHER_CONNECTION = "8e4f8d0e-5a8b-4f5c-8d8f-6a1f3a9b2c44"
GRANT = "grant-1"
T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


class FakeSource:
    def __init__(
        self, definitions: Iterable[ToolDefinition], *, disabled: Iterable[str] = (), pending: Iterable[str] = ()
    ) -> None:
        self.tools: dict[str, BoundTool] = {d.tool_id: bind_tool(d) for d in definitions}
        self.disabled = set(disabled)
        self.pending = set(pending)

    def get(self, tool_id: str) -> BoundTool | None:
        return self.tools.get(tool_id)

    def list(self) -> list[BoundTool]:
        return list(self.tools.values())

    def is_enabled(self, tool_id: str) -> bool:
        return tool_id not in self.disabled

    def is_pending(self, tool_id: str) -> bool:
        return tool_id in self.pending


@dataclass
class FakePolicy:
    """Allows the listed tools, asks approval for the listed effects, denies the rest."""

    allowed: set[str] = field(default_factory=set)
    approval_effects: set[str] = field(default_factory=set)
    budgets: Budgets = field(default_factory=Budgets)
    asked: list[tuple[str, str | None]] = field(default_factory=list)

    def decide(self, ctx: ToolInvocationContext, spec: ToolSpec, *, args_sha256: str | None) -> PolicyDecision:
        self.asked.append((spec.name, args_sha256))
        if spec.name not in self.allowed:
            return PolicyDecision(Decision.DENY)
        if spec.effect.value in self.approval_effects:
            return PolicyDecision(Decision.REQUIRE_APPROVAL, approval_id="apr-1")
        return PolicyDecision(Decision.ALLOW, budgets=self.budgets)


@dataclass
class FakeGrants:
    grants: dict[str, GrantView] = field(default_factory=dict)
    listed: list[tuple[str, str]] = field(default_factory=list)  # for_caller's questions, to count them

    def get(self, grant_id: str) -> GrantView | None:
        return self.grants.get(grant_id)

    def for_caller(self, tenant_id: str, actor_id: str) -> list[GrantView]:
        self.listed.append((tenant_id, actor_id))
        return [g for g in self.grants.values() if (g.tenant_id, g.actor_id) == (tenant_id, actor_id) and not g.revoked]


@dataclass
class FakeBroker:
    token: str = "tok-0123456789"
    error: BrokerError | None = None
    resolved: list[str | None] = field(default_factory=list)

    def resolve(self, ctx: ToolInvocationContext, spec: ToolSpec) -> AuthCapability:
        self.resolved.append(ctx.connection_id)
        if self.error is not None:
            raise self.error
        return BearerAuth(self.token)


class _Lease:
    def __init__(self, limiter: FakeLimiter) -> None:
        self._limiter = limiter

    def release(self) -> None:
        with self._limiter.lock:
            self._limiter.in_flight -= 1
            self._limiter.released += 1


@dataclass
class FakeGovernance:
    """Counts how often the runner asked for a fresh view of governance; `changes` apply then."""

    refreshes: int = 0
    changes: list[Callable[[], None]] = field(default_factory=list)

    def refresh(self) -> None:
        self.refreshes += 1
        while self.changes:
            self.changes.pop(0)()


@dataclass
class FakeLimiter:
    """Counts calls per minute and in flight, like the real adapter, without a cache."""

    calls: int = 0
    in_flight: int = 0
    released: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    admitted: int = 0
    fair_share: int | None = None  # calls admitted before fairness refuses; None = unlimited
    leases_s: list[float] = field(default_factory=list)

    def admit(self, ctx: ToolInvocationContext) -> RateLimited | None:
        with self.lock:
            if self.fair_share is not None and self.admitted >= self.fair_share:
                return RateLimited(retry_after_s=1, safe_message="slow down")
            self.admitted += 1
        return None

    def acquire(
        self, ctx: ToolInvocationContext, tool_id: str, budgets: Budgets, *, lease_s: float
    ) -> Lease | RateLimited:
        with self.lock:
            self.leases_s.append(lease_s)
            if budgets.rate_limit_per_minute is not None and self.calls >= budgets.rate_limit_per_minute:
                return RateLimited(retry_after_s=60, safe_message="rate limit reached")
            if budgets.max_concurrency is not None and self.in_flight >= budgets.max_concurrency:
                return RateLimited(retry_after_s=1, safe_message="too many calls in flight")
            self.calls += 1
            self.in_flight += 1
        return _Lease(self)


@dataclass
class ListAudit:
    records: list[ToolInvocationRecord] = field(default_factory=list)

    def record(self, record: ToolInvocationRecord) -> None:
        self.records.append(record)


@dataclass
class ListEvents:
    events: list[ToolEvent] = field(default_factory=list)

    def emit(self, event: ToolEvent) -> None:
        self.events.append(event)

    @property
    def kinds(self) -> list[EventKind]:
        return [event.kind for event in self.events]


class FixedClock:
    def __init__(self, now: datetime = T0) -> None:
        self._now = now

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)

    def monotonic(self) -> float:
        return self._now.timestamp()


@dataclass
class Harness:
    """A runner over fakes, with every fake reachable for assertions."""

    governance: FakeGovernance
    source: FakeSource
    policy: FakePolicy
    grants: FakeGrants
    broker: FakeBroker
    limiter: FakeLimiter
    audit: ListAudit
    events: ListEvents
    clock: FixedClock
    runner: ToolRunner | None

    def stages(self, **extra: object) -> list:
        """The default stages wired to this harness's fakes (for tests that add or swap stages)."""
        return default_stages(
            governance=self.governance,
            source=self.source,
            policy=self.policy,
            limiter=self.limiter,
            grants=self.grants,
            broker=self.broker,
            audit=self.audit,
            events=self.events,
            clock=self.clock,
            **extra,
        )

    def exec(self, tool_id: str, args: object = None, **ctx_fields: object):
        ctx_values = {"run_id": "run-1", "tool_call_id": "call-1", "tenant_id": TENANT, "actor_id": ACTOR}
        ctx_values.update(ctx_fields)
        return self.runner.exec(tool_id, {} if args is None else args, ToolInvocationContext(**ctx_values))


def make_harness(
    definitions: Iterable[ToolDefinition],
    *,
    allowed: Iterable[str] | None = None,
    disabled: Iterable[str] = (),
    budgets: Budgets | None = None,
    approval_effects: Iterable[str] = (),
    grants: Iterable[GrantView] = (),
    default_max_result_bytes: int = 1024 * 1024,
) -> Harness:
    definitions = list(definitions)
    source = FakeSource(definitions, disabled=disabled)
    policy = FakePolicy(
        allowed=set(allowed if allowed is not None else source.tools),
        approval_effects=set(approval_effects),
        budgets=budgets or Budgets(),
    )
    grant_store = FakeGrants({g.grant_id: g for g in grants})
    broker, limiter, audit, events, clock = FakeBroker(), FakeLimiter(), ListAudit(), ListEvents(), FixedClock()
    harness = Harness(FakeGovernance(), source, policy, grant_store, broker, limiter, audit, events, clock, runner=None)
    harness.runner = ToolRunner(harness.stages(default_max_result_bytes=default_max_result_bytes), clock)
    return harness


def grant(
    connection_ids: Iterable[str] = (CONNECTION,),
    *,
    grant_id: str = GRANT,
    tenant_id: str = TENANT,
    actor_id: str = ACTOR,
    expires_at: datetime | None = None,
    revoked: bool = False,
    personal_for: dict[str, str] | None = None,
    providers: dict[str, str] | None = None,
    provider: str = "github",
) -> GrantView:
    """A grant view; every connection is `provider`'s unless `providers` says otherwise."""
    ids = frozenset(connection_ids)
    return GrantView(
        grant_id,
        tenant_id,
        actor_id,
        ids,
        expires_at,
        revoked,
        personal_for or {},
        providers if providers is not None else dict.fromkeys(ids, provider),
    )


__all__ = ["ErrorCode"]
