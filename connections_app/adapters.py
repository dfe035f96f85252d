"""connections_app's side of the runner's ports: the grant store and the credential broker."""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta
from typing import NoReturn

from django.conf import settings
from django.utils import timezone

from connections_app.credentials import capability_for
from connections_app.models import Connection
from connections_app.refresh import RefreshOutcome, connection_refresh
from connections_app.selectors import GrantRow, UsableConnection, connection_for_use, grant_for_gate, grants_for_caller
from connections_app.services import connection_credentials_open, connection_touch, connection_use_denied
from core.crypto import CredentialError
from core.outages import outage_guard
from policies_app.governance import governance_cache
from policies_app.selectors import subject_id_of
from runner.capabilities import AuthCapability
from runner.errors import BrokerError
from runner.ports import GrantView
from runner.types import ErrorCode, ToolInvocationContext, ToolSpec

logger = logging.getLogger(__name__)

# "No such connection" and "another tenant's" answer alike: ids must not be probeable.
NOT_AVAILABLE = "connection is not available"
UNREADABLE = "the connection's credentials cannot be read; an operator has been alerted"
EXPIRED = "the connection's credential has expired; the tenant must store a new one and grant it again"
REFRESH_FAILED = "the connection's token has expired and could not be refreshed in time"
# A token this close to expiry could die on its way to the provider: refresh it first.
SYNC_REFRESH_SKEW = timedelta(seconds=30)


class DatabaseConnectionBroker:
    """Turns a granted connection id into an AuthCapability, or refuses with a typed error.

    Runs after the grant gate (pipeline stage 6), so a refusal here is defence
    in depth: the connection must still be the caller's tenant's, for the
    tool's provider, not revoked, not awaiting re-authorisation, not expired.
    The row comes from this process's governance cache (connection_for_use):
    every write that changes what is checked here bumps the generation, so a
    revocation or a refresh elsewhere applies from the next call on.
    An OAuth token that has expired is refreshed here, synchronously and within
    TOOLGATE_SYNC_REFRESH_TIMEOUT_MS, through the same function as the
    background refresher (so 20 calls at once still refresh once).
    Refusals are audited as ConnectionEvents. An envelope that does not open
    (missing key, tampering) is an operator problem: it is logged without any
    secret, the caller gets `connection_unavailable`, and the row is left as it
    is, because a restored key makes it usable again.
    """

    @outage_guard
    def resolve(self, ctx: ToolInvocationContext, spec: ToolSpec) -> AuthCapability:
        connection = connection_for_use(connection_id=ctx.connection_id or "")
        now = timezone.now()
        if connection is None:
            _deny(ctx, spec, ErrorCode.CONNECTION_UNAVAILABLE, NOT_AVAILABLE)
        refusal = _refusal(connection, ctx, spec, now)
        if refusal is not None:
            _deny(ctx, spec, *refusal)
        if _needs_sync_refresh(connection, now):
            connection = _refresh_now(ctx, spec, connection)
        try:
            credentials = connection_credentials_open(connection)
        except CredentialError as exc:
            logger.error("connection %s: credentials cannot be decrypted: %s", connection.pk, exc)
            _deny(ctx, spec, ErrorCode.CONNECTION_UNAVAILABLE, UNREADABLE)
        connection_touch(connection=connection, now=now)
        return capability_for(connection.credential_type, credentials)


def _deny(ctx: ToolInvocationContext, spec: ToolSpec, code: ErrorCode, reason: str) -> NoReturn:
    connection_use_denied(
        tenant_id=ctx.tenant_id,
        connection_id=ctx.connection_id or "",
        service_account_id=ctx.actor_id,
        tool_id=spec.name,
        reason=reason,
    )
    raise BrokerError(code, reason)


def _refusal(
    connection: Connection | UsableConnection, ctx: ToolInvocationContext, spec: ToolSpec, now: datetime
) -> tuple[ErrorCode, str] | None:
    if str(connection.tenant_id) != ctx.tenant_id:
        return ErrorCode.CONNECTION_UNAVAILABLE, NOT_AVAILABLE
    if connection.revoked_at is not None:
        return ErrorCode.CONNECTION_UNAVAILABLE, "connection has been revoked"
    if connection.owner_id is not None and subject_id_of(connection.owner_id) != ctx.subject_id:
        return ErrorCode.CONNECTION_UNAVAILABLE, NOT_AVAILABLE  # the gate refuses this first; defence in depth
    if connection.provider != spec.provider:
        return (
            ErrorCode.CONNECTION_UNAVAILABLE,
            f"connection is for {connection.provider}, the tool needs {spec.provider}",
        )
    if connection.status == Connection.Status.NEEDS_REAUTH:
        return ErrorCode.CONNECTION_UNAVAILABLE, "connection needs re-authorisation by the tenant"
    if (
        connection.credential_type != Connection.CredentialType.OAUTH2
        and connection.expires_at is not None
        and connection.expires_at <= now
    ):
        return ErrorCode.CONNECTION_UNAVAILABLE, EXPIRED
    return None


def _needs_sync_refresh(connection: Connection | UsableConnection, now: datetime) -> bool:
    """Only a token that is expired (or about to be, within the skew) is refreshed during a call;
    everything earlier is the background refresher's job."""
    return (
        connection.credential_type == Connection.CredentialType.OAUTH2
        and connection.expires_at is not None
        and connection.expires_at <= now + SYNC_REFRESH_SKEW
    )


def _refresh_now(ctx: ToolInvocationContext, spec: ToolSpec, connection: UsableConnection) -> Connection:
    """Refresh through the one refresh function, bounded by TOOLGATE_SYNC_REFRESH_TIMEOUT_MS in all."""
    bound_ms = settings.TOOLGATE_SYNC_REFRESH_TIMEOUT_MS
    result = connection_refresh(
        connection_id=str(connection.pk),
        fresh_for=SYNC_REFRESH_SKEW,
        refresh_window=timedelta(seconds=settings.TOOLGATE_REFRESH_WINDOW_SECONDS),
        http_timeout_s=bound_ms / 1000,
        lock_wait_ms=bound_ms,
        deadline=time.monotonic() + bound_ms / 1000,
    )
    if result.outcome in (RefreshOutcome.REFRESHED, RefreshOutcome.ALREADY_FRESH) and result.connection:
        return result.connection
    current = result.connection or connection
    if current.revoked_at is not None:
        _deny(ctx, spec, ErrorCode.CONNECTION_UNAVAILABLE, "connection has been revoked")
    if current.status == Connection.Status.NEEDS_REAUTH:
        _deny(ctx, spec, ErrorCode.CONNECTION_UNAVAILABLE, "connection needs re-authorisation by the tenant")
    _deny(ctx, spec, ErrorCode.AUTH_REFRESH_FAILED, REFRESH_FAILED)


class DatabaseGrantStore:
    """The connection gate's grants, as views kept beside the rows they come from.

    A view is built once per grant id and kept in the governance cache with
    the grant rows, so it is dropped whenever they are (any write that changes
    a grant bumps the generation): a revocation still refuses the next call.
    Unknown ids are not remembered.
    """

    @outage_guard
    def get(self, grant_id: str) -> GrantView | None:
        return governance_cache.get(
            ("grant view", grant_id.lower()), lambda: _grant_view(grant_id), remember_missing=False
        )

    @outage_guard
    def for_caller(self, tenant_id: str, actor_id: str) -> list[GrantView]:
        return governance_cache.get(
            ("grant views of", actor_id.lower()),
            lambda: [_view_of(row, row.grant_id) for row in grants_for_caller(service_account_id=actor_id)],
        )


def _grant_view(grant_id: str) -> GrantView | None:
    grant = grant_for_gate(grant_id=grant_id)
    if grant is None:
        return None
    return _view_of(grant, grant_id.lower())


def _view_of(grant: GrantRow, grant_id: str) -> GrantView:
    return GrantView(
        grant_id=grant_id,
        tenant_id=str(grant.tenant_id),
        actor_id=str(grant.service_account_id),
        connection_ids=grant.connection_ids,
        expires_at=grant.expires_at,
        revoked=grant.revoked_at is not None,
        personal={connection_id: subject_id_of(user_id) for connection_id, user_id in grant.owners.items()},
        providers=grant.providers,
    )
