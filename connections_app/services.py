"""Writes of connections_app: create, revoke, record use, re-encrypt.

Each write records its ConnectionEvent in the same transaction. Plaintext
credentials exist only inside `connection_create` (on their way into the
envelope) and `connection_credentials_open` (on their way into a capability).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from changes_app.services import ObjectRef, change_record, change_snapshot
from connections_app.credentials import MANUAL_TYPES, SHAPES, CredentialsInvalid, credentials_validate
from connections_app.models import Connection, ConnectionEvent, ExecutionGrant, OAuthProvider
from connections_app.selectors import UsableConnection, connections_of_tenant
from core.crypto import CredentialError, KeyRing, open_json, open_sealed, seal, seal_json
from core.errors import AppError
from core.ids import uuid_or_none
from core.key_rotation import RewrapOutcome
from gateway.upstream.host_endpoint import host_stop_connection
from policies_app.governance import governance_bump
from policies_app.models import Delegation, ServiceAccount, Tenant, TenantMembership
from policies_app.services import consent_approve, delegation_create, revoke_once
from policies_app.signals import row_changed
from runner import wording
from tools_app.selectors import tool_providers

LAST_USED_RESOLUTION = timedelta(minutes=1)
# This process's own touches (connection id -> when), beside the cached rows' older last_used_at;
# bounded like the governance cache, so made-up ids cannot grow it.
_TOUCHED_MAX = 20_000
_touched: dict[Any, datetime] = {}
MAX_SCOPES = 50
MAX_SCOPE_LENGTH = 200
# A path segment of a credentials error that is not a field of any credential shape is a key the
# caller sent: it is reported as UNKNOWN_FIELD, since a caller may put anything in a key, even a secret.
_CREDENTIAL_FIELDS = frozenset(name for shape in SHAPES.values() for name in shape.model_fields)


def _safe_path(path: str) -> str:
    """A credentials error's path with the segments the caller chose (keys of `credentials`) masked."""
    head, _, rest = path.partition(".")
    if head != "credentials" or not rest:
        return path
    return ".".join([head, *(_credential_part(part) for part in rest.split("."))])


def _credential_part(part: str) -> str:
    """A declared field, or a typo of one (runner.wording.unknown_field_name): anything else is masked."""
    return part if part in _CREDENTIAL_FIELDS else wording.unknown_field_name(part, sorted(_CREDENTIAL_FIELDS))


@transaction.atomic
def connection_create(
    *,
    tenant: Tenant,
    provider: str,
    credential_type: str,
    credentials: Mapping[str, Any],
    scopes: Iterable[str] = (),
    expires_at: datetime | None = None,
    label: str = "",
    created_by: AbstractBaseUser | None = None,
    created_by_service_account_id: str | None = None,
    owner: AbstractBaseUser | None = None,
) -> Connection:
    """Store a hand-entered credential (API key or app password), encrypted and bound to the new row.

    `created_by` is the user of the web UI; `created_by_service_account_id` the API caller that stored it.
    `owner` makes it a personal connection of that tenant member: usable only by calls on their behalf.
    """
    errors: list[tuple[str, str]] = []
    if owner is not None and not TenantMembership.objects.filter(tenant=tenant, user=owner).exists():
        errors.append(("owner", "a personal connection belongs to a member of the tenant"))
    if provider not in tool_providers():
        errors.append(("provider", f"unknown provider; one of: {', '.join(tool_providers())}"))
    if credential_type not in MANUAL_TYPES:
        errors.append(("credential_type", f"one of: {', '.join(MANUAL_TYPES)}"))
    scopes = _scopes_clean(scopes, errors)
    if expires_at is not None and expires_at <= timezone.now():
        errors.append(("expires_at", "must be in the future"))
    if errors:
        raise AppError("the connection is not valid", field_errors=errors)
    try:
        secret = credentials_validate(credential_type, credentials)
    except CredentialsInvalid as exc:
        raise AppError(
            "the credentials are not valid", field_errors=[(_safe_path(path), message) for path, message in exc.errors]
        ) from None
    connection = Connection(
        tenant=tenant,
        provider=provider,
        credential_type=credential_type,
        label=label.strip(),
        scopes=scopes,
        expires_at=expires_at,
        created_by=created_by,
        created_by_service_account_id=created_by_service_account_id,
        owner=owner,
    )
    seal_credentials_into(connection, secret)
    connection.full_clean()
    connection.save()
    event = connection_event_record(
        connection,
        ConnectionEvent.Kind.CREATED,
        actor=created_by,
        service_account_id=created_by_service_account_id,
    )
    connection_change_record(connection, "connection.create", before=None, event=event)
    return connection


def _scopes_clean(scopes: Iterable[str], errors: list[tuple[str, str]]) -> list[str]:
    cleaned = sorted({scope.strip() for scope in scopes if isinstance(scope, str) and scope.strip()})
    if len(cleaned) > MAX_SCOPES or any(len(scope) > MAX_SCOPE_LENGTH for scope in cleaned):
        errors.append(("scopes", f"at most {MAX_SCOPES} scopes of at most {MAX_SCOPE_LENGTH} characters"))
    return cleaned


def seal_credentials_into(connection: Connection, credentials: Mapping[str, Any]) -> None:
    """Encrypt credentials into the row under the primary key (the caller saves it)."""
    sealed = seal_json(credentials, binding=connection.binding(), ring=KeyRing.from_settings())
    connection.encrypted_credentials = sealed.blob
    connection.encryption_key_id = sealed.key_id


class SealedConnection(Protocol):
    """A connection row or the broker's cached UsableConnection: what opening its envelope needs."""

    @property
    def encrypted_credentials(self) -> bytes: ...

    def binding(self) -> dict[str, str]: ...


def connection_credentials_open(connection: SealedConnection, *, ring: KeyRing | None = None) -> dict[str, Any]:
    """The decrypted credentials; raises CredentialError (never returns a fallback)."""
    return open_json(
        connection.encrypted_credentials, binding=connection.binding(), ring=ring or KeyRing.from_settings()
    )


@transaction.atomic
def connection_revoke(*, connection: Connection, revoked_by: AbstractBaseUser | None = None) -> bool:
    """Revoke once; the broker refuses it from the next call on. False if it was already revoked.

    Beyond `revoke_once`: the status goes to `revoked` in the same UPDATE (a
    constraint ties the two), the refresh sweep forgets it, and its event
    trail records the revocation, linked from the change entry. After the commit,
    the MCP host is told to stop the connection's stdio children.
    """
    now = timezone.now()
    revoked = revoke_once(
        row=connection,
        action="connection.revoke",
        revoked_by=revoked_by,
        also={"status": Connection.Status.REVOKED, "next_refresh_at": None, "updated_at": now},
        record=lambda revoked: {
            "connection_event": connection_event_record(revoked, ConnectionEvent.Kind.REVOKED, actor=revoked_by).pk
        },
        now=now,
    )
    if revoked:
        connection_children_stop_on_commit(connection_id=connection.pk)
    return revoked


def connection_children_stop_on_commit(*, connection_id: object) -> None:
    """After the commit, the MCP host stops the stdio children serving this connection.

    A push, because the host reads no database. The broker already refuses the
    connection from the commit on, before the host is reached; this only ends an
    idle child (holding the old credential) sooner. Never raises: the host being
    down is logged by `host_stop_connection`.
    """
    transaction.on_commit(lambda: host_stop_connection(str(connection_id)))


@transaction.atomic
def connection_refresh_resume(*, connection: Connection, actor: AbstractBaseUser | None = None) -> bool:
    """Put a connection that needs attention back in the refresh sweep, due now. False if it does not.

    Its failure count stays: the next refresh is one more try, and a failure
    sends it straight back to `needs_attention`; a success resets the count.
    """
    now = timezone.now()
    before = change_snapshot(connection)
    updated = Connection.objects.filter(
        pk=connection.pk, status=Connection.Status.NEEDS_ATTENTION, revoked_at__isnull=True
    ).update(status=Connection.Status.ACTIVE, next_refresh_at=now, updated_at=now)
    connection.refresh_from_db()
    if updated:
        event = connection_event_record(connection, ConnectionEvent.Kind.REFRESH_RESUMED, actor=actor)
        connection_change_record(connection, "connection.resume_refresh", before=before, event=event)
        row_changed(connection)  # the status the broker reads changed: every process drops the row it cached
    return bool(updated)


def connection_change_record(
    connection: Connection, action: str, *, before: dict[str, Any] | None, event: ConnectionEvent
) -> None:
    """The change-log entry of a connection write, linked to the ConnectionEvent it also left."""
    change_record(
        action=action,
        obj=connection,
        before=before,
        after=change_snapshot(connection),
        links={"connection_event": event.pk},
    )


def connection_touch(*, connection: Connection | UsableConnection, now: datetime) -> None:
    """Record use at most once a minute: the broker calls this on every resolve.

    The broker's row may be cached from before this process last touched it, so
    the process remembers its own touches: a warm connection costs no UPDATE
    within the minute. Not a governance write (no generation bump): last use
    decides nothing.
    """
    last = connection.last_used_at
    mine = _touched.get(connection.pk)
    if mine is not None and (last is None or mine > last):
        last = mine
    if last is not None and now - last < LAST_USED_RESOLUTION:
        return
    if len(_touched) >= _TOUCHED_MAX:
        _touched.clear()
    _touched[connection.pk] = now
    Connection.objects.filter(pk=connection.pk).filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
    ).update(last_used_at=now)


def connection_use_denied(
    *, tenant_id: int | str, connection_id: str, service_account_id: str | None, tool_id: str, reason: str
) -> None:
    """Audit a refused use (the invocation row records the call; this records the connection's side)."""
    ConnectionEvent.objects.create(
        tenant_id=tenant_id,
        connection_id=connection_id,
        kind=ConnectionEvent.Kind.USE_DENIED,
        service_account_id=service_account_id,
        tool_id=tool_id,
        detail=reason[:200],
    )


def connection_rewrap(*, connection: Connection, ring: KeyRing) -> RewrapOutcome:
    """Re-encrypt one row under the ring's primary key, compare-and-swap on the old envelope.

    The UPDATE matches the key id and blob that were read, so a write that
    happened in between (a token refresh, another rewrap) is never overwritten:
    the row is simply skipped and picked up by the next run if still needed.
    """
    old_blob = bytes(connection.encrypted_credentials)
    old_key_id = connection.encryption_key_id
    try:
        secret = open_json(old_blob, binding=connection.binding(), ring=ring)
    except CredentialError as exc:
        return RewrapOutcome(False, str(exc), error=exc)
    sealed = seal_json(secret, binding=connection.binding(), ring=ring)
    with transaction.atomic():
        updated = Connection.objects.filter(
            pk=connection.pk, encryption_key_id=old_key_id, encrypted_credentials=old_blob
        ).update(encrypted_credentials=sealed.blob, encryption_key_id=sealed.key_id)
        if not updated:
            return RewrapOutcome(False, "changed concurrently")
        connection_event_record(connection, ConnectionEvent.Kind.REWRAPPED, detail=f"{old_key_id} -> {sealed.key_id}")
    return RewrapOutcome(True)


def oauth_provider_rewrap(*, provider: OAuthProvider, ring: KeyRing) -> RewrapOutcome:
    """Re-encrypt an OAuth provider's client secret under the primary key, with the same compare-and-swap.

    The client secret is sealed with the same key ring as connections: a key
    cannot be retired while a provider's secret still depends on it.
    """
    old_blob = bytes(provider.encrypted_client_secret)
    old_key_id = provider.encryption_key_id
    try:
        secret = open_sealed(old_blob, binding=provider.binding(), ring=ring)
    except CredentialError as exc:
        return RewrapOutcome(False, str(exc), error=exc)
    sealed = seal(secret, binding=provider.binding(), ring=ring)
    updated = OAuthProvider.objects.filter(
        pk=provider.pk, encryption_key_id=old_key_id, encrypted_client_secret=old_blob
    ).update(encrypted_client_secret=sealed.blob, encryption_key_id=sealed.key_id, updated_at=timezone.now())
    if not updated:
        return RewrapOutcome(False, "changed concurrently")
    return RewrapOutcome(True)


@dataclass(frozen=True, slots=True)
class RotationCounts:
    """What one key rotation run did to one kind of row."""

    rewrapped: int
    skipped: int
    failed: int


@transaction.atomic
def key_rotation_record(
    *, primary_key_id: str, counts: Mapping[str, RotationCounts], key_ids_in_use: Iterable[str]
) -> None:
    """Remember a key rotation run in the change log: which key it rotated to, what it did, and
    which key ids still seal something afterwards (an older key among them cannot be dropped yet).

    `counts` maps each kind the run looked at to its counts, under the change
    log's names: `connections`, `providers` (OAuth client secrets),
    `sso_providers` (identity providers' client secrets),
    `mcp_tokens` (MCP servers' operator tokens), `mcp_secret_envs` (stdio
    servers' secret environments), `approval_args` (pending approvals'
    arguments), `webhook_secrets` (tenant webhooks' signing secrets).
    Each row was rewrapped in its own transaction (see connection_rewrap, whose
    ConnectionEvent marks every row); the run as a whole is one governance act.
    Key ids are public names in TOOLGATE_ENCRYPTION_KEYS, never key material.
    """
    after: dict[str, Any] = {"primary_key_id": primary_key_id}
    for kind, kind_counts in counts.items():
        after |= {
            f"{kind}_rewrapped": kind_counts.rewrapped,
            f"{kind}_skipped": kind_counts.skipped,
            f"{kind}_failed": kind_counts.failed,
        }
    after["key_ids_in_use"] = sorted(key_ids_in_use)
    # Rows were rewrapped one by one; processes holding a row's old envelope could still open it (the
    # old key is in the ring while it rotates), but they drop it now, before the old key can go.
    governance_bump()
    change_record(
        action="keys.rotate",
        obj=ObjectRef(type="connections_app.keyring", id=primary_key_id, label=f"key ring, primary {primary_key_id}"),
        before=None,
        after=after,
    )


def connection_event_record(
    connection: Connection,
    kind: str,
    *,
    actor: AbstractBaseUser | None = None,
    service_account_id: str | None = None,
    detail: str = "",
) -> ConnectionEvent:
    """Append to the connection's audit trail (call it inside the write's transaction)."""
    return ConnectionEvent.objects.create(
        tenant_id=connection.tenant_id,
        connection_id=connection.pk,
        provider=connection.provider,
        kind=kind,
        actor=actor,
        service_account_id=service_account_id,
        detail=detail,
    )


# --- grants ------------------------------------------------------------------------


@transaction.atomic
def grant_create(
    *,
    tenant: Tenant,
    service_account: ServiceAccount,
    connections: Iterable[Connection],
    expires_at: datetime | None = None,
    created_by: AbstractBaseUser | None = None,
    created_by_service_account_id: str | None = None,
) -> ExecutionGrant:
    """Let one service account use these connections, all of its own tenant and not revoked.

    `created_by` is the web UI's user; `created_by_service_account_id` the API caller that made it.
    """
    connections = list(connections)
    if service_account.tenant_id != tenant.pk:
        raise AppError("the service account belongs to another tenant")
    if service_account.revoked_at is not None:
        raise AppError("the service account is revoked")
    if not connections:
        raise AppError("a grant names at least one connection")
    if any(connection.tenant_id != tenant.pk for connection in connections):
        raise AppError("a connection belongs to another tenant")
    if any(connection.revoked_at is not None for connection in connections):
        raise AppError("a connection is revoked")
    if created_by_service_account_id is not None and any(connection.owner_id is not None for connection in connections):
        # A key's power is the tenant's, not a person's: only the person (in the portal) grants what is theirs.
        raise AppError("a personal connection is granted by its person in the tenant portal, never with an API key")
    now = timezone.now()
    if expires_at is not None and expires_at <= now:
        raise AppError("expires_at is in the past")
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
            raise AppError(
                f"{service_account.name} already has an active grant of exactly these connections "
                f"(grant {existing.pk}); use that grant, or revoke it first to replace it"
            )
    grant = ExecutionGrant.objects.create(
        tenant=tenant,
        service_account=service_account,
        expires_at=expires_at,
        created_by=created_by,
        created_by_service_account_id=created_by_service_account_id,
    )
    grant.connections.set(connections)
    change_record(action="grant.create", obj=grant, after=change_snapshot(grant))
    return grant


@transaction.atomic
def grant_revoke(*, grant: ExecutionGrant, revoked_by: AbstractBaseUser | None = None) -> bool:
    """Revoke once; its connections stop being usable by the account on the next call. False if already revoked."""
    return revoke_once(row=grant, action="grant.revoke", revoked_by=revoked_by)


# --- what a person declares for a service account (connections chosen for calls that name none) ---------

MAX_DECLARED_CONNECTIONS = 50


@transaction.atomic
def delegation_connections_set(*, delegation: Delegation, connection_ids: Iterable[object]) -> Delegation:
    """The person's declaration of which of their connections the account may use when a call names none.

    Each must be the delegation's tenant's, not revoked, and the tenant's
    shared connection or the person's own (never another person's). The write
    bumps the governance generation (a Delegation save), so the next call
    chooses from the new set; the change log keeps before and after.
    """
    wanted = list(dict.fromkeys(str(raw) for raw in connection_ids))
    if len(wanted) > MAX_DECLARED_CONNECTIONS:
        raise AppError(f"at most {MAX_DECLARED_CONNECTIONS} connections", field_errors=[("connection_ids", "too many")])
    tenant = Tenant.objects.get(pk=delegation.tenant_id)
    found, missing = connections_of_tenant(tenant=tenant, connection_ids=wanted)
    unusable = [
        str(connection.pk)
        for connection in found
        if connection.revoked_at is not None or connection.owner_id not in (None, delegation.user_id)
    ]
    if missing or unusable:
        message = "a connection is not one of the tenant's live connections that this person may use"
        raise AppError(message, field_errors=[("connection_ids", message)])
    stored = Delegation.objects.select_for_update().get(pk=delegation.pk)
    if stored.revoked_at is not None:
        raise AppError("the delegation is revoked")
    before = change_snapshot(stored)
    stored.connection_ids = sorted(str(connection.pk) for connection in found)
    stored.save(update_fields=["connection_ids"])
    change_record(action="delegation.connections_set", obj=stored, before=before, after=change_snapshot(stored))
    delegation.connection_ids = stored.connection_ids
    return delegation


# --- connecting an account for a call that waits on its person (URL elicitation) --------------


@transaction.atomic
def connection_declare_for_call(
    *, delegation: Delegation, connection: Connection, user: AbstractBaseUser
) -> Delegation:
    """A connection the person just made for a call: granted to the account and declared on their delegation.

    The person's own powers in the portal, in one transaction: any member may
    grant their personal connection to a service account (grant_create), and
    declare it for calls that name none (delegation_connections_set). What the
    delegation declared before stays, less what can no longer be used (a
    revoked connection would refuse the whole declaration). Each write leaves
    its change-log entry, with the person as actor.
    """
    if delegation.user_id != user.pk or connection.tenant_id != delegation.tenant_id:
        raise AppError("this connection cannot be declared for this delegation")
    if connection.owner_id not in (None, user.pk) or connection.revoked_at is not None:
        raise AppError("only a live connection of the tenant or of this person can be declared")
    now = timezone.now()
    granted = (
        ExecutionGrant.objects.filter(
            service_account_id=delegation.service_account_id, revoked_at__isnull=True, connections=connection
        )
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .exists()
    )
    if not granted:
        grant_create(
            tenant=Tenant.objects.get(pk=delegation.tenant_id),
            service_account=ServiceAccount.objects.get(pk=delegation.service_account_id),
            connections=[connection],
            created_by=user,
        )
    kept = Connection.objects.filter(
        tenant_id=delegation.tenant_id,
        pk__in=[pk for pk in map(uuid_or_none, delegation.connection_ids) if pk is not None],
        revoked_at__isnull=True,
    ).filter(Q(owner__isnull=True) | Q(owner_id=user.pk))
    wanted = [str(pk) for pk in kept.values_list("pk", flat=True)] + [str(connection.pk)]
    return delegation_connections_set(delegation=delegation, connection_ids=wanted)


@transaction.atomic
def connection_create_for_call(
    *,
    delegation: Delegation,
    user: AbstractBaseUser,
    provider: str,
    credential_type: str,
    credentials: Mapping[str, Any],
    label: str = "",
    scopes: Iterable[str] = (),
    expires_at: datetime | None = None,
) -> Connection:
    """A personal connection typed on a call's connect page, granted and declared for that call's client at once."""
    connection = connection_create(
        tenant=Tenant.objects.get(pk=delegation.tenant_id),
        provider=provider,
        credential_type=credential_type,
        credentials=credentials,
        scopes=scopes,
        expires_at=expires_at,
        label=label,
        created_by=user,
        owner=user,
    )
    connection_declare_for_call(delegation=delegation, connection=connection, user=user)
    return connection


@transaction.atomic
def delegation_create_declaring(
    *,
    tenant: Tenant,
    user: AbstractBaseUser,
    service_account: ServiceAccount,
    tools: Iterable[str],
    expires_at: datetime | None,
    connection_ids: Iterable[object],
) -> tuple[Delegation, str | None]:
    """The new-delegation form's answer: the delegation (its token shown once) and the connections it may use."""
    delegation, token = delegation_create(
        tenant=tenant, user=user, service_account=service_account, tools=tools, expires_at=expires_at
    )
    wanted = list(connection_ids)
    if wanted:
        delegation_connections_set(delegation=delegation, connection_ids=wanted)
    return delegation, token


@transaction.atomic
def consent_approve_declaring(
    *,
    user: AbstractBaseUser,
    service_account: ServiceAccount,
    redirect_uri: str,
    code_challenge: str,
    tools: Iterable[str],
    expires_at: datetime | None,
    connection_ids: Iterable[object],
) -> str:
    """The consent redirect's approval (a delegation and its one-time code) with the connections it may use."""
    code = consent_approve(
        user=user,
        service_account=service_account,
        redirect_uri=redirect_uri,
        code_challenge=code_challenge,
        tools=tools,
        expires_at=expires_at,
    )
    wanted = list(connection_ids)
    if wanted:
        delegation = Delegation.objects.get(user=user, service_account=service_account, revoked_at__isnull=True)
        delegation_connections_set(delegation=delegation, connection_ids=wanted)
    return code
