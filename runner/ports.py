"""The runner's view of the world: Protocols that adapters implement.

`config/runtime.py` binds database-, cache- and broker-backed adapters; the
runner's tests bind in-memory fakes. Nothing here knows about Django.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from runner.types import (
    Budgets,
    Decision,
    ToolEvent,
    ToolExecResult,
    ToolInvocationContext,
    ToolInvocationRecord,
    ToolSpec,
)

if TYPE_CHECKING:
    from runner.bound import BoundTool
    from runner.capabilities import AuthCapability
    from runner.guardrails import ResultGuard
    from runner.rules import ArgumentRule, RuleMatch


class GovernanceView(Protocol):
    """The operators' switches, policies, keys and grants as this process holds them."""

    def refresh(self) -> None:
        """Catch up with changes made anywhere else; cheap when nothing changed."""
        ...


class ToolSource(Protocol):
    """Where bound tools come from (the code registry today, MCP servers later)."""

    def get(self, tool_id: str) -> BoundTool | None: ...

    def list(self) -> Sequence[BoundTool]: ...

    def is_enabled(self, tool_id: str) -> bool:
        """The operator's kill switch, above every policy."""
        ...

    def is_pending(self, tool_id: str) -> bool:
        """A tool the catalog knows but holds no approved definition of yet (discovered upstream,
        never approved): the lookup refuses it like a disabled tool, not like an unknown one."""
        ...


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    decision: Decision
    budgets: Budgets = field(default_factory=Budgets)
    approval_id: str | None = None
    safe_message: str | None = None
    # With ALLOW on an approved request: who confirmed or approved it (their name), for the audit row.
    decided_by: str | None = None


class PolicyDecider(Protocol):
    def decide(self, ctx: ToolInvocationContext, spec: ToolSpec, *, args_sha256: str | None) -> PolicyDecision:
        """Allow, deny or ask for approval; `args_sha256` binds an approval to the exact args.

        Asked with `args_sha256=None` (the catalog, and the policy stage before
        the call is validated), it only says whether the caller may run the
        tool and whether an approval is needed: no approval is created or
        consumed. Asked with the args' hash (the approval stage, once the call
        has passed every other check), it opens, waits on or uses the approval
        bound to this tool_call_id.
        """
        ...


class ApprovalDesk(Protocol):
    """Where a call the policy sends to a person gets its approval (the approval stage's port)."""

    def request(
        self, ctx: ToolInvocationContext, spec: ToolSpec, *, args_sha256: str | None, args: Any
    ) -> PolicyDecision:
        """Open, wait on or find the approval bound to this exact call (tool_call_id, caller, args hash).

        ALLOW carries the approved request's id: the runner reports it `used`
        once the tool has run, so a call refused further down leaves it usable.
        `args` are the validated arguments, kept for the approver while the
        request is pending; they must never reach a log or an event.
        """
        ...

    def request_for_rule(
        self, ctx: ToolInvocationContext, spec: ToolSpec, *, args_sha256: str | None, args: Any, rule: RuleMatch
    ) -> PolicyDecision:
        """As `request`, for a call an argument rule sends to a person (require_approval / require_confirmation).

        The rule, not the policy, is why: the request names it, and a confirmation
        goes to the person the call is for.
        """
        ...

    def used(self, approval_id: str) -> None:
        """The approved call executed: its approval is spent."""
        ...


class PolicyApprovalDesk:
    """An ApprovalDesk that asks the policy itself (in-memory deciders, tests): nothing is kept."""

    def __init__(self, policy: PolicyDecider) -> None:
        self._policy = policy

    def request(
        self, ctx: ToolInvocationContext, spec: ToolSpec, *, args_sha256: str | None, args: Any
    ) -> PolicyDecision:
        return self._policy.decide(ctx, spec, args_sha256=args_sha256)

    def request_for_rule(
        self, ctx: ToolInvocationContext, spec: ToolSpec, *, args_sha256: str | None, args: Any, rule: RuleMatch
    ) -> PolicyDecision:
        return PolicyDecision(Decision.REQUIRE_APPROVAL, safe_message=rule.message or None)

    def used(self, approval_id: str) -> None:
        return None


@dataclass(frozen=True, slots=True)
class GrantView:
    """What the runner needs to know of an execution grant (no secrets, ids only)."""

    grant_id: str
    tenant_id: str
    actor_id: str
    connection_ids: frozenset[str]
    expires_at: datetime | None = None
    revoked: bool = False
    # Personal connections among connection_ids: connection id -> the subject_id of the person it belongs to.
    personal: Mapping[str, str] = field(default_factory=dict)
    # The provider of each of connection_ids that is not revoked (a revoked one is never chosen for a
    # call that names no connection; one that is named is refused by the broker as before).
    providers: Mapping[str, str] = field(default_factory=dict)


class GrantStore(Protocol):
    def get(self, grant_id: str) -> GrantView | None: ...

    def for_caller(self, tenant_id: str, actor_id: str) -> Sequence[GrantView]:
        """The caller's grants that are not revoked (expired ones included: the runner checks the time).

        Read only for a call on a person's behalf that names no connection: the
        connection is chosen among these grants and what the person declared.
        """
        ...


@dataclass(frozen=True, slots=True)
class DelegationView:
    """What the authorization stage needs of a delegation: a person's "this agent may act for me".

    `tools` None means every tool the service account's policy allows; a set narrows it.
    `subject_is_member` says whether the person still belongs to the tenant (their role is
    what lets them use its tools at all).
    """

    delegation_id: str
    tenant_id: str
    actor_id: str
    subject_id: str
    tools: frozenset[str] | None = None
    expires_at: datetime | None = None
    revoked: bool = False
    subject_is_member: bool = True
    # The person's connections this service account may use for a call that names none (the person
    # declared them on the consent page or the delegations page); empty: none.
    connection_ids: frozenset[str] = frozenset()


class DelegationStore(Protocol):
    def get(self, delegation_id: str) -> DelegationView | None: ...


@dataclass(frozen=True, slots=True)
class AuthzVerdict:
    """The authorization port's answer: `subject_id` is who the call is for (None without a subject).

    `reason` is a category for the audit row (`unknown_token`, `revoked`, ...), never shown to the
    caller; `safe_message` is what the caller reads.
    """

    allowed: bool
    subject_id: str | None = None
    reason: str | None = None
    safe_message: str | None = None
    # Allowed on behalf of a person: the connections that person declared for this caller (the
    # connection gate chooses among them when a call names none). None without a delegation.
    connection_ids: frozenset[str] | None = None


class AuthorizationPort(Protocol):
    def check(self, ctx: ToolInvocationContext, spec: ToolSpec) -> AuthzVerdict:
        """May this caller run `spec` for ctx's subject? (permission AND an active delegation)

        Called after the policy stage allowed the service account itself; a call
        without a subject token is allowed without any lookup.
        """
        ...


@dataclass(frozen=True, slots=True)
class CallRules:
    """The argument rules and result guards that may apply to one caller, compiled, with what conditions read.

    `caller` is the `caller` variable of conditions (tenant and service account,
    by slug/name and id). `prepare` turns the variables into what the compiled
    conditions take (the adapter's CEL activation), once per call.
    """

    arguments: tuple[ArgumentRule, ...] = ()
    guards: tuple[ResultGuard, ...] = ()
    caller: Mapping[str, Any] = field(default_factory=dict)
    prepare: Callable[[Mapping[str, Any]], Any] = field(default=lambda variables: variables, repr=False)


NO_RULES = CallRules()


class RuleBook(Protocol):
    def for_caller(self, ctx: ToolInvocationContext) -> CallRules:
        """The active rules and guards of ctx's caller (every scope that covers it), from the governance cache.

        Cheap: no round trip on a warm call; NO_RULES when there are none.
        """
        ...


class NoRules:
    """A RuleBook without rules (in-memory runners, tests)."""

    def for_caller(self, ctx: ToolInvocationContext) -> CallRules:
        return NO_RULES


class ConnectionBroker(Protocol):
    def resolve(self, ctx: ToolInvocationContext, spec: ToolSpec) -> AuthCapability:
        """Credentials for ctx.connection_id, checked against tenant and provider.

        Called only after the grant gate. Raises BrokerError with
        `connection_unavailable` or `auth_refresh_failed`.
        """
        ...


class Lease(Protocol):
    """A granted slot; released when the call ends, whatever its outcome."""

    def release(self) -> None: ...


@dataclass(frozen=True, slots=True)
class RateLimited:
    retry_after_s: int
    safe_message: str


class RateLimiter(Protocol):
    def admit(self, ctx: ToolInvocationContext) -> RateLimited | None:
        """Fairness between callers, before anything else is looked at; None lets the call in."""
        ...

    def acquire(
        self, ctx: ToolInvocationContext, tool_id: str, budgets: Budgets, *, lease_s: float
    ) -> Lease | RateLimited:
        """The policy's budgets; a concurrency slot is held at most `lease_s` (the call's whole budget)."""
        ...


@dataclass(frozen=True, slots=True)
class Claimed:
    """This call owns its tool_call_id; `ref` lets the audit sink finish the claimed row."""

    ref: str | None = None


@dataclass(frozen=True, slots=True)
class Replay:
    """The id already ran with the same request: answer what was recorded."""

    result: ToolExecResult


@dataclass(frozen=True, slots=True)
class Conflict:
    """The id belongs to another request (or caller), or its first call is still running.

    The message never says which: a caller learns nothing about another's call.
    """

    safe_message: str
    retry_after_s: int | None = None


class IdempotencyStore(Protocol):
    def claim(
        self, ctx: ToolInvocationContext, tool_id: str, *, args_sha256: str | None, lease_s: float, wait_s: float
    ) -> Claimed | Replay | Conflict:
        """Reserve ctx.tool_call_id for this call, or say why not.

        A recorded result is replayed only to the caller that made the call
        (same service account, subject, grant, connection, tool and args);
        anyone else gets a Conflict. A claim holds for `lease_s` (the call's
        whole budget): a claim left behind by a crashed process is taken over
        after that, and a repeat waits at most `wait_s` (its own runtime
        budget) for the first call to finish. A claim whose call ends refused (not executed)
        is released, so a refused call is decided afresh when repeated.
        """
        ...


class AuditSink(Protocol):
    def record(self, record: ToolInvocationRecord) -> None:
        """Store exactly one audit row for this call (finishing the claimed row when `audit_ref` is set)."""
        ...


class EventSink(Protocol):
    def emit(self, event: ToolEvent) -> None: ...


class Clock(Protocol):
    def now(self) -> datetime: ...

    def monotonic(self) -> float: ...


JsonObject = Mapping[str, Any]
