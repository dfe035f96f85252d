"""The one refresh function against a fake OAuth provider on a real loopback socket."""

from __future__ import annotations

import itertools
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from django.db import connection as db_connection
from django.utils import timezone

from connections_app.models import Connection, ConnectionEvent, OAuthProvider
from connections_app.oauth import oauth_connection_store, oauth_provider_set_secret
from connections_app.refresh import RefreshOutcome, RefreshResult, connection_refresh, refresh_backoff
from connections_app.scheduling import refresh_sweep_once
from connections_app.services import connection_credentials_open, connection_revoke
from gateway.host.serve import host_config
from gateway.host.spec import ServerConfig, encode_spec
from tests.factories import TenantFactory
from tests.support.fake_oauth import CLIENT_ID, CLIENT_SECRET, FakeOAuthProvider
from tests.support.mcp_host import McpHostThread
from tests.support.metrics import sample

WINDOW = timedelta(minutes=10)
STDIO_SERVER = Path(__file__).resolve().parents[1] / "support" / "stdio_server.py"


@pytest.fixture
def provider():
    with FakeOAuthProvider() as fake:
        yield fake


@pytest.fixture
def oauth_row(provider):
    provider.register(scopes=("repo",))


def _connection(provider, *, expires_in_s: int = 60) -> Connection:
    access, refresh = provider.issue_tokens()
    return oauth_connection_store(
        tenant=TenantFactory(slug="acme"),
        provider=OAuthProvider.objects.get(name="github"),
        token={"access_token": access, "refresh_token": refresh, "expires_in": expires_in_s, "token_type": "Bearer"},
        now=timezone.now(),
        refresh_window=WINDOW,
        created_by=None,
    )


def _refresh(connection: Connection, **overrides):
    arguments = {"fresh_for": WINDOW, "refresh_window": WINDOW, "http_timeout_s": 5.0, **overrides}
    return connection_refresh(connection_id=str(connection.pk), **arguments)


def _events(connection: Connection) -> list[tuple[str, str]]:
    return list(
        ConnectionEvent.objects.filter(connection_id=connection.pk).order_by("id").values_list("kind", "detail")
    )


@pytest.mark.django_db
def test_refresh_stores_the_rotated_tokens_and_reschedules(provider, oauth_row):
    # given a connection expiring within the window
    connection = _connection(provider)
    old = connection_credentials_open(connection)

    # when
    result = _refresh(connection)

    # then one token call with the stored refresh token, and the new pair stored encrypted
    assert result.outcome is RefreshOutcome.REFRESHED
    assert provider.refresh_calls == [old["refresh_token"]]
    new = connection_credentials_open(result.connection)
    assert new["access_token"] != old["access_token"]
    assert new["refresh_token"] != old["refresh_token"]
    assert provider.is_live_access_token(new["access_token"])
    assert result.connection.expires_at > timezone.now() + timedelta(minutes=59)
    assert result.connection.next_refresh_at == result.connection.expires_at - WINDOW
    assert result.connection.refreshed_at is not None
    assert _events(connection) == [("created", "connected via OAuth"), ("refreshed", "")]


@pytest.mark.django_db
def test_a_fresh_connection_is_not_refreshed_again(provider, oauth_row):
    connection = _connection(provider)
    _refresh(connection)

    again = _refresh(connection)

    assert again.outcome is RefreshOutcome.ALREADY_FRESH
    assert len(provider.refresh_calls) == 1


@pytest.mark.django_db
def test_the_old_refresh_token_is_kept_when_the_provider_returns_none(provider, oauth_row):
    provider.rotate_refresh_tokens = False
    connection = _connection(provider)
    old = connection_credentials_open(connection)

    result = _refresh(connection)

    assert result.outcome is RefreshOutcome.REFRESHED
    assert connection_credentials_open(result.connection)["refresh_token"] == old["refresh_token"]


@pytest.mark.django_db
def test_invalid_grant_marks_the_connection_for_reauthorisation(provider, oauth_row):
    provider.refuse_refresh = True
    connection = _connection(provider)

    result = _refresh(connection)

    assert result.outcome is RefreshOutcome.NEEDS_REAUTH
    assert result.error == "invalid_grant"
    connection.refresh_from_db()
    assert connection.status == Connection.Status.NEEDS_REAUTH
    assert connection.next_refresh_at is None
    assert connection.last_refresh_error == "invalid_grant"
    assert _events(connection)[-1] == ("needs_reauth", "invalid_grant")
    # and it is not tried again
    assert _refresh(connection).outcome is RefreshOutcome.NOT_REFRESHABLE
    assert len(provider.refresh_calls) == 1


@pytest.mark.django_db
def test_a_provider_500_is_transient_and_keeps_the_connection_active(provider, oauth_row):
    provider.fail_status = 500
    connection = _connection(provider)
    before = bytes(connection.encrypted_credentials)

    result = _refresh(connection)

    assert result.outcome is RefreshOutcome.TRANSIENT_FAILURE
    assert result.error == "server_error"
    connection.refresh_from_db()
    assert connection.status == Connection.Status.ACTIVE
    assert connection.refresh_failures == 1
    assert bytes(connection.encrypted_credentials) == before
    assert _events(connection)[-1] == ("refresh_failed", "server_error")


@pytest.mark.django_db
def test_a_slow_provider_is_bounded_by_the_http_timeout(provider, oauth_row):
    provider.delay_s = 2.0
    connection = _connection(provider)

    started = time.monotonic()
    result = _refresh(connection, http_timeout_s=0.3)
    elapsed = time.monotonic() - started

    assert result.outcome is RefreshOutcome.TRANSIENT_FAILURE
    assert result.error == "timeout"
    assert elapsed < 1.5
    connection.refresh_from_db()
    assert connection.status == Connection.Status.ACTIVE


@pytest.mark.django_db
def test_a_revoked_connection_is_never_refreshed(provider, oauth_row):
    connection = _connection(provider)
    connection_revoke(connection=connection)

    result = _refresh(connection)

    assert result.outcome is RefreshOutcome.NOT_REFRESHABLE
    assert provider.refresh_calls == []
    connection.refresh_from_db()
    assert connection.status == Connection.Status.REVOKED


@pytest.mark.django_db
def test_reuse_of_a_spent_refresh_token_revokes_the_family_at_the_fake_provider(provider, oauth_row):
    """The fake provider behaves like a strict one: a replayed refresh token is theft."""
    connection = _connection(provider)
    spent = connection_credentials_open(connection)["refresh_token"]
    _refresh(connection)

    with httpx.Client() as client:
        replay = client.post(
            provider.token_url,
            data={"grant_type": "refresh_token", "refresh_token": spent},
            auth=(CLIENT_ID, CLIENT_SECRET),
        )

    assert replay.status_code == 400
    assert replay.json()["error"] == "invalid_grant"
    assert provider.revoked_families == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_refreshers_call_the_token_endpoint_once(provider, oauth_row, postgres_required):
    """Row lock + re-read: whoever comes second finds the work done; no refresh token is used twice."""
    provider.delay_s = 0.3  # keep the first refresher inside its lock while the others arrive
    connection = _connection(provider)
    outcomes: list[RefreshOutcome] = []
    lock = threading.Lock()

    def refresher() -> None:
        try:
            outcome = _refresh(connection, lock_wait_ms=5_000).outcome
        finally:
            db_connection.close()
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=refresher) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert sorted(outcomes) == sorted([RefreshOutcome.REFRESHED] + [RefreshOutcome.ALREADY_FRESH] * 7)
    assert len(provider.refresh_calls) == 1
    assert provider.revoked_families == 0


@pytest.mark.django_db(transaction=True)
def test_a_revoke_during_a_refresh_wins_and_stays(provider, oauth_row, postgres_required):
    """The revoke waits for the refresher's row lock, then applies: a refresh never un-revokes."""
    provider.delay_s = 0.5
    connection = _connection(provider)
    results = []

    def refresher() -> None:
        try:
            results.append(_refresh(connection))
        finally:
            db_connection.close()

    thread = threading.Thread(target=refresher)
    thread.start()
    time.sleep(0.2)  # the refresher holds the lock and waits on the provider
    connection_revoke(connection=connection)
    thread.join(timeout=30)

    connection.refresh_from_db()
    assert results[0].outcome is RefreshOutcome.REFRESHED
    assert connection.status == Connection.Status.REVOKED
    assert connection.revoked_at is not None
    assert connection.next_refresh_at is None


# --- backoff of a connection whose refreshes keep failing --------------------------------------


def _fail_once(connection: Connection) -> tuple[RefreshResult, timedelta | None]:
    """One failed refresh, and how far out it put the next one."""
    before = timezone.now()
    Connection.objects.filter(pk=connection.pk).update(next_refresh_at=before)  # the sweep found it due
    result = _refresh(connection)
    connection.refresh_from_db()
    return result, (connection.next_refresh_at - before) if connection.next_refresh_at else None


@pytest.mark.django_db
def test_failed_refreshes_back_off_exponentially_with_jitter_up_to_the_cap(provider, oauth_row, settings):
    # given a provider answering 500, a 60 s base, a 600 s cap and up to 8 failures
    settings.TOOLGATE_REFRESH_BACKOFF_BASE_SECONDS = 60
    settings.TOOLGATE_REFRESH_BACKOFF_MAX_SECONDS = 600
    settings.TOOLGATE_REFRESH_MAX_FAILURES = 8
    provider.fail_status = 500
    connection = _connection(provider)

    # when it fails seven times in a row
    waits = [_fail_once(connection)[1] for _ in range(7)]

    # then each wait lies within [delay/2, delay] for delay = 60 * 2**(n-1), capped at 600 s
    delays = [60, 120, 240, 480, 600, 600, 600]
    for wait, delay in zip(waits, delays, strict=True):
        assert timedelta(seconds=delay / 2 - 1) <= wait <= timedelta(seconds=delay + 1), (wait, delay)
    # and the retry times grow until the cap: each wait is at least the whole previous one
    # (at the cap a wait may fall short of the one before: 600 s jittered is 300-600 s)
    growing = waits[:4]  # 60, 120, 240, 480: below the cap each delay doubles
    assert all(later >= earlier - timedelta(seconds=1) for earlier, later in itertools.pairwise(growing))
    assert (connection.status, connection.refresh_failures) == (Connection.Status.ACTIVE, 7)
    assert _events(connection)[1:] == [("refresh_failed", "server_error")] * 7


@pytest.mark.django_db
def test_the_backoff_jitter_spreads_connections_that_failed_together(settings):
    settings.TOOLGATE_REFRESH_BACKOFF_BASE_SECONDS = 60
    settings.TOOLGATE_REFRESH_BACKOFF_MAX_SECONDS = 3600

    waits = {refresh_backoff(3).total_seconds() for _ in range(50)}

    assert len(waits) > 40
    assert min(waits) >= 120
    assert max(waits) <= 240


@pytest.mark.django_db
def test_after_the_configured_failures_the_connection_needs_attention_and_is_swept_no_more(
    provider, oauth_row, settings, django_capture_on_commit_callbacks
):
    # given a limit of three failures
    settings.TOOLGATE_REFRESH_MAX_FAILURES = 3
    provider.fail_status = 503
    connection = _connection(provider)
    before = sample("toolgate_oauth_refresh_total", provider="github", outcome="needs_attention")

    # when it fails three times
    with django_capture_on_commit_callbacks(execute=True):
        outcomes = [_fail_once(connection)[0].outcome for _ in range(3)]

    # then the third failure gives up: needs_attention, nothing scheduled, the events and the metric say so
    assert outcomes == [RefreshOutcome.TRANSIENT_FAILURE] * 3
    assert connection.status == Connection.Status.NEEDS_ATTENTION
    assert (connection.refresh_failures, connection.last_refresh_error) == (3, "server_error")
    assert connection.next_refresh_at is None
    assert connection.last_refresh_error_category == "provider error"
    assert _events(connection)[1:] == [
        ("refresh_failed", "server_error"),
        ("refresh_failed", "server_error"),
        ("refresh_failed", "server_error"),
        ("needs_attention", "3 refresh failures in a row, the last: server_error"),
    ]
    assert sample("toolgate_oauth_refresh_total", provider="github", outcome="needs_attention") == before + 1
    # and a sweep does not queue it, even when its row says it is due
    Connection.objects.filter(pk=connection.pk).update(next_refresh_at=timezone.now() - timedelta(minutes=1))
    sent: list[tuple[str, float]] = []
    with django_capture_on_commit_callbacks(execute=True):
        assert refresh_sweep_once(enqueue=sent.extend) == 0
    assert sent == []
    # and the broker still uses it: needs_attention is not needs_reauth
    assert connection.status_now == "needs_attention"


@pytest.mark.django_db
def test_a_success_after_failures_resets_the_count_and_makes_it_active_again(provider, oauth_row, settings):
    settings.TOOLGATE_REFRESH_MAX_FAILURES = 2
    provider.fail_status = 500
    connection = _connection(provider)
    _fail_once(connection)
    _fail_once(connection)
    assert connection.status == Connection.Status.NEEDS_ATTENTION

    # when the provider is back and a refresh runs (a call meeting the expired token, or a resumed sweep)
    provider.fail_status = None
    result = _refresh(connection)

    # then
    assert result.outcome is RefreshOutcome.REFRESHED
    connection.refresh_from_db()
    assert (connection.status, connection.refresh_failures, connection.last_refresh_error) == ("active", 0, "")
    assert connection.next_refresh_at == connection.expires_at - WINDOW
    assert _events(connection)[-1] == ("refreshed", "")


@pytest.mark.django_db
def test_a_refusal_other_than_invalid_grant_backs_off_too(provider, oauth_row, settings):
    """`invalid_client` (here: the provider no longer knows our client secret) is not transient: it used to
    be queued again every few minutes forever; now it backs off like any failure and ends in needs_attention."""
    settings.TOOLGATE_REFRESH_MAX_FAILURES = 2
    connection = _connection(provider)
    registered = OAuthProvider.objects.get(name="github")
    oauth_provider_set_secret(provider=registered, client_secret="not-the-secret")
    registered.save()

    first, wait = _fail_once(connection)
    second, _ = _fail_once(connection)

    assert (first.outcome, first.error) == (RefreshOutcome.FAILED, "invalid_client")
    assert wait is not None
    assert wait >= timedelta(seconds=settings.TOOLGATE_REFRESH_BACKOFF_BASE_SECONDS / 2 - 1)
    assert second.outcome is RefreshOutcome.FAILED
    assert connection.status == Connection.Status.NEEDS_ATTENTION
    assert connection.last_refresh_error_category == "refused by the provider"


@pytest.mark.django_db
def test_an_invalid_grant_still_goes_straight_to_needs_reauth_whatever_the_count(provider, oauth_row, settings):
    settings.TOOLGATE_REFRESH_MAX_FAILURES = 5
    provider.refuse_refresh = True
    connection = _connection(provider)

    result, wait = _fail_once(connection)

    assert result.outcome is RefreshOutcome.NEEDS_REAUTH
    assert (connection.status, connection.refresh_failures, wait) == (Connection.Status.NEEDS_REAUTH, 1, None)


@pytest.fixture
def mcp_host(tmp_path, settings):
    with McpHostThread(host_config(sandbox="none", root=tmp_path / "mcp_host", sweep_s=0.2)) as running:
        settings.TOOLGATE_MCP_HOST_URL, settings.TOOLGATE_MCP_HOST_TOKEN = running.url, running.token
        yield running


def _child_of(host: McpHostThread, connection: Connection) -> None:
    """A stdio child serving `connection`, started on the host as the worker starts one."""
    spec = ServerConfig(
        slug="gh",
        command=(sys.executable, str(STDIO_SERVER)),
        env=(),
        secrets=(),
        provider="github",
        credential_env="GITHUB_TOKEN",
    )
    headers = {
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {host.token}",
        "X-Toolgate-Spec": encode_spec(spec),
        "X-Toolgate-Connection": str(connection.pk),
        "X-Toolgate-Credential": "gho_0123456789abcdef0123",
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    assert httpx.post(f"{host.url}/servers/gh/mcp", json=body, headers=headers, timeout=30).status_code == 200
    assert [child.spec.connection_id for child in host.children()] == [str(connection.pk)]


@pytest.mark.django_db
def test_a_connection_needing_reauthorisation_has_its_stdio_child_stopped_after_the_commit(
    provider, oauth_row, mcp_host, django_capture_on_commit_callbacks
):
    connection = _connection(provider)
    _child_of(mcp_host, connection)

    provider.fail_status = 500  # a transient failure: the connection stays usable, and so does its child
    with django_capture_on_commit_callbacks(execute=True):
        assert _refresh(connection).outcome is RefreshOutcome.TRANSIENT_FAILURE
    assert len(mcp_host.children()) == 1

    provider.fail_status, provider.refuse_refresh = None, True
    Connection.objects.filter(pk=connection.pk).update(next_refresh_at=timezone.now())
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        assert _refresh(connection).outcome is RefreshOutcome.NEEDS_REAUTH
        assert len(mcp_host.children()) == 1  # not before the commit
    assert len(callbacks) >= 1
    mcp_host.wait_for(lambda: mcp_host.children() == [], timeout_s=1.0)
