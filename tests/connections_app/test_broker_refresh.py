"""The broker's synchronous refresh: an expired OAuth token is refreshed during the call, bounded.

Real parts: the REST exec endpoint, a fake OAuth provider and a loopback GitHub
that accepts only tokens the provider currently considers live.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from connections_app.models import Connection, OAuthProvider
from connections_app.oauth import oauth_connection_store
from connections_app.services import connection_credentials_open
from tests.factories import GrantFactory
from tests.support.fake_oauth import FakeOAuthProvider
from tests.support.loopback import json_answer

pytestmark = pytest.mark.django_db

USER = {"login": "octocat", "id": 1, "name": "Octo", "html_url": "https://github.com/octocat"}


@pytest.fixture
def provider():
    with FakeOAuthProvider() as fake:
        fake.register()
        yield fake


@pytest.fixture
def strict_github(github, provider):
    """GitHub answers 200 only to a token the provider issued and still considers live."""

    def user(request):
        token = request.headers.get("authorization", "").removeprefix("Bearer ")
        if provider.is_live_access_token(token):
            return json_answer(200, USER)
        return json_answer(401, {"message": "Bad credentials"})

    github.handle("GET", "/user", user)
    return github


def expired_connection(provider, account) -> tuple[Connection, object]:
    access, refresh = provider.issue_tokens()
    connection = oauth_connection_store(
        tenant=account.tenant,
        provider=OAuthProvider.objects.get(name="github"),
        token={"access_token": access, "refresh_token": refresh, "expires_in": 3600},
        now=timezone.now(),
        refresh_window=timedelta(minutes=10),
        created_by=None,
    )
    Connection.objects.filter(pk=connection.pk).update(expires_at=timezone.now() - timedelta(seconds=5))
    return connection, GrantFactory(service_account=account, connections=[connection])


def test_an_expired_token_is_refreshed_during_the_call(strict_github, provider, caller, call_tool):
    connection, grant = expired_connection(provider, caller[0])

    response = call_tool(connection, grant)

    assert response.status_code == 200, response.json()
    assert response.json()["value"] == USER
    assert len(provider.refresh_calls) == 1
    connection.refresh_from_db()
    assert connection.expires_at > timezone.now() + timedelta(minutes=59)
    sent = strict_github.requests[-1].headers["authorization"]
    assert sent == f"Bearer {connection_credentials_open(connection)['access_token']}"


def test_a_token_that_is_still_valid_is_not_refreshed_during_the_call(strict_github, provider, caller, call_tool):
    connection, grant = expired_connection(provider, caller[0])
    Connection.objects.filter(pk=connection.pk).update(expires_at=timezone.now() + timedelta(minutes=5))
    # the background refresher's window, not the broker's: a live token is used as it is

    response = call_tool(connection, grant)

    assert response.status_code == 200
    assert provider.refresh_calls == []


def test_a_provider_error_answers_auth_refresh_failed(strict_github, provider, caller, call_tool):
    provider.fail_status = 500
    connection, grant = expired_connection(provider, caller[0])

    response = call_tool(connection, grant)

    assert response.status_code == 502
    assert response.json()["error_code"] == "auth_refresh_failed"
    assert strict_github.requests == []
    connection.refresh_from_db()
    assert connection.status == Connection.Status.ACTIVE  # transient: not marked broken


def test_a_slow_provider_is_cut_off_at_the_sync_bound(strict_github, provider, caller, call_tool, settings):
    settings.TOOLGATE_SYNC_REFRESH_TIMEOUT_MS = 300
    provider.delay_s = 3.0
    connection, grant = expired_connection(provider, caller[0])

    started = time.monotonic()
    response = call_tool(connection, grant)
    elapsed = time.monotonic() - started

    assert response.status_code == 502
    assert response.json()["error_code"] == "auth_refresh_failed"
    assert elapsed < 1.5
    assert strict_github.requests == []


def test_a_refused_refresh_token_answers_connection_unavailable(strict_github, provider, caller, call_tool):
    provider.refuse_refresh = True
    connection, grant = expired_connection(provider, caller[0])

    first = call_tool(connection, grant)
    second = call_tool(connection, grant)

    assert first.status_code == second.status_code == 409
    assert first.json()["error_code"] == "connection_unavailable"
    assert second.json()["safe_message"] == "connection needs re-authorisation by the tenant"
    assert len(provider.refresh_calls) == 1  # a connection needing re-authorisation is not retried
    connection.refresh_from_db()
    assert connection.status == Connection.Status.NEEDS_REAUTH
    assert strict_github.requests == []
