"""policies_app's side of the runner's ports: policy, grants and budgets."""

from __future__ import annotations

import contextlib
import time

from django.core.cache import cache

from policies_app.selectors import grant_for_gate, policy_effective_for
from policies_app.services import approval_check
from runner.ports import GrantView, Lease, PolicyDecision, RateLimited
from runner.types import Budgets, Decision, ToolInvocationContext, ToolSpec

CONCURRENCY_SLOT_TTL_S = 600  # a crashed process's slots expire instead of leaking forever


class DatabasePolicyDecider:
    """Deny by default; the most specific active policy decides; approvals bind exact args."""

    def decide(self, ctx: ToolInvocationContext, spec: ToolSpec, *, args_sha256: str | None) -> PolicyDecision:
        policy = policy_effective_for(tenant_id=ctx.tenant_id, service_account_id=ctx.actor_id)
        if policy is None:
            return PolicyDecision(Decision.DENY, safe_message="no policy applies to this caller")
        if spec.name not in policy.allowed_tools:
            return PolicyDecision(Decision.DENY, safe_message="tool is not allowed by the caller's policy")
        if spec.effect.value not in policy.approval_effects:
            return PolicyDecision(Decision.ALLOW, budgets=policy.budgets)
        if args_sha256 is None:  # the catalog asks: no call is pending
            return PolicyDecision(Decision.REQUIRE_APPROVAL, budgets=policy.budgets)
        verdict, approval = approval_check(
            tenant_id=ctx.tenant_id,
            service_account_id=ctx.actor_id,
            tool_id=spec.name,
            effect=spec.effect,
            connection_id=ctx.connection_id,
            args_sha256=args_sha256,
            tool_call_id=ctx.tool_call_id,
        )
        if verdict == "allow":
            return PolicyDecision(Decision.ALLOW, budgets=policy.budgets)
        if verdict == "pending":
            return PolicyDecision(
                Decision.REQUIRE_APPROVAL,
                approval_id=str(approval.pk),
                safe_message="an operator must approve this call; repeat it with the same tool_call_id",
            )
        return PolicyDecision(Decision.DENY, safe_message=verdict.removeprefix("deny:"))


class DatabaseGrantStore:
    def get(self, grant_id: str) -> GrantView | None:
        grant = grant_for_gate(grant_id=grant_id)
        if grant is None:
            return None
        return GrantView(
            grant_id=grant_id.lower(),
            tenant_id=str(grant.tenant_id),
            actor_id=str(grant.service_account_id),
            connection_ids=grant.connection_ids,
            expires_at=grant.expires_at,
            revoked=grant.revoked_at is not None,
        )


class _Slot:
    __slots__ = ("_key",)

    def __init__(self, key: str | None) -> None:
        self._key = key

    def release(self) -> None:
        if self._key is not None:
            with contextlib.suppress(ValueError):  # the slot expired meanwhile; nothing to give back
                cache.decr(self._key)


class CacheRateLimiter:
    """Per (service account, tool) budgets in the shared cache (Redis when configured).

    Rate: a fixed one-minute window counted with atomic INCR. Concurrency: a
    counter taken before the call and given back after it. The embedded default
    (local-memory cache) is exact within its single process.
    """

    def acquire(self, ctx: ToolInvocationContext, tool_id: str, budgets: Budgets) -> Lease | RateLimited:
        scope = f"{ctx.tenant_id}:{ctx.actor_id}:{tool_id}"
        if budgets.rate_limit_per_minute is not None:
            now = time.time()
            window = int(now // 60)
            key = f"toolgate:rate:{scope}:{window}"
            cache.add(key, 0, timeout=120)
            if cache.incr(key) > budgets.rate_limit_per_minute:
                return RateLimited(
                    retry_after_s=max(1, 60 - int(now % 60)),
                    safe_message=f"rate limit of {budgets.rate_limit_per_minute} calls per minute reached",
                )
        if budgets.max_concurrency is None:
            return _Slot(None)
        key = f"toolgate:inflight:{scope}"
        cache.add(key, 0, timeout=CONCURRENCY_SLOT_TTL_S)
        if cache.incr(key) > budgets.max_concurrency:
            cache.decr(key)
            return RateLimited(
                retry_after_s=1, safe_message=f"at most {budgets.max_concurrency} concurrent calls allowed"
            )
        return _Slot(key)
