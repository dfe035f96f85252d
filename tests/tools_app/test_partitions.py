"""The audit trail partitioned by started_at (PostgreSQL), retired a partition at a time.

What must hold across a partition boundary is exactly-once: a call whose
repeat comes after the day changes lands its repeat in another partition, and
still replays instead of running twice (the claims table, not a unique index of
the partitioned table, decides). The SQLite default has no partitions; the
boundary tests run there too and hold through its unique index.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection
from django.utils import timezone

from runner.pipeline import args_digest
from runner.types import ToolInvocationContext
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import api_client, enable_tools
from tools_app import tasks
from tools_app.audit import audit_prune, invocation_claim, invocations_between
from tools_app.models import ToolCallClaim, ToolInvocation
from tools_app.partitions import (
    DEFAULT_PARTITION,
    audit_partitions,
    audit_partitions_ensure,
    partition_name,
    period_of,
)

pytestmark = pytest.mark.django_db

# Far enough ahead of the real clock that no partition the migration made covers it.
MIDNIGHT = datetime.combine(timezone.now().date() + timedelta(days=40), datetime.min.time(), tzinfo=UTC)


def partition_of(pk: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute('SELECT tableoid::regclass::text FROM "tools_app_toolinvocation" WHERE id = %s', [pk])
        return cursor.fetchone()[0]


def needs_postgresql() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("partitions exist on PostgreSQL only")


@pytest.fixture
def caller():
    tenant = TenantFactory(slug="acme")
    enable_tools("core__get_current_time")
    account, key = service_account_with_key(tenant, name="agent")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["core__get_current_time"])
    audit_partitions_ensure(now=MIDNIGHT - timedelta(days=1), ahead=2)
    return account, key


def test_a_repeat_after_midnight_replays_the_call_recorded_in_yesterdays_partition(caller):
    _account, key = caller
    body = {"tool_id": "core__get_current_time", "tool_call_id": "across-midnight", "args": {"timezone": "UTC"}}

    with time_machine.travel(MIDNIGHT - timedelta(seconds=1), tick=False):
        first = api_client(key).post("/api/v1/tools/exec", body, format="json")
    with time_machine.travel(MIDNIGHT + timedelta(seconds=1), tick=False):
        repeat = api_client(key).post("/api/v1/tools/exec", body, format="json")
        other = api_client(key).post(
            "/api/v1/tools/exec", {**body, "args": {"timezone": "Europe/Paris"}}, format="json"
        )

    assert (first.status_code, repeat.status_code) == (200, 200)
    assert repeat.json()["value"] == first.json()["value"]  # recorded, not run again (the clock moved on)
    assert first.json()["value"]["iso"].startswith(f"{(MIDNIGHT - timedelta(days=1)).date()}T23:59:59")
    assert other.status_code == 409
    assert other.json()["error_code"] == "idempotency_conflict"
    executed = ToolInvocation.objects.filter(tool_call_id="across-midnight", executed=True)
    assert executed.count() == 1
    if connection.vendor == "postgresql":
        day_before = partition_name(MIDNIGHT - timedelta(days=1), MIDNIGHT)
        assert partition_of(executed.get().pk) == day_before
        assert ToolCallClaim.objects.filter(tool_call_id="across-midnight").count() == 1


def test_a_claim_after_midnight_collides_with_the_one_before(caller):
    account, _key = caller
    ctx = ToolInvocationContext(
        run_id="", tool_call_id="claimed-twice", tenant_id=str(account.tenant_id), actor_id=str(account.pk)
    )
    digest = args_digest({})

    with time_machine.travel(MIDNIGHT - timedelta(milliseconds=1), tick=False):
        before = invocation_claim(ctx=ctx, tool_id="core__get_current_time", args_sha256=digest, lease_s=60)
    with time_machine.travel(MIDNIGHT, tick=False):
        after = invocation_claim(ctx=ctx, tool_id="core__get_current_time", args_sha256=digest, lease_s=60)

    assert before is not None
    assert after is None
    assert ToolInvocation.objects.filter(tool_call_id="claimed-twice").count() == 1


def test_partitions_ahead_are_made_once_and_take_in_rows_stranded_in_the_default_partition():
    needs_postgresql()
    tenant = TenantFactory(slug="acme")
    later = MIDNIGHT + timedelta(days=30, hours=5)
    stranded = ToolInvocation.objects.create(
        tenant=tenant, tool_call_id="early", tool_id="t", decision="allow", started_at=later
    )
    assert partition_of(stranded.pk) == DEFAULT_PARTITION

    with connection.cursor() as cursor:  # beat runs in autocommit; the test's transaction defers FK checks
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    created = audit_partitions_ensure(now=later, ahead=1, granularity="day")

    day = later.replace(hour=0)
    assert created == [
        partition_name(day, day + timedelta(days=1)),
        partition_name(day + timedelta(days=1), day + timedelta(days=2)),
    ]
    assert partition_of(stranded.pk) == created[0]
    assert audit_partitions_ensure(now=later, ahead=1, granularity="day") == []


def test_switching_to_monthly_partitions_starts_where_the_daily_ones_end():
    needs_postgresql()
    first_of_month = datetime(MIDNIGHT.year + 1, 3, 1, tzinfo=UTC)
    audit_partitions_ensure(now=first_of_month, ahead=1, granularity="day")

    created = audit_partitions_ensure(now=first_of_month, ahead=0, granularity="month")

    assert created == [
        partition_name(first_of_month + timedelta(days=2), datetime(first_of_month.year, 4, 1, tzinfo=UTC))
    ]


def test_an_export_reads_only_the_partitions_of_its_range():
    needs_postgresql()
    audit_partitions_ensure(now=MIDNIGHT, ahead=2, granularity="day")

    plan = invocations_between(since=MIDNIGHT + timedelta(days=1), until=MIDNIGHT + timedelta(days=2)).explain()

    assert partition_name(MIDNIGHT + timedelta(days=1), MIDNIGHT + timedelta(days=2)) in plan
    assert partition_name(MIDNIGHT, MIDNIGHT + timedelta(days=1)) not in plan
    assert partition_name(MIDNIGHT + timedelta(days=2), MIDNIGHT + timedelta(days=3)) not in plan
    assert DEFAULT_PARTITION not in plan


def test_prune_drops_whole_partitions_keeps_the_idempotency_window_and_deletes_the_rest_row_by_row():
    needs_postgresql()
    tenant = TenantFactory(slug="acme")
    start = MIDNIGHT + timedelta(days=60)
    audit_partitions_ensure(now=start, ahead=3, granularity="day")
    now = start + timedelta(days=3, hours=12)

    def row(started_at, tool_call_id, **fields):
        ToolCallClaim.objects.create(tenant=tenant, tool_call_id=tool_call_id, claimed_at=started_at)
        return ToolInvocation.objects.create(
            tenant=tenant,
            tool_call_id=tool_call_id,
            tool_id="t",
            decision="allow",
            executed=True,
            started_at=started_at,
            **fields,
        )

    for n in range(3):
        row(start + timedelta(hours=n), f"day0-{n}")
    pending = row(start + timedelta(hours=5), "stale-claim", state="pending", lease_expires_at=start)
    row(start + timedelta(days=1, hours=1), "day1")
    row(start + timedelta(days=2, hours=1), "day2-morning")
    evening = row(start + timedelta(days=2, hours=20), "day2-evening")

    with connection.cursor() as cursor:  # a prune runs in autocommit; the test's transaction defers FK checks
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    report = audit_prune(older_than_days=1, now=now)  # cutoff: day 2 at noon

    ours = tuple(name for name in report.partitions_dropped if name >= partition_name(start, start))
    assert ours == (
        partition_name(start, start + timedelta(days=1)),
        partition_name(start + timedelta(days=1), start + timedelta(days=2)),
    )
    assert (report.deleted, report.kept_in_window, report.partitions_busy) == (1, 1, ())
    assert report.claims_deleted == 5  # day0-0..2, day1, day2-morning; not the stale claim's
    assert set(ToolInvocation.objects.values_list("tool_call_id", flat=True)) == {"stale-claim", "day2-evening"}
    assert partition_of(pending.pk) == DEFAULT_PARTITION
    assert partition_of(evening.pk) == partition_name(start + timedelta(days=2), start + timedelta(days=3))
    assert set(ToolCallClaim.objects.values_list("tool_call_id", flat=True)) == {"stale-claim", "day2-evening"}
    assert {p.start for p in audit_partitions()} >= {start + timedelta(days=2), start + timedelta(days=3)}


def test_beat_makes_the_partitions_of_now_and_ahead_every_hour(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["audit-partitions"]
    assert entry["task"] == tasks.audit_partitions_ahead.name

    tasks.audit_partitions_ahead.apply().get()

    assert tasks.audit_partitions_ahead.apply().get() == []  # a second run finds them made
    if connection.vendor == "postgresql":
        start, end = period_of(timezone.now(), settings.TOOLGATE_AUDIT_PARTITION)
        assert any(p.start <= start and p.end >= end for p in audit_partitions())
