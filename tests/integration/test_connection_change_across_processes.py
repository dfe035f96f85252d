"""A revoked or refreshed connection applies on the very next call in another server process (PostgreSQL).

The broker keeps connection rows in each process's governance cache; every
write that changes what it checks bumps the generation. Two real `runserver`
processes share the test database and a loopback GitHub; each has used the
connection (so its row is cached) before the change. A revocation made through
one process's API must refuse the next call in the other; a refresh (new
tokens, as the background refresher stores them) must send the new token from
the next call on in both.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from django.core.management import call_command
from django.db import connection as db
from django.utils import timezone

from connections_app.models import OAuthProvider
from connections_app.oauth import oauth_connection_store
from connections_app.refresh import RefreshOutcome, connection_refresh
from tests.factories import ConnectionFactory, GrantFactory, TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.fake_oauth import FakeOAuthProvider
from tests.support.loopback import LoopbackServer
from tools_app.models import Tool

# Two runservers start before each test (up to 90 s on a busy machine), within pytest-timeout's budget.
pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[2]
USER = {"login": "octocat", "id": 1, "name": "Octo", "html_url": "https://github.com/octocat"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _database_url() -> str:
    settings = db.settings_dict
    host, port = settings["HOST"] or "127.0.0.1", settings["PORT"] or 5432
    return f"postgres://{settings['USER']}@{host}:{port}/{settings['NAME']}"


@pytest.fixture
def github() -> Iterator[LoopbackServer]:
    with LoopbackServer() as server:
        server.route("GET", "/user", json=USER)
        yield server


@pytest.fixture
def two_servers(postgres_required, github) -> Iterator[list[str]]:
    env = {**os.environ, "DATABASE_URL": _database_url(), "DEBUG": "True", "TOOLGATE_GITHUB_API_URL": github.url}
    ports = [_free_port(), _free_port()]
    processes = [
        subprocess.Popen(
            [sys.executable, "manage.py", "runserver", "--noreload", "--skip-checks", f"127.0.0.1:{port}"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for port in ports
    ]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    try:
        deadline = time.monotonic() + 90  # a runserver beside two busy xdist workers can take over 30 s here
        for url in urls:
            while True:
                try:
                    if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(f"server {url} did not start")
                time.sleep(0.1)
        yield urls
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=10)


@pytest.fixture
def caller() -> tuple[object, str]:
    call_command("sync_tools")
    Tool.objects.filter(pk="github__get_user").update(is_enabled=True)
    account, key = service_account_with_key(TenantFactory(slug="procs"), scopes=("tools:exec", "connections:manage"))
    ToolPolicyFactory(tenant=account.tenant, allowed_tools=["github__get_user"])
    return account, key


def _get_user(url: str, key: str, connection_id: object, grant_id: object) -> httpx.Response:
    return httpx.post(
        f"{url}/api/v1/tools/exec",
        json={
            "tool_id": "github__get_user",
            "args": {},
            "connection_id": str(connection_id),
            "grant_id": str(grant_id),
        },
        headers={"Authorization": f"Bearer {key}"},
        timeout=10,
    )


@pytest.mark.django_db(transaction=True)
def test_a_revoke_through_one_process_refuses_the_next_call_in_the_other(two_servers, github, caller):
    # given: both processes have used the connection, so each holds its row
    account, key = caller
    connection = ConnectionFactory(tenant=account.tenant)
    grant = GrantFactory(service_account=account, connections=[connection])
    warm = [_get_user(url, key, connection.pk, grant.pk).status_code for url in two_servers]
    assert warm == [200, 200]
    assert len(github.requests) == 2

    # when: the tenant revokes it through the first process's API
    revoked = httpx.post(
        f"{two_servers[0]}/api/v1/connections/{connection.pk}/revoke",
        headers={"Authorization": f"Bearer {key}"},
        timeout=10,
    )
    assert revoked.status_code == 200

    # then: the very next call in the other process (and in the first) is refused, and GitHub hears nothing
    refused = [_get_user(url, key, connection.pk, grant.pk) for url in reversed(two_servers)]
    assert [(r.status_code, r.json()["error_code"]) for r in refused] == [(409, "connection_unavailable")] * 2
    assert {r.json()["safe_message"] for r in refused} == {"connection has been revoked"}
    assert len(github.requests) == 2


@pytest.mark.django_db(transaction=True)
def test_a_refresh_sends_the_new_token_from_the_next_call_in_every_process(two_servers, github, caller):
    # given: an OAuth connection both processes have used with its first access token
    account, key = caller
    with FakeOAuthProvider() as provider:
        provider.register(scopes=("repo",))
        access, refresh = provider.issue_tokens()
        connection = oauth_connection_store(
            tenant=account.tenant,
            provider=OAuthProvider.objects.get(name="github"),
            token={"access_token": access, "refresh_token": refresh, "expires_in": 3600, "token_type": "Bearer"},
            now=timezone.now(),
            refresh_window=timedelta(minutes=10),
            created_by=None,
        )
        grant = GrantFactory(service_account=account, connections=[connection])
        assert [_get_user(url, key, connection.pk, grant.pk).status_code for url in two_servers] == [200, 200]
        assert {r.headers["authorization"] for r in github.requests} == {f"Bearer {access}"}

        # when: the background refresher replaces the tokens (this process, as a Celery worker would)
        result = connection_refresh(
            connection_id=str(connection.pk),
            fresh_for=timedelta(hours=2),  # due now, though the old token is still valid
            refresh_window=timedelta(minutes=10),
            http_timeout_s=5,
        )
        assert result.outcome is RefreshOutcome.REFRESHED
        assert not provider.is_live_access_token(access)

        # then: the next call in each process presents the new token, never the old one
        after = [_get_user(url, key, connection.pk, grant.pk).status_code for url in two_servers]
        assert after == [200, 200]
        sent = [r.headers["authorization"] for r in github.requests[2:]]
        assert len(sent) == 2
        assert all(header != f"Bearer {access}" for header in sent)
        assert all(provider.is_live_access_token(header.removeprefix("Bearer ")) for header in sent)
