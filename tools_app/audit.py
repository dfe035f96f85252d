"""The audit trail leaving Toolgate: export for a SIEM, and retention.

Export streams rows in (started_at, id) order through the database's cursor
(a server-side cursor on PostgreSQL) and writes each as it comes: memory
stays constant whatever the range. The redacted result is not exported:
a SIEM needs who called what, when, with which outcome, not the data the
tool returned (it stays readable in Toolgate for the retention period).

Pruning deletes finished rows older than the cutoff in small batches (each
its own transaction, so the table is never locked for long and a stopped
prune has kept what it did). It never deletes a row of the idempotency
window: a `pending` claim, or any row whose claim lease has not run out, is
kept whatever its age, so a running call or a repeat waiting for it never
loses the row it rests on.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TextIO

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from tools_app.models import ToolInvocation

EXPORT_FIELDS = (
    "id",
    "tenant",
    "service_account_id",
    "tool_call_id",
    "run_id",
    "tool_id",
    "connection_id",
    "grant_id",
    "subject_id",
    "authz_reason",
    "state",
    "decision",
    "ok",
    "executed",
    "error_code",
    "safe_message",
    "args_sha256",
    "result_bytes",
    "started_at",
    "ended_at",
    "duration_ms",
    "attempt",
)
SOURCE_COLUMNS = {"tenant": "tenant__slug"}  # exported name → column read
EXPORT_CHUNK = 2000
PRUNE_BATCH = 2000
MIN_RETENTION_DAYS = 1


def invocations_between(*, since: datetime, until: datetime, tenant_slug: str | None = None) -> QuerySet:
    """Audit rows started in [since, until), oldest first, as tuples of EXPORT_FIELDS (no model instances)."""
    rows = ToolInvocation.objects.filter(started_at__gte=since, started_at__lt=until)
    if tenant_slug:
        rows = rows.filter(tenant__slug=tenant_slug)
    columns = [SOURCE_COLUMNS.get(field, field) for field in EXPORT_FIELDS]
    return rows.order_by("started_at", "id").values_list(*columns)


def _plain(row: tuple[Any, ...]) -> dict[str, Any]:
    return {
        field: value.isoformat() if isinstance(value, datetime) else value
        for field, value in zip(EXPORT_FIELDS, row, strict=True)
    }


def audit_rows(*, since: datetime, until: datetime, tenant_slug: str | None = None) -> Iterator[dict[str, Any]]:
    for row in invocations_between(since=since, until=until, tenant_slug=tenant_slug).iterator(chunk_size=EXPORT_CHUNK):
        yield _plain(row)


def audit_export(
    *, out: TextIO, export_format: str, since: datetime, until: datetime, tenant_slug: str | None = None
) -> int:
    """Write the rows as JSON lines or CSV (with a header) to `out`; returns how many were written."""
    written = 0
    rows = audit_rows(since=since, until=until, tenant_slug=tenant_slug)
    if export_format == "csv":
        writer = csv.DictWriter(out, fieldnames=EXPORT_FIELDS, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow(row)
            written += 1
        return written
    for row in rows:
        out.write(json.dumps(row, separators=(",", ":"), ensure_ascii=False))
        out.write("\n")
        written += 1
    return written


@dataclass(frozen=True, slots=True)
class PruneReport:
    cutoff: datetime
    deleted: int
    batches: int
    kept_in_window: int  # older than the cutoff but pending or under a live lease


def _outside_the_idempotency_window(now: datetime) -> Q:
    return Q(state=ToolInvocation.State.DONE) & (Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now))


def audit_prune(*, older_than_days: int, now: datetime | None = None, batch_size: int = PRUNE_BATCH) -> PruneReport:
    """Delete finished audit rows started more than `older_than_days` ago, batch by batch."""
    if older_than_days < MIN_RETENTION_DAYS:
        raise ValueError(f"audit rows are kept at least {MIN_RETENTION_DAYS} day")
    now = now or timezone.now()
    cutoff = now - timedelta(days=older_than_days)
    old = ToolInvocation.objects.filter(started_at__lt=cutoff)
    deletable = old.filter(_outside_the_idempotency_window(now))
    deleted = batches = 0
    while True:
        # Walking the primary key finds the oldest rows first without an index on started_at.
        batch = list(deletable.order_by("pk").values_list("pk", flat=True)[:batch_size])
        if not batch:
            break
        with transaction.atomic():
            # Re-checked in the DELETE itself: a row claimed again since the SELECT stays.
            count, _ = deletable.filter(pk__in=batch).delete()
        deleted += count
        batches += 1
    kept = old.exclude(_outside_the_idempotency_window(now)).count()
    return PruneReport(cutoff=cutoff, deleted=deleted, batches=batches, kept_in_window=kept)
