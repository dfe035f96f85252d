"""Reads of policies_app; the hot ones go through the governance cache."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from core.ids import uuid_or_none
from core.key_rotation import envelope_key_usage, not_sealed_under
from policies_app.governance import governance_cache
from policies_app.keys import key_matches, key_prefix, subject_token_prefix
from policies_app.models import (
    DEFAULT_APPROVAL_TTL_S,
    ApprovalRequest,
    Approver,
    Delegation,
    ServiceAccount,
    Tenant,
    TenantMembership,
    ToolPolicy,
)
from policies_app.toolpatterns import NO_TOOLS, ToolPatterns
from runner.types import UNKNOWN_DELEGATION, Budgets, ConsequenceLevel, ToolSpec


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated service account, as interfaces and adapters see it (no key material)."""

    service_account_id: str
    tenant_id: int
    tenant_slug: str
    name: str
    scopes: frozenset[str]
    last_used_at: datetime | None
    # Set for a signed-in MCP client's access token: every call is on behalf of this delegation's person.
    delegation_id: str | None = None


@dataclass(frozen=True, slots=True)
class _KeyRow:
    caller: Caller
    digest: str
    revoked: bool


@dataclass(frozen=True, slots=True)
class EffectivePolicy:
    name: str
    allowed_tools: frozenset[str]
    approval_effects: frozenset[str]
    budgets: Budgets
    approval_at_or_above: ConsequenceLevel | None = None
    approval_tools: frozenset[str] = frozenset()
    approver: str = Approver.OPERATOR
    approval_ttl_s: int = DEFAULT_APPROVAL_TTL_S
    # allowed_tools compiled once per cached policy (exact ids and `*` patterns): the hot path's check.
    allowed: ToolPatterns = NO_TOOLS
    # Upstream resources and prompts, compiled the same way; none unless the policy names them.
    allowed_resources: ToolPatterns = NO_TOOLS
    allowed_prompts: ToolPatterns = NO_TOOLS

    def allows(self, tool_id: str) -> bool:
        """Whether this policy allows the tool id, by name or by pattern (the tool's own gates still apply)."""
        return self.allowed.allows(tool_id)

    def approval_reason(self, spec: ToolSpec) -> str | None:
        """Why a call of this tool needs a person under this policy, or None when it does not.

        The tool's own requires_confirmation applies under every policy; the
        policy adds effects, a consequence level and named tools.
        """
        if spec.requires_confirmation:
            return "the tool requires confirmation of every call"
        return self.policy_approval_reason(spec)

    def policy_approval_reason(self, spec: ToolSpec) -> str | None:
        """The policy's own reason (named tools, effects, a level), the tool's confirmation aside.

        With one, the policy's approvers decide even a tool that asks for confirmation: the person a
        call is for may confirm what only they are asked about, never stand in for owners or operators.
        """
        if spec.name in self.approval_tools:
            return f"policy {self.name} requires approval for this tool"
        if spec.effect.value in self.approval_effects:
            return f"policy {self.name} requires approval for {spec.effect.value} tools"
        if self.approval_at_or_above is not None and spec.consequence_level.rank >= self.approval_at_or_above.rank:
            return (
                f"policy {self.name} requires approval at consequence level "
                f"{self.approval_at_or_above.value} or above (this tool: {spec.consequence_level.value})"
            )
        return None


def caller_for_key(*, key: str) -> Caller | None:
    """The active service account holding `key`; None alike for unknown, wrong and revoked keys.

    The first governance read of every API request, so it brings the cache up
    to date first: a revoked key is refused on the next request, before any call.
    """
    prefix = key_prefix(key)
    if prefix is None:
        return None
    governance_cache.refresh()
    row = governance_cache.get(("key", prefix), lambda: _load_key_row(prefix))
    if row is None or not key_matches(key, row.digest) or row.revoked:
        return None
    return row.caller


def _load_key_row(prefix: str) -> _KeyRow | None:
    account = ServiceAccount.objects.select_related("tenant").filter(key_prefix=prefix).first()
    if account is None:
        return None
    caller = Caller(
        service_account_id=str(account.id),
        tenant_id=account.tenant_id,
        tenant_slug=account.tenant.slug,
        name=account.name,
        scopes=frozenset(account.scopes),
        last_used_at=account.last_used_at,
    )
    return _KeyRow(caller=caller, digest=account.key_digest, revoked=account.revoked_at is not None)


def policy_effective_for(*, tenant_id: int | str, service_account_id: str) -> EffectivePolicy | None:
    """The most specific active policy: service account > tenant > global; None means deny."""
    return governance_cache.get(
        ("policy", str(tenant_id), service_account_id),
        lambda: _load_effective_policy(tenant_id, service_account_id),
    )


def _load_effective_policy(tenant_id: int | str, service_account_id: str) -> EffectivePolicy | None:
    candidates = ToolPolicy.objects.filter(is_active=True).filter(
        Q(tenant__isnull=True)
        | Q(tenant_id=tenant_id, service_account__isnull=True)
        | Q(tenant_id=tenant_id, service_account_id=service_account_id)
    )
    best = max(candidates, key=_specificity, default=None)
    if best is None:
        return None
    return EffectivePolicy(
        name=best.name,
        allowed_tools=frozenset(best.allowed_tools),
        allowed=ToolPatterns.compile(best.allowed_tools),
        allowed_resources=ToolPatterns.compile(best.allowed_resources),
        allowed_prompts=ToolPatterns.compile(best.allowed_prompts),
        approval_effects=frozenset(best.require_approval_for_effects),
        approval_at_or_above=ConsequenceLevel(best.require_approval_at_or_above)
        if best.require_approval_at_or_above
        else None,
        approval_tools=frozenset(best.require_approval_for_tools),
        approver=best.approver,
        approval_ttl_s=best.approval_ttl_s,
        budgets=Budgets(
            max_runtime_ms=best.max_runtime_ms,
            max_result_bytes=best.max_result_bytes,
            rate_limit_per_minute=best.rate_limit_per_minute,
            max_concurrency=best.max_concurrency,
            max_samples_per_call=best.max_samples_per_call,
        ),
    )


def _specificity(policy: ToolPolicy) -> int:
    return 2 if policy.service_account_id else 1 if policy.tenant_id else 0


def service_account_for_tenant(*, tenant_id: int, name_or_id: str) -> ServiceAccount | None:
    """A tenant's live service account named by its id or its name (ids win when both could match)."""
    accounts = ServiceAccount.objects.filter(tenant_id=tenant_id, revoked_at__isnull=True)
    pk = uuid_or_none(name_or_id)
    by_id = accounts.filter(pk=pk).first() if pk is not None else None
    return by_id or accounts.filter(name=name_or_id).first()


def policies_applicable_to(*, tenant_id: int | str, service_account_id: str) -> list[ToolPolicy]:
    """The active policies whose scope covers this account, most specific first (for operators).

    The first one is the row behind `policy_effective_for`; the others are overridden.
    Not cached: the admin shows what the database says now.
    """
    candidates = ToolPolicy.objects.select_related("tenant", "service_account__tenant").filter(
        Q(is_active=True)
        & (
            Q(tenant__isnull=True)
            | Q(tenant_id=tenant_id, service_account__isnull=True)
            | Q(tenant_id=tenant_id, service_account_id=service_account_id)
        )
    )
    return sorted(candidates, key=_specificity, reverse=True)


def policy_active_in_scope(
    *, tenant_id: int | None, service_account_id: str | None, exclude_pk: int | None = None
) -> ToolPolicy | None:
    """The active policy holding exactly this scope, if any: the database allows one per scope."""
    rows = ToolPolicy.objects.filter(is_active=True, tenant_id=tenant_id, service_account_id=service_account_id)
    if exclude_pk is not None:
        rows = rows.exclude(pk=exclude_pk)
    return rows.first()


def tenant_of_caller(*, caller: Caller) -> Tenant | None:
    """The tenant row behind an authenticated caller, which carries only its id (None once the tenant is gone)."""
    return Tenant.objects.filter(pk=caller.tenant_id).first()


def invocations_readable_by(*, caller: Caller) -> str | None:
    """Whose audit rows a caller reads: its own (its service account's id), or its tenant's (None).

    The scope `invocations:read` reads every row of the tenant: an auditor's or a dashboard's key.
    """
    if ServiceAccount.Scope.INVOCATIONS_READ in caller.scopes:
        return None
    return caller.service_account_id


def service_account_list(*, tenant_id: int, include_revoked: bool = True) -> QuerySet[ServiceAccount]:
    """A tenant's service accounts by name (the tenant UI lists revoked ones too, greyed out)."""
    rows = ServiceAccount.objects.filter(tenant_id=tenant_id).select_related("created_by")
    if not include_revoked:
        rows = rows.filter(revoked_at__isnull=True)
    return rows.order_by("name")


def service_account_get(*, tenant_id: int, account_id: object) -> ServiceAccount | None:
    """The tenant's account with this id, revoked or not; None for malformed ids and other tenants' alike."""
    pk = uuid_or_none(account_id)
    if pk is None:
        return None
    return service_account_list(tenant_id=tenant_id).filter(pk=pk).first()


def approval_for_caller(*, approval_id: str, service_account_id: str) -> ApprovalRequest | None:
    """One approval request of this service account; another caller's (or a malformed id) is None."""
    if uuid_or_none(approval_id) is None:
        return None
    return ApprovalRequest.objects.filter(pk=approval_id, service_account_id=service_account_id).first()


def approvals_for_operators(*, pending_only: bool = False, tenant_slug: str | None = None) -> QuerySet[ApprovalRequest]:
    """Approval requests newest first, for operators' runbooks; `pending_only` drops decided and expired ones."""
    rows = ApprovalRequest.objects.select_related("tenant", "service_account").order_by("-created_at")
    if pending_only:
        rows = rows.filter(status=ApprovalRequest.Status.PENDING, expires_at__gt=timezone.now())
    if tenant_slug is not None:
        rows = rows.filter(tenant__slug=tenant_slug)
    return rows


def approval_pending_count() -> int:
    """Requests waiting for a decision now (the admin index shows it)."""
    return ApprovalRequest.objects.filter(status=ApprovalRequest.Status.PENDING, expires_at__gt=timezone.now()).count()


def approvals_for_tenant(
    *, tenant_id: int, visible: Q | None = None
) -> tuple[list[ApprovalRequest], QuerySet[ApprovalRequest]]:
    """(the tenant's requests waiting for a decision, oldest first; every other request, newest first).

    `visible` narrows them to what one person may see (the portal's rule, connections_app.selectors).
    """
    rows = ApprovalRequest.objects.filter(tenant_id=tenant_id).select_related("service_account", "tenant")
    if visible is not None:
        rows = rows.filter(visible)
    now = timezone.now()
    waiting = Q(status=ApprovalRequest.Status.PENDING, expires_at__gt=now)
    return list(rows.filter(waiting).order_by("expires_at")), rows.exclude(waiting).order_by("-created_at")


def approval_for_tenant(*, tenant_id: int, approval_id: object, visible: Q | None = None) -> ApprovalRequest | None:
    """One request of this tenant; another tenant's, one outside `visible` (or a malformed id) is None."""
    pk = uuid_or_none(approval_id)
    if pk is None:
        return None
    rows = ApprovalRequest.objects.filter(tenant_id=tenant_id, pk=pk).select_related("service_account", "tenant")
    if visible is not None:
        rows = rows.filter(visible)
    return rows.first()


# How long a person's "no" answers the same call repeated without a tool_call_id (then it asks afresh).
DECLINE_REMEMBERED = timedelta(minutes=10)


def approval_open_for_call(
    *, service_account_id: str, subject_id: str, tool_id: str, args_sha256: str
) -> ApprovalRequest | None:
    """The request an MCP client's repeat of a person's call stands on, when the repeat names no tool_call_id.

    A 2025-11-25 client retries after a URL elicitation with the same request,
    and a model repeats a call with the same arguments; neither carries the id
    the runner generated. The binding the runner checks anyway (caller, person,
    tool, args) finds it: open and unexpired, consumed-not-yet (approved), or
    declined recently (so the retry learns of the "no" instead of asking again).
    """
    now = timezone.now()
    rows = ApprovalRequest.objects.filter(
        service_account_id=service_account_id, subject_id=subject_id, tool_id=tool_id, args_sha256=args_sha256
    )
    return (
        rows.filter(
            Q(status__in=[ApprovalRequest.Status.PENDING, ApprovalRequest.Status.APPROVED], expires_at__gt=now)
            | Q(status=ApprovalRequest.Status.DENIED, decided_at__gt=now - DECLINE_REMEMBERED)
        )
        .order_by("-created_at")
        .first()
    )


def approval_by_id(*, approval_id: str) -> ApprovalRequest | None:
    """The request the runner just named (its id came from the runner, not from a client)."""
    pk = uuid_or_none(approval_id)
    return None if pk is None else ApprovalRequest.objects.filter(pk=pk).first()


def approval_declined_by_person(*, tenant_id: int, tool_call_id: str, subject_id: str) -> ApprovalRequest | None:
    """The request of this call that its own person declined (the confirm page's "Decline"), if it is one."""
    return (
        ApprovalRequest.objects.filter(
            tenant_id=tenant_id,
            tool_call_id=tool_call_id,
            subject_id=subject_id,
            status=ApprovalRequest.Status.DENIED,
            approver=Approver.SUBJECT,
        )
        .order_by("-created_at")
        .first()
    )


def approval_for_person(*, approval_id: object, user_id: int) -> ApprovalRequest | None:
    """A request of a call made for this person (any tenant); anyone else's, or a malformed id, is None."""
    pk = uuid_or_none(approval_id)
    if pk is None:
        return None
    return (
        ApprovalRequest.objects.filter(pk=pk, subject_id=subject_id_of(user_id))
        .select_related("service_account", "tenant", "decided_by")
        .first()
    )


def tenant_owner_may_decide(*, approval: ApprovalRequest, user_id: int | None) -> bool:
    """An owner of the request's tenant, when the policy that asked names tenant owners as approvers."""
    if user_id is None or approval.approver != Approver.TENANT_OWNER:
        return False
    return TenantMembership.objects.filter(
        tenant_id=approval.tenant_id, user_id=user_id, role=TenantMembership.Role.OWNER
    ).exists()


# --- delegations (calls on a person's behalf) ------------------------------------------


def subject_id_of(user_id: int) -> str:
    """How a call's subject names a tenant user (ToolInvocationContext.subject_id, audit rows)."""
    return f"user:{user_id}"


@dataclass(frozen=True, slots=True)
class _TokenRow:
    delegation_id: str
    digest: str


def delegation_for_token(*, token: str) -> str:
    """The id of the delegation whose current subject token this is, else UNKNOWN_DELEGATION.

    The subject of a call is derived here, from the token's digest, never from a
    request field. A token that is malformed, unknown, replaced by a newer one or
    wrong in its secret part answers alike. Whether the delegation is still
    active, and the caller's, is the authorization stage's question (its reason
    is audited). Unknown prefixes are not remembered: guessing costs queries,
    not this process's memory.
    """
    prefix = subject_token_prefix(token)
    if prefix is None:
        return UNKNOWN_DELEGATION
    row = governance_cache.get(("subject_token", prefix), lambda: _load_token_row(prefix), remember_missing=False)
    if row is None or not key_matches(token, row.digest):
        return UNKNOWN_DELEGATION
    return row.delegation_id


def _load_token_row(prefix: str) -> _TokenRow | None:
    found = Delegation.objects.filter(token_prefix=prefix).values_list("pk", "token_digest").first()
    return None if found is None else _TokenRow(delegation_id=str(found[0]), digest=found[1])


@dataclass(frozen=True, slots=True)
class DelegationRow:
    """What the authorization stage reads of a delegation (one query, then the governance cache)."""

    delegation_id: str
    tenant_id: int
    service_account_id: str
    user_id: int
    tools: frozenset[str] | None
    expires_at: datetime | None
    revoked: bool
    user_is_member: bool
    connection_ids: frozenset[str] = frozenset()


def delegation_for_authz(*, delegation_id: str) -> DelegationRow | None:
    """The delegation and whether its person still belongs to its tenant, from the governance cache when warm.

    Delegations and memberships are governance rows: revoking one (or removing
    the person from the tenant) bumps the generation, so it reaches the next call.
    """
    pk = uuid_or_none(delegation_id)
    if pk is None:
        return None
    return governance_cache.get(("delegation", pk), lambda: _load_delegation_row(pk), remember_missing=False)


def _load_delegation_row(pk: UUID) -> DelegationRow | None:
    member = TenantMembership.objects.filter(tenant_id=OuterRef("tenant_id"), user_id=OuterRef("user_id"))
    row = (
        Delegation.objects.filter(pk=pk)
        .annotate(member=Exists(member))
        .values_list(
            "tenant_id",
            "service_account_id",
            "user_id",
            "tools",
            "expires_at",
            "revoked_at",
            "member",
            "connection_ids",
        )
        .first()
    )
    if row is None:
        return None
    tenant_id, service_account_id, user_id, tools, expires_at, revoked_at, is_member, connection_ids = row
    return DelegationRow(
        delegation_id=str(pk),
        tenant_id=tenant_id,
        service_account_id=str(service_account_id),
        user_id=user_id,
        tools=frozenset(tools) if tools else None,
        expires_at=expires_at,
        revoked=revoked_at is not None,
        user_is_member=bool(is_member),
        connection_ids=frozenset(str(connection_id) for connection_id in connection_ids or ()),
    )


def delegation_list(*, tenant_id: int, user_id: int | None = None) -> QuerySet[Delegation]:
    """A tenant's delegations, newest first; `user_id` narrows them to one person's own."""
    rows = Delegation.objects.filter(tenant_id=tenant_id).select_related("service_account", "user", "revoked_by")
    if user_id is not None:
        rows = rows.filter(user_id=user_id)
    return rows.order_by("-created_at")


def delegation_get(*, tenant_id: int, delegation_id: object, user_id: int | None = None) -> Delegation | None:
    """One delegation of the tenant (and of the person, when given); None for malformed ids and others' alike."""
    pk = uuid_or_none(delegation_id)
    if pk is None:
        return None
    return delegation_list(tenant_id=tenant_id, user_id=user_id).filter(pk=pk).first()


def service_account_for_consent(*, service_account_id: object) -> ServiceAccount | None:
    """A live service account named by id in a consent request (any tenant: the view checks membership)."""
    pk = uuid_or_none(service_account_id)
    if pk is None:
        return None
    return ServiceAccount.objects.select_related("tenant").filter(pk=pk, revoked_at__isnull=True).first()


def tenant_subjects(*, tenant_id: int) -> list[tuple[str, str]]:
    """(subject_id, username) of the tenant's people, by name: the activity page's person filter."""
    rows = (
        TenantMembership.objects.filter(tenant_id=tenant_id)
        .select_related("user")
        .order_by("user__username")
        .values_list("user_id", "user__username")
    )
    return [(subject_id_of(user_id), username) for user_id, username in rows]


def approvals_args_to_rewrap(*, primary_key_id: str, after: UUID | None, limit: int) -> list[ApprovalRequest]:
    """The next batch of requests whose kept args are not under the primary key, in pk order after `after`.

    The row stores no key id: the envelope's header says (core.key_rotation).
    """
    rows = not_sealed_under(ApprovalRequest.objects.all(), "args_sealed", primary_key_id)
    if after is not None:
        rows = rows.filter(pk__gt=after)
    return list(rows.order_by("pk").only("id", "tenant_id", "args_sealed")[:limit])


def approval_args_key_usage() -> dict[str, int]:
    """How many requests' kept args each key id seals (pending ones, and expired ones not yet erased)."""
    return envelope_key_usage(ApprovalRequest.objects.all(), "args_sealed")
