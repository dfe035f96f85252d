"""The refresh sweep: bounded claims, batches handed over on commit, and one pipelined send to real Redis."""

from __future__ import annotations

import base64
import json
import time
import uuid
from datetime import timedelta

import pytest
import redis
from django.utils import timezone
from kombu.transport.redis import PublishBatch

from config.celery import app as celery_app
from connections_app.models import Connection
from connections_app.scheduling import RETRY_HORIZON, refresh_sweep_once
from connections_app.tasks import PUBLISH_BATCH_SIZE, refresh_tasks_send
from tests.factories import TenantFactory

pytestmark = pytest.mark.django_db


def due_connections(count: int, *, oldest_minutes_ago: int = 60) -> list[Connection]:
    """`count` OAuth rows due for refresh, each a second later than the one before (the sweep never opens them)."""
    tenant = TenantFactory()
    start = timezone.now() - timedelta(minutes=oldest_minutes_ago)
    rows = [
        Connection(
            tenant=tenant,
            provider="github",
            credential_type=Connection.CredentialType.OAUTH2,
            encrypted_credentials=b"unused by the sweep",
            encryption_key_id="k1",
            expires_at=start + timedelta(seconds=n, minutes=10),
            next_refresh_at=start + timedelta(seconds=n),
        )
        for n in range(count)
    ]
    return Connection.objects.bulk_create(rows)


def test_a_sweep_claims_at_most_its_limit_oldest_first_and_leaves_the_rest_for_the_next(
    settings, django_capture_on_commit_callbacks
):
    # given 25 due connections and a limit of 10, in batches of 4
    settings.TOOLGATE_REFRESH_SWEEP_LIMIT = 10
    settings.TOOLGATE_REFRESH_JITTER_SECONDS = 30
    rows = due_connections(25)
    batches: list[list[tuple[str, float]]] = []

    # when two sweeps run
    with django_capture_on_commit_callbacks(execute=True):
        first = refresh_sweep_once(enqueue=batches.append, batch_size=4)
    first_batches = list(batches)
    with django_capture_on_commit_callbacks(execute=True):
        second = refresh_sweep_once(enqueue=batches.append, batch_size=4)

    # then each queued ten, the oldest first, in batches of at most four
    assert (first, second) == (10, 10)
    assert [len(batch) for batch in first_batches] == [4, 4, 2]
    sent = [connection_id for batch in batches for connection_id, _ in batch]
    assert sent == [str(row.pk) for row in rows[:20]]
    assert all(0 <= countdown <= 30 for batch in batches for _, countdown in batch)
    # and the claimed rows are not due again until their tasks had time to run
    claimed = Connection.objects.filter(pk__in=sent)
    assert all(row.next_refresh_at > timezone.now() + RETRY_HORIZON for row in claimed)
    assert Connection.objects.filter(next_refresh_at__lte=timezone.now()).count() == 5


def test_an_explicit_limit_overrides_the_setting_and_nothing_is_sent_before_commit(
    settings, django_capture_on_commit_callbacks
):
    settings.TOOLGATE_REFRESH_SWEEP_LIMIT = 1
    due_connections(3)
    batches: list[list[tuple[str, float]]] = []

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        queued = refresh_sweep_once(enqueue=batches.append, limit=3)

    assert queued == 3
    assert batches == []  # handed over only once the claim committed
    for callback in callbacks:
        callback()
    assert [len(batch) for batch in batches] == [3]


def test_the_jitter_spreads_the_countdowns(settings, django_capture_on_commit_callbacks):
    settings.TOOLGATE_REFRESH_JITTER_SECONDS = 120
    due_connections(200)
    batches: list[list[tuple[str, float]]] = []

    with django_capture_on_commit_callbacks(execute=True):
        refresh_sweep_once(enqueue=batches.append, limit=200)

    countdowns = [countdown for batch in batches for _, countdown in batch]
    assert len(countdowns) == 200
    assert len({round(countdown, 3) for countdown in countdowns}) > 190
    assert 0 <= min(countdowns) < 20
    assert 100 < max(countdowns) <= 120


@pytest.fixture
def broker(redis_url, settings):
    """The Redis database Celery publishes to, emptied before and after."""
    client = redis.Redis.from_url(celery_app.conf.broker_url)
    client.flushdb()
    yield client
    client.flushdb()


def test_a_batch_goes_to_redis_through_one_pipeline_per_hundred_messages(broker, monkeypatch):
    # given 1,500 (connection id, countdown) pairs, and a count of the pipelines kombu executes
    batch = [(str(uuid.uuid4()), float(n % 60 + 1)) for n in range(1500)]
    flushes: list[int] = []
    flush = PublishBatch.flush

    def counted_flush(self: PublishBatch) -> None:
        flushes.append(self._buffered)
        flush(self)

    monkeypatch.setattr(PublishBatch, "flush", counted_flush)

    # when
    refresh_tasks_send(batch)

    # then 15 round trips of 100 LPUSHes carried them all, not 1,500 round trips
    assert [count for count in flushes if count] == [PUBLISH_BATCH_SIZE] * 15
    # and each is the message apply_async builds: the refresh task, the connection id alone, an eta
    messages = [json.loads(raw) for raw in broker.lrange("celery", 0, -1)]
    assert len(messages) == 1500
    assert {message["headers"]["task"] for message in messages} == {"connections_app.tasks.refresh_connection"}
    assert all(message["headers"]["eta"] for message in messages)
    bodies = [json.loads(base64.b64decode(message["body"])) for message in messages]
    assert sorted(args for args, kwargs, _ in bodies) == sorted([connection_id] for connection_id, _ in batch)
    assert all(kwargs == {} for _, kwargs, _ in bodies)


@pytest.mark.django_db(transaction=True)  # each batch commits for real, and is sent then
def test_a_spent_time_budget_stops_claiming_further_batches():
    # given 30 due rows, a limit that would take them all, and a sender slower than the budget allows
    due_connections(30)
    batches: list[list[tuple[str, float]]] = []

    def slow_send(batch: list[tuple[str, float]]) -> None:
        batches.append(batch)
        time.sleep(0.2)

    # when the budget is 0.3 s and each batch of 10 takes 0.2 s to send
    queued = refresh_sweep_once(enqueue=slow_send, limit=30, batch_size=10, time_budget_s=0.3)

    # then it stopped after the second batch; the third is still due, for the next sweep
    assert queued == 20
    assert [len(batch) for batch in batches] == [10, 10]
    assert Connection.objects.filter(next_refresh_at__lte=timezone.now()).count() == 10
