"""Reads of connections_app. Every tenant-facing read is scoped by tenant: another tenant's id is None."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from django.contrib.auth import get_user_model
from django.db.models import BooleanField, CharField, Count, Exists, ExpressionWrapper, OuterRef, Q, QuerySet, Value
from django.db.models.functions import Cast, Replace
from django.utils import timezone

from changes_app.models import Change
from changes_app.selectors import changes_for_tenant
from connections_app.models import (
    Connection,
    ConnectionEvent,
    ExecutionGrant,
    OAuthProvider,
    TenantWebhook,
    WebhookDelivery,
)
from core.ids import uuid_or_none
from core.key_rotation import envelope_key_usage, not_sealed_under
from policies_app.governance import governance_cache
from policies_app.models import ApprovalRequest, Approver, ServiceAccount, Tenant
from policies_app.selectors import approval_for_tenant, approvals_for_tenant, subject_id_of
from tools_app.models import ToolInvocation
from tools_app.selectors import invocation_list


def connection_list(
    *,
    tenant: Tenant,
    include_revoked: bool = True,
    visible_to_user_id: int | None = None,
    include_personal: bool = True,
) -> QuerySet[Connection]:
    """The tenant's connections, newest first.

    `visible_to_user_id` narrows them to what a member (not an owner) sees: the
    tenant's shared connections and their own personal ones. Owners and
    operators see every row's metadata (None). `include_personal=False` leaves
    every personal connection out: the REST API's keys act for the tenant, and a
    personal connection belongs to its person, not to whoever holds a key.
    """
    rows = Connection.objects.filter(tenant=tenant).select_related(
        "created_by", "created_by_service_account", "revoked_by", "owner"
    )
    if visible_to_user_id is not None:
        rows = rows.filter(Q(owner__isnull=True) | Q(owner_id=visible_to_user_id))
    if not include_personal:
        rows = rows.filter(owner__isnull=True)
    if not include_revoked:
        rows = rows.filter(revoked_at__isnull=True)
    return rows.order_by("-created_at")


def connection_get(
    *, tenant: Tenant, connection_id: object, visible_to_user_id: int | None = None, include_personal: bool = True
) -> Connection | None:
    """The tenant's connection with this id; None for malformed ids, other tenants' and others' personal rows alike."""
    pk = uuid_or_none(connection_id)
    if pk is None:
        return None
    rows = connection_list(tenant=tenant, visible_to_user_id=visible_to_user_id, include_personal=include_personal)
    return rows.filter(pk=pk).first()


def connections_of_tenant(
    *, tenant: Tenant, connection_ids: Iterable[object], include_personal: bool = True
) -> tuple[list[Connection], list[str]]:
    """(the tenant's connections among these ids, the ids that are not the tenant's or malformed)."""
    wanted = {str(raw): uuid_or_none(raw) for raw in connection_ids}
    rows = Connection.objects.filter(tenant=tenant, pk__in=[pk for pk in wanted.values() if pk])
    if not include_personal:
        rows = rows.filter(owner__isnull=True)
    found = {str(connection.pk): connection for connection in rows}
    missing = [raw for raw, pk in wanted.items() if pk is None or str(pk) not in found]
    return [found[str(pk)] for pk in wanted.values() if pk and str(pk) in found], missing


@dataclass(frozen=True, slots=True)
class UsableConnection:
    """What the broker decides on and decrypts, read once per process like a grant.

    Connections are governance rows to the broker: every write that changes
    what it decides (revocation, status, new tokens, new credentials) bumps the
    governance generation in its transaction, so a cached row is dropped on the
    next call in every process (the push, or the re-read within MAX_STALENESS_S
    when a push is lost). The credentials stay sealed here: they are opened
    for each call, never cached in the clear. `last_used_at` is as it was when
    read; connection_touch remembers this process's own touches beside it.
    """

    id: uuid.UUID
    tenant_id: int
    provider: str
    credential_type: str
    status: str
    expires_at: datetime | None
    revoked_at: datetime | None
    owner_id: int | None
    encrypted_credentials: bytes
    last_used_at: datetime | None

    @property
    def pk(self) -> uuid.UUID:
        return self.id

    def binding(self) -> dict[str, str]:
        """What the credential envelope is bound to, as Connection.binding says."""
        return {"tenant": str(self.tenant_id), "connection": str(self.id), "provider": self.provider}


_USABLE_FIELDS = tuple(UsableConnection.__dataclass_fields__)


# How connection rows are named in the governance cache (`cached_row_changed(kind=CONNECTION_ROW, key=<id>)`).
CONNECTION_ROW = "connection"


def connection_for_use(*, connection_id: str) -> UsableConnection | None:
    """The row the broker checks (any tenant: the broker compares tenants itself and says why).

    From the governance cache when warm. Unknown ids are not remembered: a
    caller guessing ids costs queries, not this process's memory.
    """
    pk = uuid_or_none(connection_id)
    if pk is None:
        return None
    return governance_cache.get_row(CONNECTION_ROW, str(pk), lambda: _load_usable_connection(pk))


def _load_usable_connection(pk: uuid.UUID) -> UsableConnection | None:
    rows = list(Connection.objects.filter(pk=pk).order_by().values_list(*_USABLE_FIELDS))
    if not rows:
        return None
    values = dict(zip(_USABLE_FIELDS, rows[0], strict=True))
    values["encrypted_credentials"] = bytes(values["encrypted_credentials"])  # PostgreSQL hands back memoryview
    return UsableConnection(**values)


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


def oauth_providers_to_rewrap(*, primary_key_id: str, after: str | None, limit: int) -> list[OAuthProvider]:
    """The next batch of providers whose client secret is not under the primary key, by name after `after`."""
    rows = OAuthProvider.objects.exclude(encryption_key_id=primary_key_id)
    if after is not None:
        rows = rows.filter(name__gt=after)
    return list(rows.order_by("name")[:limit])


def oauth_provider_key_usage() -> dict[str, int]:
    """How many OAuth provider client secrets each key id encrypts."""
    return _key_usage(OAuthProvider.objects.all())


def webhooks_secret_to_rewrap(*, primary_key_id: str, after: int | None, limit: int) -> list[TenantWebhook]:
    """The next batch of tenant webhooks whose signing secret is not under the primary key, in pk order.

    The row stores no key id: the envelope's header says (core.key_rotation).
    """
    rows = not_sealed_under(TenantWebhook.objects.select_related("tenant"), "secret_sealed", primary_key_id)
    if after is not None:
        rows = rows.filter(pk__gt=after)
    return list(rows.order_by("pk").only("id", "tenant__slug", "secret_sealed")[:limit])


def webhook_secret_key_usage() -> dict[str, int]:
    """How many tenant webhooks' signing secrets each key id seals."""
    return envelope_key_usage(TenantWebhook.objects.all(), "secret_sealed")


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
    # The provider of each connection that is not revoked (what a call naming no connection chooses among).
    providers: Mapping[str, str] = field(default_factory=dict)
    grant_id: str = ""


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


_GRANT_COLUMNS = (
    "pk",
    "tenant_id",
    "service_account_id",
    "expires_at",
    "revoked_at",
    "connections__id",
    "connections__owner_id",
    "connections__provider",
    "connections__revoked_at",
)


def _load_grant_row(grant_id: uuid.UUID) -> GrantRow | None:
    """The grant joined onto its connections (and their owners): one query."""
    rows = _grant_rows(ExecutionGrant.objects.filter(pk=grant_id).values_list(*_GRANT_COLUMNS))
    return rows[0] if rows else None


def _grant_rows(joined: Iterable[tuple]) -> list[GrantRow]:
    """Grant rows from (grant, connection) pairs, in the order their grants first appear."""
    by_grant: dict[uuid.UUID, list[tuple]] = {}
    for row in joined:
        by_grant.setdefault(row[0], []).append(row)
    grants = []
    for pk, rows in by_grant.items():
        _, tenant_id, service_account_id, expires_at, revoked_at, *_ = rows[0]
        joined_connections = [row for row in rows if row[5] is not None]
        grants.append(
            GrantRow(
                tenant_id,
                service_account_id,
                expires_at,
                revoked_at,
                frozenset(str(row[5]) for row in joined_connections),
                {str(row[5]): row[6] for row in joined_connections if row[6] is not None},
                {str(row[5]): row[7] for row in joined_connections if row[8] is None},
                grant_id=str(pk),
            )
        )
    return grants


def grants_for_caller(*, service_account_id: str) -> list[GrantRow]:
    """The service account's grants that are not revoked, with their connections: one query, then the cache.

    Read only for a call on a person's behalf that names no connection. Grants
    and connections are governance rows, so a new grant or a revocation reaches
    the next call.
    """
    pk = uuid_or_none(service_account_id)
    if pk is None:
        return []
    return governance_cache.get(("grants of", pk), lambda: _load_grants_for_caller(pk))


def _load_grants_for_caller(service_account_id: uuid.UUID) -> list[GrantRow]:
    joined = (
        ExecutionGrant.objects.filter(service_account_id=service_account_id, revoked_at__isnull=True)
        .order_by("pk")
        .values_list(*_GRANT_COLUMNS)
    )
    return _grant_rows(joined)


def grant_list_for_connection(*, tenant_id: int, connection_id: object) -> QuerySet[ExecutionGrant]:
    """The tenant's grants that name this connection (what revoking it would take away)."""
    pk = uuid_or_none(connection_id)
    if pk is None:
        return ExecutionGrant.objects.none()
    return grant_list(tenant_id=tenant_id).filter(connections=pk)


# --- who sees a call: approval requests and audit rows ------------------------------------


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who looks at a tenant's calls: a user (None: nobody in particular) and whether they own the tenant.

    The approval webhook is read as `Viewer(user_id=None, is_owner=True)`: an owner set it and its
    receiver acts for the owners, not for any one person.
    """

    user_id: int | None
    is_owner: bool


def _hex(expression: object) -> Replace:
    return Replace(expression, Value("-"), Value(""))


def _names_personal_connection(*, tenant_id: int, owner_id: int | None = None) -> Exists:
    """The row's `connection_id` names a personal connection of the tenant (of `owner_id`, when given).

    Compared as hex digits without hyphens: a UUID column reads as hyphenated text on
    PostgreSQL and as 32 hex digits on SQLite, and `connection_id` is text. Part of the
    row's own query (no query of its own), so pinned page costs stay what they were.
    """
    rows = Connection.objects.filter(tenant_id=tenant_id, owner__isnull=False)
    if owner_id is not None:
        rows = rows.filter(owner_id=owner_id)
    matching = rows.annotate(id_hex=_hex(Cast("id", CharField()))).filter(id_hex=_hex(OuterRef("connection_id")))
    return Exists(matching)


def calls_private(*, tenant_id: int) -> Q:
    """Rows of calls made on behalf of a person (`subject_id`) or with a personal connection."""
    return ~Q(subject_id="") | Q(_names_personal_connection(tenant_id=tenant_id))


def calls_visible(*, tenant_id: int, viewer: Viewer, owners_see_private: Q | None) -> Q:
    """THE visibility rule for rows of a call (approval requests, audit rows), as a filter.

    A call made on behalf of a person, or with a personal connection, is private: among the
    tenant's members only its people see it (the person it was made for, and the owner of
    the personal connection it named) and the tenant's owners where `owners_see_private`
    says (None: every private row). Every other call is the whole tenant's. Both row
    types carry `subject_id` and `connection_id`, so one filter serves both.
    """
    if viewer.is_owner and owners_see_private is None:
        return Q()
    visible = ~calls_private(tenant_id=tenant_id)
    if viewer.user_id is not None:
        visible |= Q(subject_id=subject_id_of(viewer.user_id))
        visible |= Q(_names_personal_connection(tenant_id=tenant_id, owner_id=viewer.user_id))
    if viewer.is_owner and owners_see_private is not None:
        visible |= owners_see_private
    return visible


def approvals_visible(*, tenant_id: int, viewer: Viewer) -> Q:
    """Approval requests the viewer may see: owners see private ones when the policy makes them the approvers.

    A pending request shows the call's decrypted args and its connection's label: only
    its person and, when they decide it, the owners need those.
    """
    return calls_visible(tenant_id=tenant_id, viewer=viewer, owners_see_private=Q(approver=Approver.TENANT_OWNER))


def invocations_visible(*, tenant_id: int, viewer: Viewer) -> Q:
    """Audit rows the viewer may see on the activity page: owners see every row (as every connection)."""
    return calls_visible(tenant_id=tenant_id, viewer=viewer, owners_see_private=None)


def approvals_seen_by(*, tenant_id: int, viewer: Viewer) -> tuple[list[ApprovalRequest], QuerySet[ApprovalRequest]]:
    """The tenant's approval requests this viewer may see: (waiting, oldest first; the rest, newest first)."""
    return approvals_for_tenant(tenant_id=tenant_id, visible=approvals_visible(tenant_id=tenant_id, viewer=viewer))


def approval_seen_by(*, tenant_id: int, viewer: Viewer, approval_id: object) -> ApprovalRequest | None:
    """One request the viewer may see; a hidden one is None, like another tenant's (the portal answers 404)."""
    return approval_for_tenant(
        tenant_id=tenant_id, approval_id=approval_id, visible=approvals_visible(tenant_id=tenant_id, viewer=viewer)
    )


@dataclass(frozen=True, slots=True)
class ApprovalAudience:
    """Whether a request is private, and whether the tenant's owners (the webhook's audience) may see it."""

    private: bool
    owners_may_see: bool


def approval_audience(*, approval: ApprovalRequest) -> ApprovalAudience:
    """The rule, read for one request in one query: what its webhook event may say, and whether to send it."""
    owners = Viewer(user_id=None, is_owner=True)
    private, owners_may_see = (
        ApprovalRequest.objects.filter(pk=approval.pk)
        .annotate(
            private=ExpressionWrapper(calls_private(tenant_id=approval.tenant_id), output_field=BooleanField()),
            seen=ExpressionWrapper(
                approvals_visible(tenant_id=approval.tenant_id, viewer=owners), output_field=BooleanField()
            ),
        )
        .values_list("private", "seen")
        .get()
    )
    return ApprovalAudience(private=bool(private), owners_may_see=bool(owners_may_see))


APPROVAL_CHANGES = "policies_app.approvalrequest"
CONNECTION_CHANGES = "connections_app.connection"


def connection_visible_to(*, connection: Connection, viewer: Viewer) -> bool:
    """Whether the viewer may see the connection's label and page: owners all; members shared ones and their own."""
    return viewer.is_owner or connection.owner_id is None or connection.owner_id == viewer.user_id


def changes_seen_by(*, tenant_id: int, viewer: Viewer) -> QuerySet[Change]:
    """The tenant's change log as this viewer may read it: decisions on requests they may not see are left out.

    A decision's entry names the call (tool, service account, time) and the approver's reason:
    part of the request, so it follows the request's rule. Entries of another member's personal
    connection are left out for plain members, as the connection itself is.
    """
    hidden = (
        ApprovalRequest.objects.filter(tenant_id=tenant_id)
        .exclude(approvals_visible(tenant_id=tenant_id, viewer=viewer))
        .annotate(id_hex=_hex(Cast("id", CharField())))
        .filter(id_hex=_hex(OuterRef("object_id")))
    )
    changes = changes_for_tenant(tenant_id=tenant_id).exclude(Q(object_type=APPROVAL_CHANGES) & Q(Exists(hidden)))
    if viewer.is_owner:
        return changes
    others_personal = (  # their entries carry the label: the connection's, like its page, is its owner's to see
        Connection.objects.filter(tenant_id=tenant_id, owner__isnull=False)
        .exclude(owner_id=viewer.user_id)
        .annotate(id_hex=_hex(Cast("id", CharField())))
        .filter(id_hex=_hex(OuterRef("object_id")))
    )
    return changes.exclude(Q(object_type=CONNECTION_CHANGES) & Q(Exists(others_personal)))


def invocations_seen_by(
    *, tenant_id: int, viewer: Viewer, run_id: str = "", tool_id: str = "", ok: bool | None = None, subject_id: str = ""
) -> QuerySet[ToolInvocation]:
    """The tenant's audit rows this viewer may see (the activity page), filtered like `invocation_list`."""
    return invocation_list(tenant_id=tenant_id, run_id=run_id, tool_id=tool_id, ok=ok, subject_id=subject_id).filter(
        invocations_visible(tenant_id=tenant_id, viewer=viewer)
    )


# --- the change log, readable: names for the ids its entries hold ------------------------------------


@dataclass(frozen=True, slots=True)
class NamedId:
    """An id recorded in the change log, shown by its name (the id stays on hover)."""

    text: str
    id: str


# Recorded fields that hold ids of rows people know by name.
_NAMED_FIELDS = {"tenant": "tenant", "service_account": "service_account", "connections": "connection", "user": "user"}


def change_entries_named(changes: Iterable[Change]) -> list[Change]:
    """The entries with `named_fields` (field, before, after; ids as NamedId) and `object_name` set.

    One query per kind of id on the page (tenants, service accounts, connections, users, grants),
    whatever the number of entries. An id whose row is gone keeps showing the id.
    """
    entries = list(changes)
    wanted: dict[str, set[str]] = {kind: set() for kind in (*_NAMED_FIELDS.values(), "grant")}
    for entry in entries:
        for field_name, before, after in entry.field_changes():
            kind = _NAMED_FIELDS.get(field_name)
            if kind is not None:
                for value in (before, after):
                    wanted[kind].update(str(one) for one in (value if isinstance(value, list) else [value]) if one)
        if entry.object_type == "connections_app.executiongrant":
            wanted["grant"].add(entry.object_id)
    names = _names_of(wanted)
    for entry in entries:
        entry.named_fields = [
            (
                field_name,
                _named(names, _NAMED_FIELDS.get(field_name), before),
                _named(names, _NAMED_FIELDS.get(field_name), after),
            )
            for field_name, before, after in entry.field_changes()
        ]
        entry.object_name = names["grant"].get(entry.object_id) or entry.object_label or entry.object_id
    return entries


def _names_of(wanted: Mapping[str, set[str]]) -> dict[str, dict[str, str]]:
    def uuids(kind: str) -> list[uuid.UUID]:
        return [one for one in (uuid_or_none(value) for value in wanted[kind]) if one is not None]

    def ints(kind: str) -> list[int]:
        return [int(value) for value in wanted[kind] if value.isdigit()]

    names: dict[str, dict[str, str]] = {kind: {} for kind in wanted}
    if wanted["tenant"]:
        names["tenant"] = {
            str(pk): slug for pk, slug in Tenant.objects.filter(pk__in=ints("tenant")).values_list("pk", "slug")
        }
    if wanted["service_account"]:
        names["service_account"] = {
            str(pk): name
            for pk, name in ServiceAccount.objects.filter(pk__in=uuids("service_account")).values_list("pk", "name")
        }
    if wanted["connection"]:
        names["connection"] = {
            str(connection.pk): connection.label or f"{connection.provider} {connection.credential_type}"
            for connection in Connection.objects.filter(pk__in=uuids("connection")).only(
                "pk", "label", "provider", "credential_type"
            )
        }
    if wanted["user"]:
        names["user"] = {
            str(pk): username
            for pk, username in get_user_model().objects.filter(pk__in=ints("user")).values_list("pk", "username")
        }
    if wanted["grant"]:
        names["grant"] = {
            str(pk): f"grant to {account}"
            for pk, account in ExecutionGrant.objects.filter(pk__in=uuids("grant")).values_list(
                "pk", "service_account__name"
            )
        }
    return names


def _named(names: Mapping[str, Mapping[str, str]], kind: str | None, value: object) -> object:
    if kind is None or value is None:
        return value
    if isinstance(value, list):
        return [NamedId(text=names[kind].get(str(one), str(one)), id=str(one)) for one in value]
    return NamedId(text=names[kind].get(str(value), str(value)), id=str(value))


# --- what a person may declare for a service account ----------------------------------------


def connections_declarable(*, tenant_id: int, user_id: int, service_account_id: object | None) -> list[Connection]:
    """The connections a person may let this account use for calls that name none, by provider then age.

    The tenant's shared connections and the person's own, not revoked, that a
    live grant of the account holds: what is not granted could never be used
    (grant ∩ declared), so the consent and delegation pages offer only these.
    `service_account_id=None` (the new-delegation form, before an account is
    chosen): those a live grant of any live account of the tenant holds.
    """
    now = timezone.now()
    if service_account_id is None:
        granted = ExecutionGrant.objects.filter(
            tenant_id=tenant_id, service_account__revoked_at__isnull=True, connections=OuterRef("pk")
        )
    else:
        pk = uuid_or_none(service_account_id)
        if pk is None:
            return []
        granted = ExecutionGrant.objects.filter(service_account_id=pk, connections=OuterRef("pk"))
    granted = granted.filter(revoked_at__isnull=True).filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
    return list(
        Connection.objects.filter(tenant_id=tenant_id, revoked_at__isnull=True)
        .filter(Q(owner__isnull=True) | Q(owner_id=user_id))
        .filter(Exists(granted))
        .order_by("provider", "created_at")
    )
