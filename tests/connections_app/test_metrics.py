"""/metrics: refresh outcomes by provider, counted when each refresh commits (no scan at scrape time)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from connections_app.models import ConnectionEvent, OAuthProvider
from connections_app.oauth import oauth_connection_store
from connections_app.refresh import connection_refresh
from tests.factories import ConnectionFactory, TenantFactory
from tests.support.fake_oauth import FakeOAuthProvider
from tests.support.metrics import sample

pytestmark = pytest.mark.django_db

WINDOW = timedelta(minutes=10)


@pytest.fixture
def provider():
    with FakeOAuthProvider() as fake:
        fake.register(scopes=("repo",))
        yield fake


def _oauth_connection(provider, tenant):
    access, refresh = provider.issue_tokens()
    return oauth_connection_store(
        tenant=tenant,
        provider=OAuthProvider.objects.get(name="github"),
        token={"access_token": access, "refresh_token": refresh, "expires_in": 60, "token_type": "Bearer"},
        now=timezone.now(),
        refresh_window=WINDOW,
        created_by=None,
    )


def _refresh(connection) -> None:
    connection_refresh(connection_id=str(connection.pk), fresh_for=WINDOW, refresh_window=WINDOW, http_timeout_s=5.0)


def refreshes(outcome: str) -> float:
    return sample("toolgate_oauth_refresh_total", provider="github", outcome=outcome)


def test_refresh_outcomes_are_counted_when_they_happen(provider, django_capture_on_commit_callbacks):
    tenant = TenantFactory(slug="acme")
    before = {outcome: refreshes(outcome) for outcome in ("success", "server_error", "needs_reauth")}

    with django_capture_on_commit_callbacks(execute=True):
        _refresh(_oauth_connection(provider, tenant))
        _refresh(_oauth_connection(provider, tenant))
        provider.fail_status = 500
        _refresh(_oauth_connection(provider, tenant))
        provider.fail_status = None
        provider.refuse_refresh = True
        _refresh(_oauth_connection(provider, tenant))

    assert {outcome: refreshes(outcome) - before[outcome] for outcome in before} == {
        "success": 2,
        "server_error": 1,
        "needs_reauth": 1,
    }


def test_a_scrape_does_not_read_the_connection_events(django_assert_num_queries):
    connection = ConnectionFactory()
    ConnectionEvent.objects.create(
        tenant=connection.tenant, connection_id=connection.pk, provider="github", kind="refreshed"
    )

    with django_assert_num_queries(2):  # the approval queue's COUNT and the decisions by status, nothing else
        text = Client().get("/metrics").content.decode()

    assert "# TYPE toolgate_oauth_refresh_total counter" in text
