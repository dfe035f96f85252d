"""policies_app's side of the runner's ports: governance freshness, policy, approvals, budgets, delegations."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from core.outages import OUTAGE_ERRORS, outage_guard
from policies_app.approval_args import approval_args_seal
from policies_app.counters import counters
from policies_app.fairness import fairness_check
from policies_app.governance import governance_cache
from policies_app.models import Approver
from policies_app.rules import rules_for_caller
from policies_app.selectors import EffectivePolicy, delegation_for_authz, policy_effective_for, subject_id_of
from policies_app.services import (
    APPROVER_WORDS,
    ApprovalOutcome,
    ApprovalTerms,
    approval_check,
    approval_used,
    approver_for_call,
)
from runner.ports import CallRules, DelegationView, Lease, PolicyDecision, RateLimited
from runner.rules import RuleAction, RuleMatch
from runner.types import Budgets, Decision, ToolInvocationContext, ToolSpec

logger = logging.getLogger(__name__)


class CachedGovernanceView:
    """The runner's freshness port: this process's governance cache, caught up at each call."""

    @outage_guard
    def refresh(self) -> None:
        governance_cache.refresh()


class DatabasePolicyDecider:
    """Deny by default; the most specific active policy decides; approvals bind exact args.

    Asked with the args' hash (`decide(..., args_sha256=...)`), it also answers
    for the approval, like the approval desk but keeping no args: for callers
    that run without the desk.
    """

    def __init__(self, desk: DatabaseApprovalDesk | None = None) -> None:
        self._desk = desk or DatabaseApprovalDesk()

    @outage_guard
    def decide(self, ctx: ToolInvocationContext, spec: ToolSpec, *, args_sha256: str | None) -> PolicyDecision:
        policy = policy_effective_for(tenant_id=ctx.tenant_id, service_account_id=ctx.actor_id)
        if policy is None:
            return PolicyDecision(Decision.DENY, safe_message="no policy applies to this caller")
        if not policy.allows(spec.name):
            return PolicyDecision(Decision.DENY, safe_message="tool is not allowed by the caller's policy")
        if policy.approval_reason(spec) is None:
            return PolicyDecision(Decision.ALLOW, budgets=policy.budgets)
        if args_sha256 is None:  # the catalog and the policy stage ask: no call is pending yet
            return PolicyDecision(Decision.REQUIRE_APPROVAL, budgets=policy.budgets)
        return self._desk.request(ctx, spec, args_sha256=args_sha256, args=None)


class DatabaseApprovalDesk:
    """Approval requests as rows; the call's args are sealed for the approver (approval_args.py)."""

    @outage_guard
    def request(
        self, ctx: ToolInvocationContext, spec: ToolSpec, *, args_sha256: str | None, args: Any
    ) -> PolicyDecision:
        policy = policy_effective_for(tenant_id=ctx.tenant_id, service_account_id=ctx.actor_id)
        reason = policy.approval_reason(spec) if policy is not None else None
        if policy is None or reason is None or not policy.allows(spec.name):  # changed since the policy stage
            return PolicyDecision(Decision.DENY, safe_message="not allowed by policy")
        return self._ask(ctx, spec, args_sha256=args_sha256, args=args, policy=policy, reason=reason)

    @outage_guard
    def request_for_rule(
        self, ctx: ToolInvocationContext, spec: ToolSpec, *, args_sha256: str | None, args: Any, rule: RuleMatch
    ) -> PolicyDecision:
        """An argument rule sends the call to a person: the policy's approvers, or the person it is for."""
        policy = policy_effective_for(tenant_id=ctx.tenant_id, service_account_id=ctx.actor_id)
        if policy is None or not policy.allows(spec.name):  # changed since the policy stage
            return PolicyDecision(Decision.DENY, safe_message="not allowed by policy")
        confirmation = rule.action is RuleAction.REQUIRE_CONFIRMATION
        if confirmation and ctx.subject_id is None:
            return PolicyDecision(
                Decision.DENY,
                safe_message=f"rule {rule.name!r} needs the confirmation of the person this call is for, "
                "and this call is made for no one; call it on a person's behalf (a subject token)",
            )
        reason = f"rule {rule.name}: {rule.message}" if rule.message else f"rule {rule.name}"
        approver = Approver.SUBJECT if confirmation else policy.approver
        return self._ask(
            ctx, spec, args_sha256=args_sha256, args=args, policy=policy, reason=reason[:200], approver=approver
        )

    def _ask(
        self,
        ctx: ToolInvocationContext,
        spec: ToolSpec,
        *,
        args_sha256: str | None,
        args: Any,
        policy: EffectivePolicy,
        reason: str,
        approver: str | None = None,
    ) -> PolicyDecision:
        if args_sha256 is None:  # arguments that cannot be hashed cannot be approved
            return PolicyDecision(Decision.DENY, safe_message="these arguments cannot be bound to an approval")
        verdict = approval_check(
            tenant_id=ctx.tenant_id,
            service_account_id=ctx.actor_id,
            tool_id=spec.name,
            connection_id=ctx.connection_id,
            args_sha256=args_sha256,
            tool_call_id=ctx.tool_call_id,
            subject_id=ctx.subject_id,
            terms=ApprovalTerms(
                effect=spec.effect,
                consequence_level=spec.consequence_level,
                required_because=reason,
                approver=approver
                or approver_for_call(
                    policy_approver=policy.approver,
                    requires_confirmation=spec.requires_confirmation and policy.policy_approval_reason(spec) is None,
                    subject_id=ctx.subject_id,
                ),
                ttl_s=policy.approval_ttl_s,
            ),
            seal_args=None
            if args is None
            else lambda approval_id, tenant_id: approval_args_seal(approval_id, tenant_id, args),
        )
        approval = verdict.approval
        match verdict.outcome:
            case ApprovalOutcome.ALLOW:
                return PolicyDecision(
                    Decision.ALLOW,
                    budgets=policy.budgets,
                    approval_id=str(approval.pk),
                    decided_by=approval.decided_by_name or None,
                )
            case ApprovalOutcome.PENDING:
                who = APPROVER_WORDS.get(approval.approver, "an operator")
                verb = "confirm" if approval.approver == Approver.SUBJECT else "approve"
                return PolicyDecision(
                    Decision.REQUIRE_APPROVAL,
                    approval_id=str(approval.pk),
                    safe_message=(
                        f"{who} must {verb} this call ({reason}); follow it at GET /api/v1/approvals/"
                        f"{approval.pk} and repeat the call with the same tool_call_id once approved"
                    ),
                )
            case ApprovalOutcome.DENY:
                return PolicyDecision(Decision.DENY, safe_message=verdict.reason)

    @outage_guard
    def used(self, approval_id: str) -> None:
        approval_used(approval_id=approval_id)


class _Slot:
    """A leased concurrency slot; giving it back early is a courtesy, its lease is the guarantee."""

    __slots__ = ("_holder", "_key")

    def __init__(self, key: str | None = None, holder: str = "") -> None:
        self._key = key
        self._holder = holder

    def release(self) -> None:
        if self._key is None:
            return
        try:
            counters().slot_give_back(self._key, self._holder)
        except OUTAGE_ERRORS:  # the lease reclaims it; the call's own answer must not change now
            logger.warning("concurrency slot not given back (cache unreachable); its lease will reclaim it")


class CacheRateLimiter:
    """Fairness per service account, and each policy's budgets per (service account, tool).

    Fairness: `api_rate_per_second` calls per second per service account across
    the API (0 turns it off; policies_app/fairness.py). Rate: a fixed one-minute
    window. Concurrency: a slot leased for the call's whole budget. Each is at
    most one atomic round trip to the shared counters (Redis when configured,
    else this process's memory).
    """

    def __init__(self, *, api_rate_per_second: int) -> None:
        self._api_rate_per_second = api_rate_per_second

    @outage_guard
    def admit(self, ctx: ToolInvocationContext) -> RateLimited | None:
        return fairness_check(service_account_id=ctx.actor_id, rate_per_second=self._api_rate_per_second)

    @outage_guard
    def acquire(
        self, ctx: ToolInvocationContext, tool_id: str, budgets: Budgets, *, lease_s: float
    ) -> Lease | RateLimited:
        scope = f"{ctx.tenant_id}:{ctx.actor_id}:{tool_id}"
        if budgets.rate_limit_per_minute is not None:
            now = time.time()
            window = int(now // 60)
            if counters().hit(f"toolgate:rate:{scope}:{window}", window_s=120) > budgets.rate_limit_per_minute:
                return RateLimited(
                    retry_after_s=max(1, 60 - int(now % 60)),
                    safe_message=f"rate limit of {budgets.rate_limit_per_minute} calls per minute reached",
                )
        if budgets.max_concurrency is None:
            return _Slot()
        key = f"toolgate:inflight:{scope}"
        holder = ctx.tool_call_id + ":" + uuid.uuid4().hex
        if not counters().slot_take(key, holder, limit=budgets.max_concurrency, lease_s=lease_s):
            return RateLimited(
                retry_after_s=1, safe_message=f"at most {budgets.max_concurrency} concurrent calls allowed"
            )
        return _Slot(key, holder)


class DatabaseDelegationStore:
    """The authorization stage's view of delegations: from the governance cache, like grants."""

    @outage_guard
    def get(self, delegation_id: str) -> DelegationView | None:
        row = delegation_for_authz(delegation_id=delegation_id)
        if row is None:
            return None
        return DelegationView(
            delegation_id=row.delegation_id,
            tenant_id=str(row.tenant_id),
            actor_id=row.service_account_id,
            subject_id=subject_id_of(row.user_id),
            tools=row.tools,
            expires_at=row.expires_at,
            revoked=row.revoked,
            subject_is_member=row.user_is_member,
            connection_ids=row.connection_ids,
        )


class DatabaseRuleBook:
    """The runner's rule book: the caller's compiled argument rules and result guards, from the governance cache."""

    @outage_guard
    def for_caller(self, ctx: ToolInvocationContext) -> CallRules:
        return rules_for_caller(ctx=ctx)
