"""Writes of policies_app: tenants, service accounts, policies, grants, approvals.

Every write that changes what a call may do bumps the governance generation in
the same transaction (see governance.py), so caches everywhere drop it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from policies_app.governance import governance_bump
from policies_app.keys import key_generate
from policies_app.metrics import APPROVALS_DECIDED, APPROVALS_REQUESTED
from policies_app.models import ApprovalRequest, ExecutionGrant, ServiceAccount, Tenant
from runner.types import ToolEffect

if TYPE_CHECKING:
    from connections_app.models import Connection

APPROVAL_TTL = timedelta(hours=24)
LAST_USED_RESOLUTION = timedelta(minutes=1)
VALID_SCOPES = frozenset(ServiceAccount.Scope.values)


class PolicyServiceError(ValueError):
    """A request the service refuses; the message is safe to show to the operator or caller."""


def tenant_create(*, slug: str, name: str = "") -> Tenant:
    tenant = Tenant(slug=slug, name=name or slug)
    tenant.full_clean()
    tenant.save()
    return tenant


@transaction.atomic
def service_account_create(
    *, tenant: Tenant, name: str, scopes: Iterable[str] = ("tools:exec",), created_by: AbstractBaseUser | None = None
) -> tuple[ServiceAccount, str]:
    """Create an account and return it with its key: the only time the key exists in clear."""
    scopes = sorted(set(scopes))
    unknown = set(scopes) - VALID_SCOPES
    if unknown:
        raise PolicyServiceError(f"unknown scopes: {', '.join(sorted(unknown))}")
    new_key = key_generate()
    account = ServiceAccount(
        tenant=tenant,
        name=name,
        scopes=scopes,
        key_prefix=new_key.prefix,
        key_digest=new_key.digest,
        created_by=created_by,
    )
    account.full_clean()
    account.save()  # the save signal bumps the governance generation
    return account, new_key.key


@transaction.atomic
def service_account_revoke(*, account: ServiceAccount, revoked_by: AbstractBaseUser | None = None) -> bool:
    """Revoke once; the key stops working on the next call. False if it was already revoked."""
    updated = ServiceAccount.objects.filter(pk=account.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now(), revoked_by=revoked_by
    )
    if updated:
        governance_bump()  # a queryset update sends no signal
    account.refresh_from_db()
    return bool(updated)


def service_account_touch(*, service_account_id: str, last_used_at: datetime | None, now: datetime) -> None:
    """Record use at most once a minute per account: a hot-path write we keep rare."""
    if last_used_at is not None and now - last_used_at < LAST_USED_RESOLUTION:
        return
    ServiceAccount.objects.filter(pk=service_account_id).filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
    ).update(last_used_at=now)


@transaction.atomic
def grant_create(
    *,
    tenant: Tenant,
    service_account: ServiceAccount,
    connections: Iterable[Connection],
    expires_at: datetime | None = None,
    created_by: AbstractBaseUser | None = None,
) -> ExecutionGrant:
    """Let one service account use these connections, all of its own tenant and not revoked."""
    connections = list(connections)
    if service_account.tenant_id != tenant.pk:
        raise PolicyServiceError("the service account belongs to another tenant")
    if service_account.revoked_at is not None:
        raise PolicyServiceError("the service account is revoked")
    if not connections:
        raise PolicyServiceError("a grant names at least one connection")
    if any(connection.tenant_id != tenant.pk for connection in connections):
        raise PolicyServiceError("a connection belongs to another tenant")
    if any(connection.revoked_at is not None for connection in connections):
        raise PolicyServiceError("a connection is revoked")
    now = timezone.now()
    if expires_at is not None and expires_at <= now:
        raise PolicyServiceError("expires_at is in the past")
    # A second grant of the same connections adds nothing but a row to revoke later. The lock on the
    # account serialises grant creation per account, so two simultaneous requests cannot both pass.
    list(ServiceAccount.objects.select_for_update().filter(pk=service_account.pk).values_list("pk", flat=True))
    wanted = {connection.pk for connection in connections}
    live = (
        ExecutionGrant.objects.filter(service_account=service_account, revoked_at__isnull=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .prefetch_related("connections")
        .order_by("created_at")
    )
    for existing in live:
        if {connection.pk for connection in existing.connections.all()} == wanted:
            raise PolicyServiceError(
                f"{service_account.name} already has an active grant of exactly these connections "
                f"(grant {existing.pk}); use that grant, or revoke it first to replace it"
            )
    grant = ExecutionGrant.objects.create(
        tenant=tenant, service_account=service_account, expires_at=expires_at, created_by=created_by
    )
    grant.connections.set(connections)
    return grant


def grant_revoke(*, grant: ExecutionGrant, revoked_by: AbstractBaseUser | None = None) -> bool:
    updated = ExecutionGrant.objects.filter(pk=grant.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now(), revoked_by=revoked_by
    )
    grant.refresh_from_db()
    return bool(updated)


# --- approvals -----------------------------------------------------------------


def approval_check(
    *,
    tenant_id: int | str,
    service_account_id: str,
    tool_id: str,
    effect: ToolEffect,
    connection_id: str | None,
    args_sha256: str,
    tool_call_id: str,
) -> tuple[str, ApprovalRequest]:
    """Where this exact call stands: ("allow" | "pending" | "deny:<reason>", the approval).

    Opens a pending approval on first sight; an approved one is consumed here.
    An approval authorises one tool_call_id, and the runner's claim on that id
    lets it execute at most once: a repeat of the approved call (a replay, or a
    retry after it was refused further down the pipeline) is allowed again and
    answered from the claim, never run twice.
    """
    now = timezone.now()
    approval = (
        ApprovalRequest.objects.filter(tenant_id=tenant_id, tool_call_id=tool_call_id).order_by("-created_at").first()
    )
    if approval is None:
        approval = _approval_open(
            tenant_id=tenant_id,
            service_account_id=service_account_id,
            tool_id=tool_id,
            effect=effect,
            connection_id=connection_id,
            args_sha256=args_sha256,
            tool_call_id=tool_call_id,
        )
        return "pending", approval
    bound = (
        str(approval.service_account_id) == service_account_id
        and approval.tool_id == tool_id
        and approval.connection_id == (connection_id or "")
        and approval.args_sha256 == args_sha256
    )
    if not bound:
        return "deny:this tool_call_id awaits approval for a different request", approval
    if approval.status == ApprovalRequest.Status.DENIED:
        return "deny:an operator denied this call", approval
    if approval.status == ApprovalRequest.Status.CONSUMED:
        return "allow", approval
    if approval.expires_at <= now:
        return "deny:the approval expired", approval
    if approval.status == ApprovalRequest.Status.PENDING:
        return "pending", approval
    ApprovalRequest.objects.filter(pk=approval.pk, status=ApprovalRequest.Status.APPROVED).update(
        status=ApprovalRequest.Status.CONSUMED, consumed_at=now
    )
    return "allow", approval


def _approval_open(**binding: object) -> ApprovalRequest:
    try:
        with transaction.atomic():
            approval = ApprovalRequest.objects.create(
                tenant_id=binding["tenant_id"],
                service_account_id=binding["service_account_id"],
                tool_id=binding["tool_id"],
                effect=str(binding["effect"]),
                connection_id=binding["connection_id"] or "",
                args_sha256=binding["args_sha256"],
                tool_call_id=binding["tool_call_id"],
                expires_at=timezone.now() + APPROVAL_TTL,
            )
        transaction.on_commit(APPROVALS_REQUESTED.inc)  # counted once it is really open
        return approval
    except IntegrityError:  # a concurrent identical call opened it first
        return ApprovalRequest.objects.get(
            tenant_id=binding["tenant_id"],
            tool_call_id=binding["tool_call_id"],
            status__in=[ApprovalRequest.Status.PENDING, ApprovalRequest.Status.APPROVED],
        )


@transaction.atomic
def approval_decide(
    *,
    approval: ApprovalRequest,
    approve: bool,
    decided_by: AbstractBaseUser | None,
    decided_by_name: str = "",
    reason: str = "",
) -> bool:
    """Approve or deny a pending, unexpired request, recording who, when and why. False if not pending.

    `decided_by_name` names a decider without a Django account (`os:<user>` from the command line);
    an admin decision records the user's name there too, so the record outlives the account.
    """
    now = timezone.now()
    updated = ApprovalRequest.objects.filter(
        pk=approval.pk, status=ApprovalRequest.Status.PENDING, expires_at__gt=now
    ).update(
        status=ApprovalRequest.Status.APPROVED if approve else ApprovalRequest.Status.DENIED,
        decided_at=now,
        decided_by=decided_by,
        decided_by_name=(decided_by.get_username() if decided_by is not None else decided_by_name)[:150],
        reason=reason[:500],
    )
    approval.refresh_from_db()
    if updated:
        transaction.on_commit(APPROVALS_DECIDED.labels("approved" if approve else "denied").inc)
    return bool(updated)
