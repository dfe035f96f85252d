"""Reads of connections_app. Every tenant-facing read is scoped by tenant: another tenant's id is None."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Q, QuerySet

from connections_app.models import (
    Connection,
    ConnectionEvent,
    ExecutionGrant,
    OAuthProvider,
    TenantWebhook,
    WebhookDelivery,
)
from policies_app.governance import governance_cache
from policies_app.ids import uuid_or_none
from policies_app.models import Tenant


def connection_list(
    *, tenant: Tenant, include_revoked: bool = True, visible_to_user_id: int | None = None
) -> QuerySet[Connection]:
    """The tenant's connections, newest first.

    `visible_to_user_id` narrows them to what a member (not an owner) sees: the
    tenant's shared connections and their own personal ones. Owners, operators
    and the REST API see every row's metadata (None).
    """
    rows = Connection.objects.filter(tenant=tenant).select_related(
        "created_by", "created_by_service_account", "revoked_by", "owner"
    )
    if visible_to_user_id is not None:
        rows = rows.filter(Q(owner__isnull=True) | Q(owner_id=visible_to_user_id))
    if not include_revoked:
        rows = rows.filter(revoked_at__isnull=True)
    return rows.order_by("-created_at")


def connection_get(
    *, tenant: Tenant, connection_id: object, visible_to_user_id: int | None = None
) -> Connection | None:
    """The tenant's connection with this id; None for malformed ids, other tenants' and others' personal rows alike."""
    pk = uuid_or_none(connection_id)
    if pk is None:
        return None
    return connection_list(tenant=tenant, visible_to_user_id=visible_to_user_id).filter(pk=pk).first()


def connections_of_tenant(*, tenant: Tenant, connection_ids: Iterable[object]) -> tuple[list[Connection], list[str]]:
    """(the tenant's connections among these ids, the ids that are not the tenant's or malformed)."""
    wanted = {str(raw): uuid_or_none(raw) for raw in connection_ids}
    found = {
        str(connection.pk): connection
        for connection in Connection.objects.filter(tenant=tenant, pk__in=[pk for pk in wanted.values() if pk])
    }
    missing = [raw for raw, pk in wanted.items() if pk is None or str(pk) not in found]
    return [found[str(pk)] for pk in wanted.values() if pk and str(pk) in found], missing


def connection_for_use(*, connection_id: str) -> Connection | None:
    """The row the broker checks (any tenant: the broker compares tenants itself and says why)."""
    pk = uuid_or_none(connection_id)
    return Connection.objects.filter(pk=pk).first() if pk else None


def connection_ids_usable(connection_ids: Iterable[str]) -> set[str]:
    """The ids among these that name active connections (the MCP host stops the children of the others)."""
    valid = [parsed for parsed in map(uuid_or_none, connection_ids) if parsed is not None]
    rows = Connection.objects.filter(pk__in=valid, status=Connection.Status.ACTIVE, revoked_at__isnull=True)
    return {str(pk) for pk in rows.values_list("pk", flat=True)}


def connection_events(*, tenant: Tenant, connection_id: object | None = None) -> QuerySet[ConnectionEvent]:
    rows = ConnectionEvent.objects.filter(tenant=tenant).select_related("actor")
    if connection_id is not None:
        rows = rows.filter(connection_id=uuid_or_none(connection_id))
    return rows


def connections_to_rewrap(*, primary_key_id: str, after: uuid.UUID | None, limit: int) -> list[Connection]:
    """The next batch of rows not under the primary key, in pk order after `after` (keyset pagination).

    Keyset rather than OFFSET: rewrapped rows leave the set while the walk goes
    on, and rows that fail stay behind the cursor instead of being read again.
    Only the columns a rewrap needs are loaded.
    """
    rows = Connection.objects.exclude(encryption_key_id=primary_key_id)
    if after is not None:
        rows = rows.filter(pk__gt=after)
    return list(
        rows.order_by("pk").only("id", "tenant", "provider", "encrypted_credentials", "encryption_key_id")[:limit]
    )


def _key_usage(rows: QuerySet) -> dict[str, int]:
    return dict(rows.order_by("encryption_key_id").values_list("encryption_key_id").annotate(n=Count("pk")))


def connection_key_usage() -> dict[str, int]:
    """How many connections each key id encrypts (for rotation reports)."""
    return _key_usage(Connection.objects.all())


def oauth_providers_to_rewrap(*, primary_key_id: str) -> list[OAuthProvider]:
    """Providers whose client secret is not under the primary key (a handful of rows: no batching)."""
    return list(OAuthProvider.objects.exclude(encryption_key_id=primary_key_id).order_by("name"))


def oauth_provider_key_usage() -> dict[str, int]:
    """How many OAuth provider client secrets each key id encrypts."""
    return _key_usage(OAuthProvider.objects.all())


def oauth_provider_list() -> list[OAuthProvider]:
    """Providers a tenant may connect with OAuth, by name."""
    return list(OAuthProvider.objects.order_by("name"))


def connection_label(*, tenant_id: int, connection_id: str) -> str:
    """How a person recognises a connection named by id: its label and provider, never a secret.

    Another tenant's connection, or one that no longer exists, is described as unknown.
    """
    if not connection_id:
        return "none"
    pk = uuid_or_none(connection_id)
    row = Connection.objects.filter(tenant_id=tenant_id, pk=pk).values("label", "provider").first() if pk else None
    if row is None:
        return f"unknown connection {connection_id}"
    return f"{row['label'] or 'unlabelled'} ({row['provider']})"


WEBHOOK_DELIVERIES_SHOWN = 20


def webhook_of_tenant(*, tenant_id: int) -> tuple[TenantWebhook | None, list[WebhookDelivery]]:
    """The tenant's webhook (None if unset) and its most recent deliveries."""
    webhook = TenantWebhook.objects.filter(tenant_id=tenant_id).first()
    deliveries = list(
        WebhookDelivery.objects.filter(tenant_id=tenant_id).order_by("-created_at")[:WEBHOOK_DELIVERIES_SHOWN]
    )
    return webhook, deliveries


# --- grants ------------------------------------------------------------------------


def grant_list(*, tenant_id: int) -> QuerySet[ExecutionGrant]:
    """A tenant's grants, newest first, with their account and connections loaded."""
    return (
        ExecutionGrant.objects.filter(tenant_id=tenant_id)
        .select_related("service_account", "created_by", "revoked_by")
        .prefetch_related("connections")
        .order_by("-created_at")
    )


def grant_get(*, tenant_id: int, grant_id: object) -> ExecutionGrant | None:
    """The tenant's grant with this id; None for malformed ids and other tenants' grants alike."""
    pk = uuid_or_none(grant_id)
    if pk is None:
        return None
    return grant_list(tenant_id=tenant_id).filter(pk=pk).first()


@dataclass(frozen=True, slots=True)
class GrantRow:
    tenant_id: int
    service_account_id: uuid.UUID
    expires_at: datetime | None
    revoked_at: datetime | None
    connection_ids: frozenset[str]
    # Personal connections of the grant: connection id -> owner's user id.
    owners: Mapping[str, int] = field(default_factory=dict)


def grant_for_gate(*, grant_id: str) -> GrantRow | None:
    """What the connection gate needs of a grant, from the governance cache when warm.

    Grants are governance rows (saving one or its connections bumps the
    generation), so a revocation reaches the next call. Unknown ids are not
    remembered: a caller guessing ids costs queries, not this process's memory.
    """
    pk = uuid_or_none(grant_id)
    if pk is None:
        return None
    return governance_cache.get(("grant", pk), lambda: _load_grant_row(pk), remember_missing=False)


def _load_grant_row(grant_id: uuid.UUID) -> GrantRow | None:
    """The grant joined onto its connections (and their owners): one query."""
    rows = list(
        ExecutionGrant.objects.filter(pk=grant_id).values_list(
            "tenant_id", "service_account_id", "expires_at", "revoked_at", "connections__id", "connections__owner_id"
        )
    )
    if not rows:
        return None
    tenant_id, service_account_id, expires_at, revoked_at, _, _ = rows[0]
    connection_ids = frozenset(str(row[4]) for row in rows if row[4] is not None)
    owners = {str(row[4]): row[5] for row in rows if row[4] is not None and row[5] is not None}
    return GrantRow(tenant_id, service_account_id, expires_at, revoked_at, connection_ids, owners)


def grant_list_for_connection(*, tenant_id: int, connection_id: object) -> QuerySet[ExecutionGrant]:
    """The tenant's grants that name this connection (what revoking it would take away)."""
    pk = uuid_or_none(connection_id)
    if pk is None:
        return ExecutionGrant.objects.none()
    return grant_list(tenant_id=tenant_id).filter(connections=pk)
