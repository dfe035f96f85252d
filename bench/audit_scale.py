"""The audit trail at N rows on PostgreSQL: export rate, and retention by partition.

Builds N audit rows (1,000,000 by default) spread evenly over 30 days, with
the daily partitions retention works on and one tool_call_id claim per row
(every row is an executed call, the claims table's worst case), then prints:

1. `audit export` of everything and of the last 2 days: rows, seconds, rows/s
   (and rows per CPU second of the exporting process, steadier on a busy
   machine than the wall clock), and how many partitions the 2-day export's plan reads (PostgreSQL prunes
   the rest by the WHERE on started_at);
2. the oldest day retired: its partition dropped (the figure that stays flat
   whatever a day holds), then its claims deleted (the part that still costs a
   row each), timed apart;
3. `audit prune` of the older half (14 more days): partitions dropped, the
   rest of the partition the cutoff falls in deleted row by row, claims.

    python -m bench.audit_scale [--rows N]

Needs PostgreSQL: DATABASE_URL (default a `toolgate_bench` database on
127.0.0.1, dropped and re-created each run). Prints figures; nothing passes or
fails. Wall-clock times on a shared machine are indicative: re-measure on a
quiet one before quoting them.
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import UTC, datetime, timedelta

import django

from bench.database import fresh_database, manage, production_environment

os.environ.update(production_environment("config.settings"))
os.environ["TOOLGATE_AUDIT_PARTITION"] = "day"
fresh_database(os.environ["DATABASE_URL"])
manage(dict(os.environ), "migrate", "--noinput")
django.setup()

from django.db import connection  # noqa: E402

from policies_app.services import tenant_create  # noqa: E402
from tools_app.audit import audit_export, audit_prune, invocations_between  # noqa: E402
from tools_app.partitions import (  # noqa: E402
    CLAIMS,
    TABLE,
    audit_claims_prune,
    audit_partitions,
    audit_partitions_ensure,
    audit_partitions_retire,
)

DAYS = 30


class Discard:
    """A file that only counts what is written: the export's own cost, not a disk's."""

    def __init__(self) -> None:
        self.bytes = 0

    def write(self, text: str) -> int:
        self.bytes += len(text)
        return len(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="audit rows to build (default 1,000,000)")
    options = parser.parse_args()
    first_day = datetime.combine(datetime.now(UTC).date() - timedelta(days=DAYS), datetime.min.time(), tzinfo=UTC)
    end = first_day + timedelta(days=DAYS)
    build(options.rows, first_day)
    export(first_day, end)
    retire_one_day(first_day)
    prune_half(end)


def build(rows: int, first_day: datetime) -> None:
    tenant = tenant_create(slug="bench")
    audit_partitions_ensure(now=first_day, ahead=DAYS + 1, granularity="day")
    began = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            f'INSERT INTO "{TABLE}" (state, tool_call_id, run_id, tool_id, connection_id, grant_id, subject_id, '
            "authz_reason, rule_id, rule_action, connection_choice, approved_by, decision, ok, executed, error_code, "
            "safe_message, args_sha256, result, result_bytes, started_at, ended_at, duration_ms, attempt, tenant_id) "
            "SELECT 'done', 'call_' || g, 'run_' || (g / 10), 'core__get_current_time', "
            "'', '', '', '', '', '', '', '', 'allow', true, true, '', '', repeat('a', 64), "
            "jsonb_build_object('iso', 'x', 'epoch_ms', g), 40, "
            "ts, ts + interval '5 ms', 5, 0, %s "
            "FROM (SELECT g, %s + (g - 1) * %s * interval '1 second' AS ts FROM generate_series(1, %s) g) s",
            [tenant.pk, first_day, DAYS * 86400 / rows, rows],
        )
        cursor.execute(
            f'INSERT INTO "{CLAIMS}" (tenant_id, tool_call_id, claimed_at) '
            f'SELECT tenant_id, tool_call_id, started_at FROM "{TABLE}"'
        )
        cursor.execute(f'ANALYZE "{TABLE}"')
        cursor.execute(f'ANALYZE "{CLAIMS}"')
    print(f"built {rows:,} audit rows and claims over {DAYS} daily partitions in {time.perf_counter() - began:.1f} s")


def export(first_day: datetime, end: datetime) -> None:
    for label, since in (("all", first_day), ("last 2 days", end - timedelta(days=2))):
        sink = Discard()
        began, cpu = time.perf_counter(), time.process_time()
        written = audit_export(out=sink, export_format="jsonl", since=since, until=end)  # type: ignore[arg-type]
        took, cpu = time.perf_counter() - began, time.process_time() - cpu
        print(
            f"export {label}: {written:,} rows in {took:.2f} s ({written / took:,.0f} rows/s); "
            f"the exporting process's own CPU {cpu:.2f} s ({written / cpu:,.0f} rows per CPU second)"
        )
    plan = invocations_between(since=end - timedelta(days=2), until=end).explain()
    read = sorted({word for word in plan.split() if word.startswith(f"{TABLE}_p")})
    print(f"  the 2-day export's plan reads {len(read)} of {len(audit_partitions())} partitions: {', '.join(read)}")


def retire_one_day(first_day: datetime) -> None:
    cutoff = first_day + timedelta(days=1)
    began = time.perf_counter()
    report = audit_partitions_retire(cutoff=cutoff, now=datetime.now(UTC))
    dropped = time.perf_counter() - began
    began = time.perf_counter()
    claims = audit_claims_prune(cutoff=cutoff, now=datetime.now(UTC))
    claimed = time.perf_counter() - began
    print(
        f"retire one day: partition {', '.join(report.dropped)} (about {report.rows_dropped:,} rows) "
        f"dropped in {dropped * 1000:.0f} ms; its {claims:,} claims deleted in {claimed:.2f} s"
    )


def prune_half(end: datetime) -> None:
    began = time.perf_counter()
    report = audit_prune(older_than_days=DAYS // 2, now=end + timedelta(hours=12))
    took = time.perf_counter() - began
    print(
        f"prune the older half: {len(report.partitions_dropped)} partitions dropped (about {report.rows_dropped:,} "
        f"rows), {report.deleted:,} rows of the partly covered partition deleted in {report.batches} batches, "
        f"{report.claims_deleted:,} claims deleted; {took:.2f} s in all"
    )


if __name__ == "__main__":
    main()
