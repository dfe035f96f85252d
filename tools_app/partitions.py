"""The audit table's partitions on PostgreSQL: made ahead of the rows, dropped whole at retention.

On PostgreSQL `tools_app_toolinvocation` is partitioned by RANGE on
`started_at` (migration 0009), one partition per UTC day or month
(settings.TOOLGATE_AUDIT_PARTITION). Retiring a day is then a DROP TABLE of
its partition, which takes the same few milliseconds at a thousand rows or
forty million, instead of a DELETE per row plus the vacuum and WAL behind it.

Partitions are plain DDL through the connection: django-postgres-extra has
partition management but needs its own database backend, which the embedded
SQLite default cannot use (see docs/performance.md, "The audit trail at scale").

- A partition is named by the range it holds (`<table>_p20261126_20261127`),
  so its name says what a DROP removes; bounds are read back from the catalog,
  never parsed from names, and a range is only ever created where no partition
  is yet: changing `day` to `month` later makes the next partitions start where
  the existing ones end.
- A DEFAULT partition takes rows no range covers (a clock far off, a beat that
  never ran), so an audit write never fails for want of a partition. Creating a
  range moves the default partition's rows of that range into it first.
- Retiring a partition keeps the rows of the idempotency window (a pending
  claim, a live lease; see tools_app/audit.py): the partition is detached, those
  few rows go back through the parent (into the default partition), and the rest
  goes with the table. Each partition is retired in its own short transaction
  under a lock timeout, so a long export holding the table makes retention wait
  for the next run instead of stalling every audit write behind its lock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.utils import timezone

from tools_app.models import ToolCallClaim, ToolInvocation

TABLE = ToolInvocation._meta.db_table
CLAIMS = ToolCallClaim._meta.db_table
CLAIMS_PRUNE_BATCH = 10_000
DEFAULT_PARTITION = f"{TABLE}_default"
GRANULARITIES = ("day", "month")
LOCK_TIMEOUT = "5s"
LOCK_NOT_AVAILABLE = "55P03"  # the SQLSTATE of a lock_timeout
_BOUNDS = re.compile(r"FROM \('([^']+)'\) TO \('([^']+)'\)")
# The rows retention keeps whatever their age (tools_app/audit.py), written so that the partial
# index `toolinv_in_window` answers it: its predicate is the first half of this one.
IN_WINDOW_SQL = "(state = 'pending' OR lease_expires_at IS NOT NULL) AND NOT (state = 'done' AND lease_expires_at < %s)"


@dataclass(frozen=True, slots=True)
class Partition:
    name: str
    start: datetime  # inclusive
    end: datetime  # exclusive


def audit_is_partitioned() -> bool:
    """The audit table is partitioned wherever the database can (PostgreSQL); SQLite keeps one table."""
    return connection.vendor == "postgresql"


def period_of(instant: datetime, granularity: str) -> tuple[datetime, datetime]:
    """The UTC day or month holding `instant`, as [start, end)."""
    if granularity not in GRANULARITIES:
        raise ValueError(f"partition granularity must be one of {GRANULARITIES}")
    moment = instant.astimezone(UTC)
    if granularity == "day":
        start = datetime(moment.year, moment.month, moment.day, tzinfo=UTC)
        return start, start + timedelta(days=1)
    start = datetime(moment.year, moment.month, 1, tzinfo=UTC)
    end = datetime(moment.year + moment.month // 12, moment.month % 12 + 1, 1, tzinfo=UTC)
    return start, end


def partition_name(start: datetime, end: datetime) -> str:
    return f"{TABLE}_p{start:%Y%m%d}_{end:%Y%m%d}"


def audit_partitions() -> list[Partition]:
    """The range partitions of the audit table, oldest first (the default partition is not one)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass",
            [TABLE],
        )
        found = cursor.fetchall()
    partitions = []
    for name, bound in found:
        match = _BOUNDS.search(bound)
        if match is not None:
            start, end = (datetime.fromisoformat(value).astimezone(UTC) for value in match.groups())
            partitions.append(Partition(name=name, start=start, end=end))
    return sorted(partitions, key=lambda partition: partition.start)


def _gaps(start: datetime, end: datetime, taken: Iterable[Partition]) -> list[tuple[datetime, datetime]]:
    """The parts of [start, end) no existing partition covers."""
    gaps, cursor_at = [], start
    for partition in sorted(taken, key=lambda p: p.start):
        if partition.end <= cursor_at or partition.start >= end:
            continue
        if partition.start > cursor_at:
            gaps.append((cursor_at, partition.start))
        cursor_at = max(cursor_at, partition.end)
    if cursor_at < end:
        gaps.append((cursor_at, end))
    return gaps


def audit_partitions_ensure(
    *, now: datetime | None = None, ahead: int | None = None, granularity: str | None = None
) -> list[str]:
    """Make sure the current period and `ahead` more have partitions; returns the names created.

    Idempotent: a second run creates nothing. A no-op where the table is not partitioned.
    """
    if not audit_is_partitioned():
        return []
    now = now or timezone.now()
    ahead = settings.TOOLGATE_AUDIT_PARTITIONS_AHEAD if ahead is None else ahead
    granularity = granularity or settings.TOOLGATE_AUDIT_PARTITION
    periods, (start, end) = [], period_of(now, granularity)
    for _ in range(ahead + 1):
        periods.append((start, end))
        start, end = period_of(end, granularity)
    created = []
    for period_start, period_end in periods:
        for gap_start, gap_end in _gaps(period_start, period_end, audit_partitions()):
            created.append(_create(gap_start, gap_end))
    return created


def _create(start: datetime, end: datetime) -> str:
    """One range partition; rows of its range already in the default partition move into it first."""
    name = partition_name(start, end)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        cursor.execute(
            f'SELECT EXISTS (SELECT 1 FROM "{DEFAULT_PARTITION}" WHERE started_at >= %s AND started_at < %s)',
            [start, end],
        )
        (stranded,) = cursor.fetchone()
        if not stranded:
            cursor.execute(f'CREATE TABLE "{name}" PARTITION OF "{TABLE}" FOR VALUES FROM (%s) TO (%s)', [start, end])
            return name
        moving = f"moving_{name}"  # one per range: an outer transaction may move several before it commits
        cursor.execute(f'CREATE TEMPORARY TABLE "{moving}" (LIKE "{TABLE}") ON COMMIT DROP')
        cursor.execute(
            f'WITH moved AS (DELETE FROM "{DEFAULT_PARTITION}" WHERE started_at >= %s AND started_at < %s '
            f'RETURNING *) INSERT INTO "{moving}" SELECT * FROM moved',
            [start, end],
        )
        cursor.execute(f'CREATE TABLE "{name}" PARTITION OF "{TABLE}" FOR VALUES FROM (%s) TO (%s)', [start, end])
        cursor.execute(f'INSERT INTO "{TABLE}" SELECT * FROM "{moving}"')
    return name


@dataclass(frozen=True, slots=True)
class RetireReport:
    dropped: tuple[str, ...]
    rows_dropped: int  # the planner's count of the dropped partitions' rows (pg_class.reltuples): no scan
    kept_in_window: int  # rows of dropped partitions kept (moved to the default partition)
    busy: tuple[Partition, ...]  # partitions a lock kept from retiring this run


def audit_partitions_retire(*, cutoff: datetime, now: datetime) -> RetireReport:
    """Drop every partition wholly older than `cutoff`, keeping its rows of the idempotency window."""
    dropped, busy, rows, kept = [], [], 0, 0
    for partition in audit_partitions():
        if partition.end > cutoff:
            break
        try:
            estimate, moved = _retire(partition, now)
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                raise
            busy.append(partition)  # someone holds the table past the lock timeout: the next run retires it
            continue
        dropped.append(partition.name)
        rows, kept = rows + estimate, kept + moved
    return RetireReport(dropped=tuple(dropped), rows_dropped=rows, kept_in_window=kept, busy=tuple(busy))


def _retire(partition: Partition, now: datetime) -> tuple[int, int]:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        cursor.execute("SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = %s::regclass", [partition.name])
        (estimate,) = cursor.fetchone()
        cursor.execute(f'SELECT count(*) FROM "{partition.name}" WHERE {IN_WINDOW_SQL}', [now])
        (in_window,) = cursor.fetchone()
        if in_window:
            cursor.execute(f'ALTER TABLE "{TABLE}" DETACH PARTITION "{partition.name}"')
            cursor.execute(f'INSERT INTO "{TABLE}" SELECT * FROM "{partition.name}" WHERE {IN_WINDOW_SQL}', [now])
        cursor.execute(f'DROP TABLE "{partition.name}"')
    return max(estimate - in_window, 0), in_window


def audit_claims_prune(*, cutoff: datetime, now: datetime, batch_size: int = CLAIMS_PRUNE_BATCH) -> int:
    """Delete the claims older than `cutoff`, except those of rows kept in the idempotency window.

    The one part of retention that still costs a row each: claims are narrow
    (tenant, id, time) and indexed by time, so this is a fraction of what
    deleting the audit rows cost. Batches of their own, like the row prune.
    """
    deleted = 0
    statement = (
        f'DELETE FROM "{CLAIMS}" WHERE ctid = ANY(ARRAY(SELECT c.ctid FROM "{CLAIMS}" c WHERE c.claimed_at < %s '
        f'AND NOT EXISTS (SELECT 1 FROM "{TABLE}" t WHERE t.tenant_id = c.tenant_id '
        f"AND t.tool_call_id = c.tool_call_id AND t.executed AND {IN_WINDOW_SQL}) LIMIT %s))"
    )
    while True:
        with connection.cursor() as cursor:
            cursor.execute(statement, [cutoff, now, batch_size])
            count = cursor.rowcount
        deleted += count
        if count < batch_size:
            return deleted
