"""Background OAuth refresh with real Celery worker processes, PostgreSQL and Redis.

The workers are `celery -A config worker` subprocesses on the test database
(tests/support/celery_workers.py); the fake OAuth provider and the loopback
GitHub run in this process on real sockets. Tests that enqueue tasks
themselves give their workers a queue of their own; the sweep test uses the
default queue, because that is where the sweep sends its refreshes in
production (conftest's `cache.clear()` flushes this Redis database before every
test, so no other test's message waits there).

Secrets: tasks carry connection ids only. Each test checks that no token (nor
the client secret) appears in what the workers logged; the sweep test also reads
the arguments of every task the workers received from their task events.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import threading
import time
import uuid
from ast import literal_eval
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import httpx
import pytest
from django.db import DatabaseError, transaction
from django.db import connection as db_connection
from django.utils import timezone

from config.celery import app as celery_app
from config.runtime import runtime
from connections_app.models import Connection, ConnectionEvent, OAuthProvider
from connections_app.oauth import oauth_connection_store, token_credentials
from connections_app.services import connection_credentials_open, seal_credentials_into
from connections_app.tasks import refresh_connection
from policies_app.models import Tenant
from tests.factories import GrantFactory, TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import enable_tools
from tests.support.celery_workers import NODE_HOST, CeleryProcesses, TaskEvents, database_url, wait_until
from tests.support.fake_oauth import CLIENT_SECRET, FakeOAuthProvider
from tests.support.loopback import LoopbackServer, json_answer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services]

USER = {"login": "octocat", "id": 1, "name": "Octo", "html_url": "https://github.com/octocat"}
REFRESH_TASK = "connections_app.tasks.refresh_connection"
TASK_DONE = r"refresh_connection\[{task_id}\] succeeded in [0-9.]+s: '(\w+)'"


@pytest.fixture
def worker_env(transactional_db, postgres_required, redis_url, settings) -> dict[str, str]:
    """What the worker processes run with: this test database, this Redis, production-like settings."""
    env = {name: value for name, value in os.environ.items() if name != "CELERY_BROKER_URL"}
    return env | {
        "DATABASE_URL": database_url(db_connection.settings_dict),
        "REDIS_URL": redis_url,
        "DEBUG": "False",
        "SECRET_KEY": settings.SECRET_KEY,
        "TOOLGATE_ENCRYPTION_KEYS": settings.TOOLGATE_ENCRYPTION_KEYS,
    }


@pytest.fixture
def celery(worker_env, tmp_path):
    with CeleryProcesses(env=worker_env, log_dir=tmp_path) as processes:
        yield processes


@pytest.fixture
def queue() -> str:
    return f"toolgate-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def provider(transactional_db):
    with FakeOAuthProvider() as fake:
        fake.register()
        yield fake


@pytest.fixture
def strict_github(provider, settings):
    """GitHub, answering 200 only to a token the provider issued and still considers live."""

    def user(request):
        token = request.headers.get("authorization", "").removeprefix("Bearer ")
        if provider.is_live_access_token(token):
            return json_answer(200, USER)
        return json_answer(401, {"message": "Bad credentials"})

    with LoopbackServer() as server:
        server.handle("GET", "/user", user)
        settings.TOOLGATE_GITHUB_API_URL = server.url
        runtime.cache_clear()
        yield server
    runtime.cache_clear()


def store_connection(provider: FakeOAuthProvider, tenant: Tenant, *, window: timedelta) -> Connection:
    access, refresh = provider.issue_tokens()
    return oauth_connection_store(
        tenant=tenant,
        provider=OAuthProvider.objects.get(name="github"),
        token={"access_token": access, "refresh_token": refresh, "expires_in": 3600, "token_type": "Bearer"},
        now=timezone.now(),
        refresh_window=window,
        created_by=None,
    )


def tokens(connections: list[Connection]) -> set[str]:
    """Every token the connections hold now (read back through the service)."""
    found: set[str] = set()
    for row in Connection.objects.filter(pk__in=[connection.pk for connection in connections]):
        credentials = connection_credentials_open(row)
        found |= {credentials["access_token"], credentials.get("refresh_token", "")}
    return found - {""}


def secrets_in(text: str, secrets: set[str]) -> set[str]:
    return {secret for secret in secrets if secret in text}


def task_outcome(celery: CeleryProcesses, task_id: str, *, timeout: float = 20) -> str:
    """What a refresh task returned, read from the log of whichever worker ran it."""
    pattern = re.compile(TASK_DONE.format(task_id=task_id))
    found = wait_until(lambda: pattern.search(celery.logs()), timeout=timeout, what=f"task {task_id}\n{celery}")
    return found.group(1)


def row_lock_is_free(connection_id: str) -> bool:
    try:
        with transaction.atomic():
            Connection.objects.select_for_update(nowait=True).get(pk=connection_id)
    except DatabaseError:
        return False
    return True


def test_two_workers_and_twenty_calls_refresh_an_expired_token_exactly_once(
    provider, strict_github, live_server, celery, queue
):
    # given: an expired connection, due for background refresh, granted to a caller of github__get_user
    tenant = TenantFactory(slug="race")
    enable_tools("github__get_user")
    account, key = service_account_with_key(tenant, name="agent")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["github__get_user"], require_approval_for_effects=[])
    connection = store_connection(provider, tenant, window=timedelta(minutes=10))
    Connection.objects.filter(pk=connection.pk).update(
        expires_at=timezone.now() - timedelta(seconds=5), next_refresh_at=timezone.now() - timedelta(minutes=10)
    )
    grant = GrantFactory(service_account=account, connections=[connection])
    issued = tokens([connection])
    first, second = celery.worker("race-a", queues=[queue]), celery.worker("race-b", queues=[queue])
    celery.wait_ready(first, second)
    provider.delay_s = 0.5  # whoever refreshes holds the row lock while everyone else arrives
    body = {"tool_id": "github__get_user", "args": {}, "connection_id": str(connection.pk), "grant_id": str(grant.pk)}
    start = threading.Barrier(21)

    def call() -> httpx.Response:
        start.wait()
        return httpx.post(
            f"{live_server.url}/api/v1/tools/exec", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )

    # when: refresh tasks reach both workers while 20 calls need the token
    with ThreadPoolExecutor(max_workers=20) as pool:
        calls = [pool.submit(call) for _ in range(20)]
        task_ids = [refresh_connection.apply_async(args=[str(connection.pk)], queue=queue).id for _ in range(6)]
        start.wait()
        responses = [future.result() for future in calls]
    outcomes = [task_outcome(celery, task_id) for task_id in task_ids]

    # then: one token-endpoint call, with the stored refresh token; every call used a live token
    assert [response.status_code for response in responses] == [200] * 20, [r.json() for r in responses]
    assert all(response.json()["value"] == USER for response in responses)
    assert len(strict_github.requests) == 20
    assert len(provider.refresh_calls) == 1
    assert provider.refresh_calls[0] in issued
    assert provider.revoked_families == 0
    assert set(outcomes) <= {"refreshed", "already_fresh", "busy"}
    assert outcomes.count("refreshed") <= 1
    assert all(re.search(r"refresh_connection\[[0-9a-f-]+\] received", w.log()) for w in (first, second))
    assert ConnectionEvent.objects.filter(connection_id=connection.pk, kind="refreshed").count() == 1
    connection.refresh_from_db()
    assert connection.status == Connection.Status.ACTIVE
    assert connection.expires_at > timezone.now() + timedelta(minutes=59)
    assert secrets_in(celery.logs(), issued | tokens([connection]) | {CLIENT_SECRET}) == set()


VISIBILITY_TIMEOUT_S = 3


def test_a_worker_killed_mid_refresh_leaves_the_connection_refreshed_or_needing_reauth(provider, celery, queue):
    # given: workers whose broker redelivers an unacknowledged task after 3 s, and a connection due for refresh
    celery.env |= {
        "CELERY_BROKER_VISIBILITY_TIMEOUT": str(VISIBILITY_TIMEOUT_S),
        "TOOLGATE_REFRESH_JITTER_SECONDS": "1",  # settings insist on jitter < visibility timeout
    }
    connection = store_connection(provider, TenantFactory(slug="crash"), window=timedelta(minutes=10))
    Connection.objects.filter(pk=connection.pk).update(expires_at=timezone.now() + timedelta(minutes=2))
    before = Connection.objects.get(pk=connection.pk)
    issued = tokens([connection])
    provider.delay_s = 2.0  # the token endpoint keeps the worker waiting
    doomed = celery.worker("doomed", queues=[queue])
    doomed.wait_ready()

    # when: the worker is killed while it waits on the provider, holding the row lock
    task_id = refresh_connection.apply_async(args=[str(connection.pk)], queue=queue).id
    wait_until(lambda: any(r.path == "/token" for r in provider.server.requests), timeout=15, what=f"token\n{doomed}")
    delivered_by = time.monotonic()
    doomed.kill()
    # then PostgreSQL ends the dead session and releases its lock at once
    wait_until(lambda: row_lock_is_free(str(connection.pk)), timeout=5, what="the dead worker's row lock released")

    # and a worker started after the visibility timeout (a restart, or any other) gets the same task again
    time.sleep(max(0.0, delivered_by + VISIBILITY_TIMEOUT_S + 0.5 - time.monotonic()))
    rescuer = celery.worker("rescuer", queues=[queue])
    outcome = rescuer.wait_for_log(TASK_DONE.format(task_id=task_id), timeout=20).group(1)

    # then: never stuck - re-authorisation needed (the provider rotated the token the dead worker asked
    # for, so the retry was a replay) or refreshed, and the row lock is free
    connection.refresh_from_db()
    assert f"refresh_connection[{task_id}] received" in doomed.log()
    assert outcome in {"needs_reauth", "refreshed"}
    if outcome == "needs_reauth":
        assert connection.status == Connection.Status.NEEDS_REAUTH
        assert connection.next_refresh_at is None
        assert connection.last_refresh_error == "invalid_grant"
        assert provider.revoked_families == 1  # the retry presented the token the dead worker had spent
    else:
        assert connection.status == Connection.Status.ACTIVE
        assert connection.expires_at > before.expires_at
    assert len(provider.refresh_calls) <= 2
    assert row_lock_is_free(str(connection.pk))
    assert secrets_in(celery.logs(), issued | tokens([connection]) | {CLIENT_SECRET}) == set()


def test_a_failing_connection_is_retried_by_the_sweep_with_growing_waits_then_left_alone(provider, celery):
    """Worker and beat: no Celery retries, the row's backoff is the schedule, and it ends in needs_attention."""
    # given: a provider answering 503 to every refresh; a backoff of 2 s doubling, three failures allowed
    provider.fail_status = 503
    celery.env |= {
        "TOOLGATE_REFRESH_SWEEP_SECONDS": "1",
        "TOOLGATE_REFRESH_JITTER_SECONDS": "1",
        "TOOLGATE_REFRESH_BACKOFF_BASE_SECONDS": "2",
        "TOOLGATE_REFRESH_BACKOFF_MAX_SECONDS": "60",
        "TOOLGATE_REFRESH_MAX_FAILURES": "3",
    }
    connection = store_connection(provider, TenantFactory(slug="outage"), window=timedelta(minutes=10))
    worker, beat = celery.worker("patient"), celery.beat()
    celery.wait_ready(worker, beat)

    # when it becomes due: its token expires within the refresh window
    now = timezone.now()
    Connection.objects.filter(pk=connection.pk).update(expires_at=now + timedelta(minutes=2), next_refresh_at=now)
    row = Connection.objects.filter(pk=connection.pk)
    wait_until(lambda: row.get().status == "needs_attention", timeout=60, interval=0.2, what=f"attention\n{celery}")
    given_up = time.monotonic()

    # then: three attempts, each a refresh_failed event, the third followed by needs_attention
    events = list(ConnectionEvent.objects.filter(connection_id=connection.pk).order_by("created_at", "id"))
    assert [(event.kind, event.detail) for event in events][1:] == [
        ("refresh_failed", "server_error"),
        ("refresh_failed", "server_error"),
        ("refresh_failed", "server_error"),
        ("needs_attention", "3 refresh failures in a row, the last: server_error"),
    ]
    # and the attempts came further apart: at least half of 2 s, then half of 4 s, after each failure
    failed_at = [event.created_at for event in events if event.kind == "refresh_failed"]
    gaps = [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(failed_at)]
    assert gaps[0] >= 1.0, gaps
    assert gaps[1] >= 2.0, gaps
    connection.refresh_from_db()
    assert (connection.refresh_failures, connection.next_refresh_at) == (3, None)
    # and the sweep leaves it alone: no further attempt over several sweeps
    time.sleep(max(0.0, given_up + 4 - time.monotonic()))
    assert ConnectionEvent.objects.filter(connection_id=connection.pk, kind="refresh_failed").count() == 3
    assert worker.log().count("succeeded") >= 3  # the tasks ended (transient_failure), Celery retried none
    assert "Retry in" not in worker.log()


CONNECTIONS = 1000
JITTER_S = 5
WINDOW_S = 120
EXPIRES_IN_S = 100  # the same expiry for all, inside the window: every refresh must land before it (a busy machine)


@pytest.mark.timeout(300)
def test_a_thousand_connections_expiring_together_are_refreshed_once_with_jittered_countdowns(provider, celery):
    """The sweep queues each due connection once, with a random countdown within the jitter window.

    The countdowns are read from the workers' task events, so they do not depend on how fast the
    workers get through the refreshes: on a 2-core machine 1,000 refreshes take longer than a 5 s
    window (the fake provider, PostgreSQL and 4 worker processes share the cores), and a saturated
    worker fetches further tasks only as it finishes others.
    """
    # given: 1,000 connections of one tenant, not yet due, and two prefork workers plus beat
    tenant = TenantFactory(slug="herd")
    connections, issued = bulk_oauth_connections(provider, tenant, CONNECTIONS)
    celery.env |= {
        "TOOLGATE_REFRESH_WINDOW_SECONDS": str(WINDOW_S),
        "TOOLGATE_REFRESH_JITTER_SECONDS": str(JITTER_S),
        "TOOLGATE_REFRESH_SWEEP_SECONDS": "1",
    }
    nodes = [f"herd-{n}@{NODE_HOST}" for n in "ab"]
    with TaskEvents(celery_app) as events:
        workers = [celery.worker(node.partition("@")[0], pool="prefork", concurrency=2, events=True) for node in nodes]
        beat = celery.beat()
        celery.wait_ready(*workers, beat)
        events.wait_for_nodes(*nodes)

        # when: they all become due at once, with one expiry
        expiry = timezone.now() + timedelta(seconds=EXPIRES_IN_S)
        due = Connection.objects.filter(tenant=tenant).update(
            expires_at=expiry, next_refresh_at=expiry - timedelta(seconds=WINDOW_S)
        )
        assert due == CONNECTIONS
        refreshed = Connection.objects.filter(tenant=tenant, refreshed_at__isnull=False)
        wait_until(lambda: refreshed.count() == CONNECTIONS, timeout=EXPIRES_IN_S, interval=0.5, what=f"all\n{celery}")
        sent = events.of_task("task-sent", REFRESH_TASK, count=CONNECTIONS)
        received = events.of_task("task-received", REFRESH_TASK, count=CONNECTIONS)

    # then: each refreshed once, before the expiry
    assert len(provider.refresh_calls) == CONNECTIONS
    assert len(set(provider.refresh_calls)) == CONNECTIONS
    assert set(provider.refresh_calls) <= issued
    assert provider.revoked_families == 0
    assert ConnectionEvent.objects.filter(tenant=tenant, kind="refreshed").count() == CONNECTIONS
    times = sorted(refreshed.values_list("refreshed_at", flat=True))
    assert times[-1] < expiry
    # and each was queued once, with its own random countdown within the window: eta less the moment it
    # was published (a busy worker receives tasks later, which would shorten a countdown read at receipt)
    assert len(sent) == len(received) == CONNECTIONS
    assert {event["uuid"] for event in sent} == {event["uuid"] for event in received}
    countdowns = [datetime.fromisoformat(event["eta"]).timestamp() - event["timestamp"] for event in sent]
    assert 0.8 * JITTER_S < max(countdowns) <= JITTER_S, f"countdowns up to {max(countdowns):.2f}s"
    assert min(countdowns) >= -0.1, f"countdowns down to {min(countdowns):.2f}s"
    # a worker receives tasks in the order the sweep queued them: with equal countdowns their etas would
    # only rise; with random ones about half of them fall below the eta of the task received before
    backwards = etas_going_backwards(received)
    assert backwards > 0.3, f"{backwards:.0%} of etas go backwards"
    # and the workers received connection ids only
    assert sorted(literal_eval(event["args"]) for event in received) == sorted([str(row.pk)] for row in connections)
    assert {event["kwargs"] for event in received} == {"{}"}
    secrets = issued | tokens(connections) | {CLIENT_SECRET}
    assert secrets_in(json.dumps(received), secrets) == set()
    assert secrets_in(celery.logs(), secrets) == set()


def bulk_oauth_connections(provider: FakeOAuthProvider, tenant: Tenant, count: int) -> tuple[list[Connection], set]:
    """`count` OAuth connections sealed as oauth_connection_store seals them, written in one INSERT
    (the service writes a row and its audit event at a time: 8 s for 1,000 here). Not due yet."""
    rows, issued = [], set()
    for _ in range(count):
        access, refresh = provider.issue_tokens()
        issued |= {access, refresh}
        row = Connection(
            tenant=tenant,
            provider="github",
            credential_type=Connection.CredentialType.OAUTH2,
            label="GitHub",
            scopes=["repo"],
            expires_at=timezone.now() + timedelta(hours=1),
        )
        seal_credentials_into(row, token_credentials({"access_token": access, "refresh_token": refresh}))
        rows.append(row)
    return Connection.objects.bulk_create(rows), issued


def etas_going_backwards(received: list[dict]) -> float:
    """The share of tasks whose eta is earlier than that of the task the same worker received just before."""
    pairs = backwards = 0
    for node in {event["hostname"] for event in received}:
        in_order = sorted((event for event in received if event["hostname"] == node), key=lambda event: event["clock"])
        etas = [datetime.fromisoformat(event["eta"]) for event in in_order]
        pairs += len(etas) - 1
        backwards += sum(later < earlier for earlier, later in itertools.pairwise(etas))
    return backwards / pairs
