"""The one OAuth refresh function, used by the Celery task and by the broker.

Exactly once: the refresh runs inside a transaction holding the connection's
row lock (`SELECT ... FOR UPDATE`; on SQLite the IMMEDIATE transaction takes
the database's write lock), re-reads the row under the lock and returns at
once when another process already refreshed it. The token endpoint is called
with the refresh token read under that lock, and the rotated tokens are written
before the lock is released, so no refresh token is ever presented twice.

Outcomes are recorded as ConnectionEvents (the audit trail) and counted for
`/metrics` (`toolgate_oauth_refresh_total`) once their transaction commits:
- `invalid_grant`: re-read first (a sibling holding a newer token means we lost
  a race we should not have had), otherwise `needs_reauth`;
- any other failure (timeouts, network errors, 5xx, another refusal, a secret
  that will not open) is counted in `refresh_failures` and pushes
  `next_refresh_at` out exponentially, with jitter and a cap
  (`refresh_backoff`); the row stays `active` (its token may still be valid)
  until TOOLGATE_REFRESH_MAX_FAILURES failures in a row, then it becomes
  `needs_attention` and the sweep stops queuing it. A call that meets its
  expired token still tries a refresh, and a success resets everything;
- a revoked row is never refreshed, and no write here can un-revoke it: every
  UPDATE is filtered on `revoked_at IS NULL`.
"""

from __future__ import annotations

import enum
import logging
import random
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, OperationalError, transaction
from django.db import connection as db_connection
from django.utils import timezone

from connections_app.metrics import refresh_counted
from connections_app.models import Connection, ConnectionEvent, OAuthProvider
from connections_app.oauth import TokenRequestFailed, oauth_client, token_credentials, token_expiry, token_request
from connections_app.services import (
    connection_children_stop_on_commit,
    connection_credentials_open,
    connection_event_record,
    seal_credentials_into,
)
from core.crypto import CredentialError
from policies_app.signals import row_changed
from policies_app.tracing import tracer

logger = logging.getLogger(__name__)
MIN_HTTP_TIMEOUT_S = 0.05  # below this, a token request cannot succeed: do not start one
TRANSIENT_ERRORS = frozenset({"timeout", "network", "server_error"})


class RefreshOutcome(enum.StrEnum):
    REFRESHED = "refreshed"
    ALREADY_FRESH = "already_fresh"  # another process refreshed it first
    BUSY = "busy"  # another process holds the row now (skip) or the bounded wait ran out
    NOT_REFRESHABLE = "not_refreshable"  # revoked, not OAuth, no refresh token, needs re-authorisation
    NEEDS_REAUTH = "needs_reauth"  # the provider refused the refresh token
    TRANSIENT_FAILURE = "transient_failure"  # timeout, network, 5xx: may be retried
    FAILED = "failed"  # the provider refused otherwise (invalid_client, ...) or the secret won't open


@dataclass(frozen=True, slots=True)
class RefreshResult:
    outcome: RefreshOutcome
    connection: Connection | None = None
    error: str = ""  # a safe code: invalid_grant, timeout, server_error, ...


def connection_refresh(
    *,
    connection_id: str,
    fresh_for: timedelta,
    refresh_window: timedelta,
    http_timeout_s: float,
    lock_wait_ms: int | None = None,
    deadline: float | None = None,
) -> RefreshResult:
    """Refresh the connection's tokens unless they stay valid for `fresh_for` already.

    `lock_wait_ms=None` skips a row another process holds (background refresh:
    that process is doing the work); a number waits at most that long (the
    broker: it needs the token and will use the sibling's fresh one).
    `deadline` (time.monotonic()) bounds lock wait and token request together.
    """
    with tracer.start_as_current_span("oauth.refresh", attributes={"toolgate.connection_id": connection_id}):
        return _refresh(connection_id, fresh_for, refresh_window, http_timeout_s, lock_wait_ms, deadline)


def _refresh(  # noqa: PLR0917 - the public function's arguments, passed on
    connection_id: str,
    fresh_for: timedelta,
    refresh_window: timedelta,
    http_timeout_s: float,
    lock_wait_ms: int | None,
    deadline: float | None,
) -> RefreshResult:
    try:
        with transaction.atomic():
            row = _lock(connection_id, lock_wait_ms)
            if row is None:
                return RefreshResult(RefreshOutcome.BUSY)
            if deadline is not None:
                http_timeout_s = min(http_timeout_s, deadline - time.monotonic())
                if http_timeout_s < MIN_HTTP_TIMEOUT_S:
                    return RefreshResult(RefreshOutcome.BUSY, row, "timeout")
            return _refresh_locked(row, fresh_for=fresh_for, refresh_window=refresh_window, timeout_s=http_timeout_s)
    except OperationalError:  # lock_timeout ran out, or SQLite stayed busy
        return RefreshResult(RefreshOutcome.BUSY, error="lock_timeout")


def _lock(connection_id: str, lock_wait_ms: int | None) -> Connection | None:
    rows = Connection.objects.filter(pk=connection_id)
    if lock_wait_ms is None:
        return rows.select_for_update(skip_locked=True).first()
    if db_connection.vendor == "postgresql":
        with db_connection.cursor() as cursor:
            cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{max(1, lock_wait_ms)}ms"])
    return rows.select_for_update().first()


def _refresh_locked(
    row: Connection, *, fresh_for: timedelta, refresh_window: timedelta, timeout_s: float
) -> RefreshResult:
    now = timezone.now()
    if row.revoked_at is not None or row.credential_type != Connection.CredentialType.OAUTH2:
        return RefreshResult(RefreshOutcome.NOT_REFRESHABLE, row)
    if row.status == Connection.Status.NEEDS_REAUTH:
        return RefreshResult(RefreshOutcome.NOT_REFRESHABLE, row, "needs_reauth")
    if row.expires_at is None or row.expires_at > now + fresh_for:
        return RefreshResult(RefreshOutcome.ALREADY_FRESH, row)
    provider = OAuthProvider.objects.filter(name=row.provider).first()
    try:
        credentials = connection_credentials_open(row)
    except CredentialError as exc:
        logger.error("connection %s: credentials cannot be decrypted: %s", row.pk, exc)
        return _fail(row, "undecryptable", now=now, terminal=False)
    refresh_token = credentials.get("refresh_token")
    if provider is None or not refresh_token:
        return _fail(row, "no_refresh_token" if provider else "no_provider", now=now, terminal=True)
    try:
        with oauth_client(provider, timeout_s=timeout_s) as client:
            token = token_request(lambda: client.refresh_token(provider.token_url, refresh_token=refresh_token))
    except CredentialError as exc:
        logger.error("OAuth provider %s: client secret cannot be decrypted: %s", provider.name, exc)
        return _fail(row, "client_secret_undecryptable", now=now, terminal=False)
    except TokenRequestFailed as exc:
        if exc.transient:
            return _fail(row, exc.error, now=now, terminal=False)
        if exc.error == "invalid_grant" and _sibling_won(row):
            return RefreshResult(RefreshOutcome.ALREADY_FRESH, _reload(row))
        return _fail(row, exc.error, now=now, terminal=exc.error == "invalid_grant")
    return _store(row, token, previous_refresh_token=refresh_token, now=now, refresh_window=refresh_window)


def _store(
    row: Connection, token: dict, *, previous_refresh_token: str, now: datetime, refresh_window: timedelta
) -> RefreshResult:
    expires_at = token_expiry(token, now=now)
    seal_credentials_into(row, token_credentials(token, previous_refresh_token=previous_refresh_token))
    updated = Connection.objects.filter(pk=row.pk, revoked_at__isnull=True).update(
        encrypted_credentials=row.encrypted_credentials,
        encryption_key_id=row.encryption_key_id,
        expires_at=expires_at,
        next_refresh_at=(expires_at - refresh_window) if expires_at else None,
        refreshed_at=now,
        refresh_failures=0,
        last_refresh_error="",
        status=Connection.Status.ACTIVE,
        updated_at=now,
    )
    if not updated:  # revoked meanwhile (impossible under the lock; kept as the no-un-revoke guarantee)
        return RefreshResult(RefreshOutcome.NOT_REFRESHABLE, _reload(row))
    row_changed(row)  # every process's broker drops the row it cached with the old token
    connection_event_record(row, ConnectionEvent.Kind.REFRESHED)
    _count_on_commit(row.provider, "success")
    return RefreshResult(RefreshOutcome.REFRESHED, _reload(row))


def refresh_backoff(failures: int) -> timedelta:
    """How long to wait after the `failures`-th failure in a row: BASE * 2**(failures - 1), capped at MAX.

    "Equal jitter": a random half of it is spread, so connections that failed
    together (a provider outage) do not come back together, and below the cap
    each wait is still at least as long as the whole previous one: the retry
    times grow until they reach the cap.
    """
    base = settings.TOOLGATE_REFRESH_BACKOFF_BASE_SECONDS
    ceiling = settings.TOOLGATE_REFRESH_BACKOFF_MAX_SECONDS
    delay = min(ceiling, base * 2 ** min(max(failures, 1) - 1, 32))
    return timedelta(seconds=delay / 2 + random.uniform(0, delay / 2))  # noqa: S311 - spreading load


def _fail(row: Connection, error: str, *, now: datetime, terminal: bool) -> RefreshResult:
    """Record a failed refresh on the locked row: reauthorisation, attention, or the next try after a backoff."""
    failures = row.refresh_failures + 1  # the row is locked: this is the current count
    changes: dict[str, object] = {"refresh_failures": failures, "last_refresh_error": error[:200], "updated_at": now}
    gives_up = not terminal and failures >= settings.TOOLGATE_REFRESH_MAX_FAILURES
    if terminal:
        changes |= {"status": Connection.Status.NEEDS_REAUTH, "next_refresh_at": None}
        kind, counted = ConnectionEvent.Kind.NEEDS_REAUTH, "needs_reauth"
    elif gives_up:
        changes |= {"status": Connection.Status.NEEDS_ATTENTION, "next_refresh_at": None}
        kind, counted = ConnectionEvent.Kind.REFRESH_FAILED, error
    else:
        changes["next_refresh_at"] = now + refresh_backoff(failures)
        kind, counted = ConnectionEvent.Kind.REFRESH_FAILED, error
    Connection.objects.filter(pk=row.pk, revoked_at__isnull=True).update(**changes)
    if changes.get("status", row.status) != row.status:
        row_changed(row)  # the broker reads the status: every process drops the row it cached
    if terminal and row.status != Connection.Status.NEEDS_REAUTH:
        connection_children_stop_on_commit(connection_id=row.pk)  # the broker refuses it now; its child ends
    connection_event_record(row, kind, detail=error)
    _count_on_commit(row.provider, counted)
    if gives_up and row.status != Connection.Status.NEEDS_ATTENTION:
        detail = f"{failures} refresh failures in a row, the last: {error}"
        connection_event_record(row, ConnectionEvent.Kind.NEEDS_ATTENTION, detail=detail[:200])
        _count_on_commit(row.provider, "needs_attention")
    outcome = RefreshOutcome.NEEDS_REAUTH if terminal else RefreshOutcome.TRANSIENT_FAILURE
    if not terminal and error not in TRANSIENT_ERRORS:
        outcome = RefreshOutcome.FAILED
    return RefreshResult(outcome, _reload(row), error)


def _count_on_commit(provider: str, outcome: str) -> None:
    transaction.on_commit(lambda: refresh_counted(provider=provider, outcome=outcome))


def _sibling_won(row: Connection) -> bool:
    """Did another writer store new credentials since we read the row?"""
    try:
        current = Connection.objects.values_list("encrypted_credentials", flat=True).get(pk=row.pk)
    except (Connection.DoesNotExist, DatabaseError):
        return False
    return bytes(current) != bytes(row.encrypted_credentials)


def _reload(row: Connection) -> Connection:
    row.refresh_from_db()
    return row
