"""The refresh sweep at 100k due connections, and the backoff of a connection whose refreshes keep failing.

What it shows, on PostgreSQL and Redis (loopback):

1. One connection whose provider answers 503 to every refresh: each attempt
   runs the task's refresh (a real HTTP request to a loopback provider) and
   prints the wait the backoff chose, until the connection needs attention;
   then a sweep run far in the future shows it is no longer queued.
2. N connections (100,000 by default) all due at once, as after a provider
   outage or a bulk import. One sweep, as beat runs it (at most
   TOOLGATE_REFRESH_SWEEP_LIMIT rows, sent through one producer in pipelined
   batches), is timed against the task's soft time limit, and the Redis queue
   is counted. Then the same N claimed by one sweep with no limit, to give the
   cost per row, and from it the largest limit that stays inside half the soft
   limit on this machine; and, for comparison, a limit's worth of tasks sent
   the way the sweep sent them before, one `apply_async` each.

    python -m bench.refresh_scale [--due N]

Needs PostgreSQL and Redis: DATABASE_URL (default a `toolgate_bench` database
on 127.0.0.1, dropped and re-created each run) and REDIS_URL (default db 9,
flushed). Prints figures; nothing passes or fails.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta

import django
import redis

from bench.database import fresh_database, manage, production_environment

os.environ.update(production_environment("config.settings"))
fresh_database(os.environ["DATABASE_URL"])
manage(dict(os.environ), "migrate", "--noinput")
django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection as db_connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from connections_app.models import Connection, OAuthProvider  # noqa: E402
from connections_app.oauth import oauth_connection_store  # noqa: E402
from connections_app.refresh import connection_refresh  # noqa: E402
from connections_app.scheduling import refresh_sweep_once  # noqa: E402
from connections_app.tasks import (  # noqa: E402
    REFRESH_HTTP_TIMEOUT_S,
    SWEEP_TIME_BUDGET_S,
    refresh_connection,
    refresh_sweep,
    refresh_tasks_send,
)
from policies_app.services import tenant_create  # noqa: E402
from tests.support.fake_oauth import FakeOAuthProvider  # noqa: E402

QUEUE = "celery"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--due", type=int, default=100_000, help="connections due at once")
    options = parser.parse_args()
    broker = redis.Redis.from_url(os.environ["REDIS_URL"])
    broker.flushdb()
    try:
        backoff()
        sweep(options.due, broker)
    finally:
        broker.flushdb()


def sweep(due: int, broker: redis.Redis) -> None:
    soft_limit = refresh_sweep.soft_time_limit
    limit = settings.TOOLGATE_REFRESH_SWEEP_LIMIT
    tenant = tenant_create(slug="herd")
    started = time.perf_counter()
    _insert_due(tenant.pk, due)
    print(f"# refresh sweep: {due:,} OAuth connections due at once (inserted in {time.perf_counter() - started:.1f} s)")
    print(f"soft time limit of the sweep task: {soft_limit} s (no batch claimed after {SWEEP_TIME_BUDGET_S:.0f} s);")
    print(f"  TOOLGATE_REFRESH_SWEEP_LIMIT = {limit:,}")

    bounded, elapsed = _timed_sweep(limit=None, time_budget_s=SWEEP_TIME_BUDGET_S)
    queued = broker.llen(QUEUE)
    share = elapsed / soft_limit
    print(f"one sweep as beat runs it: queued {bounded:,} in {elapsed:.2f} s ({share:.0%} of the soft limit);")
    print(f"  {queued:,} messages in Redis; {due - bounded:,} left for the next sweeps, oldest first")
    sweeps = -(-due // limit)
    interval = settings.TOOLGATE_REFRESH_SWEEP_SECONDS
    print(f"  the backlog drains in {sweeps} sweeps ({sweeps * interval / 60:.0f} min at one per {interval} s)")
    broker.flushdb()

    Connection.objects.filter(tenant=tenant).update(next_refresh_at=timezone.now() - timedelta(minutes=1))
    everything, elapsed = _timed_sweep(limit=due)
    per_row_ms = elapsed / everything * 1000
    fits = int(soft_limit / 2 / (per_row_ms / 1000))
    print(f"one sweep with no limit: queued {everything:,} in {elapsed:.2f} s ({per_row_ms:.3f} ms a row);")
    print(f"  {broker.llen(QUEUE):,} messages in Redis; on this machine a limit up to {fits:,} stays in half")
    print("  the soft limit")
    broker.flushdb()

    ids = [str(pk) for pk in Connection.objects.filter(tenant=tenant).values_list("pk", flat=True)[:limit]]
    started = time.perf_counter()
    for connection_id in ids:
        refresh_connection.apply_async(args=[connection_id], countdown=60)
    elapsed = time.perf_counter() - started
    print(f"for comparison, {len(ids):,} sent one apply_async each: {elapsed / len(ids) * 1000:.3f} ms a message")
    broker.flushdb()


def _insert_due(tenant_id: int, count: int) -> None:
    """`count` OAuth rows, all due, in one INSERT ... SELECT (the sweep never opens their credentials)."""
    with db_connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO connections_app_connection
                (id, tenant_id, provider, credential_type, label, encrypted_credentials, encryption_key_id, scopes,
                 status, expires_at, next_refresh_at, created_at, updated_at, refresh_failures, last_refresh_error)
            SELECT gen_random_uuid(), %s, 'github', 'oauth2', '', '\\x00'::bytea, 'bench', '[]'::jsonb,
                   'active', now() + interval '5 minutes', now() - n * interval '1 millisecond', now(), now(), 0, ''
            FROM generate_series(1, %s) AS n
            """,
            [tenant_id, count],
        )


def _timed_sweep(*, limit: int | None, time_budget_s: float | None = None) -> tuple[int, float]:
    started = time.perf_counter()
    queued = refresh_sweep_once(enqueue=refresh_tasks_send, limit=limit, time_budget_s=time_budget_s)
    return queued, time.perf_counter() - started


def backoff() -> None:
    base = settings.TOOLGATE_REFRESH_BACKOFF_BASE_SECONDS
    ceiling = settings.TOOLGATE_REFRESH_BACKOFF_MAX_SECONDS
    most = settings.TOOLGATE_REFRESH_MAX_FAILURES
    print()
    print(f"# a connection whose provider answers 503 to every refresh (base {base} s, cap {ceiling} s,")
    print(f"  needs attention after {most} failures)")
    with FakeOAuthProvider() as provider:
        provider.register()
        provider.fail_status = 503
        access, refresh = provider.issue_tokens()
        connection = oauth_connection_store(
            tenant=tenant_create(slug="failing"),
            provider=OAuthProvider.objects.get(name="github"),
            token={"access_token": access, "refresh_token": refresh, "expires_in": 60, "token_type": "Bearer"},
            now=timezone.now(),
            refresh_window=timedelta(seconds=settings.TOOLGATE_REFRESH_WINDOW_SECONDS),
            created_by=None,
        )
        waited = timedelta()
        for attempt in range(1, most + 2):
            tried_at = timezone.now()
            result = connection_refresh(
                connection_id=str(connection.pk),
                fresh_for=timedelta(seconds=settings.TOOLGATE_REFRESH_WINDOW_SECONDS),
                refresh_window=timedelta(seconds=settings.TOOLGATE_REFRESH_WINDOW_SECONDS),
                http_timeout_s=REFRESH_HTTP_TIMEOUT_S,
            )
            connection.refresh_from_db()
            if connection.next_refresh_at is None:
                print(
                    f"attempt {attempt}: {result.outcome.value} ({result.error}); status {connection.status}, "
                    f"nothing scheduled, {_clock(waited)} after the first failure"
                )
                break
            wait = connection.next_refresh_at - tried_at
            waited += wait
            print(f"attempt {attempt}: {result.outcome.value} ({result.error}); next try in {_clock(wait)}")
            Connection.objects.filter(pk=connection.pk).update(next_refresh_at=tried_at)  # as if that time had come
        later = refresh_sweep_once(enqueue=lambda batch: None, now=timezone.now() + timedelta(days=30))
        print(f"a sweep 30 days later queues {later} connections: it stopped")
    print()


def _clock(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"


if __name__ == "__main__":
    sys.exit(main())
