"""The audit trail: its writes (each call's row and idempotency claim), export for a SIEM, and retention.

Writes: every call leaves one row (`invocation_record`). A call that carries
a `tool_call_id` first claims it with a pending row under a lease
(`invocation_claim`), which the outcome then finishes; a repeat whose
holder died takes the claim over (`invocation_take_over`). The runner reaches
these through tools_app/adapters.py.

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
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TextIO

from django.db import IntegrityError, connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from runner.types import Decision, ToolInvocationContext, ToolInvocationRecord
from tools_app.models import ToolInvocation
from tools_app.rows import RowInserter

_invocations = RowInserter(ToolInvocation)

LEASE_LOST_MESSAGE = "this attempt's claim expired and a repeat took the call over; its outcome is not replayed"


def invocation_record(record: ToolInvocationRecord) -> None:
    """Write the audit row of one call, finishing its idempotency claim when it has one.

    A claim taken over by a repeat (this process outlived its lease) is not
    overwritten: the late outcome gets a row of its own, outside the replayed one.
    """
    ctx = record.context
    if ctx is None or record.started_at is None or record.ended_at is None:
        raise ValueError("an audit record needs its context and both timestamps")
    fields = {
        "tool_id": record.tool_id,
        "decision": record.decision.value,
        "ok": bool(record.ok),
        "executed": record.executed,
        "state": ToolInvocation.State.DONE,
        "error_code": record.error_code.value if record.error_code else "",
        "safe_message": (record.safe_message or "")[:500],
        "args_sha256": record.args_sha256 or "",
        "result": record.value if record.ok else None,
        "content": list(record.content) if record.content is not None else None,
        "result_bytes": record.result_bytes,
        "started_at": record.started_at,
        "ended_at": record.ended_at,
        "duration_ms": record.duration_ms or 0,
        "lease_expires_at": None,
        "authz_reason": record.authz_reason or "",
    }
    if record.audit_ref is not None:
        pk, attempt = parse_claim_ref(record.audit_ref)
        finished = ToolInvocation.objects.filter(pk=pk, attempt=attempt, state=ToolInvocation.State.PENDING).update(
            **fields
        )
        if finished:
            return
        fields.update(executed=False, safe_message=LEASE_LOST_MESSAGE)
    _invocations.insert(**_context_fields(ctx), **fields)


def _context_fields(ctx: ToolInvocationContext) -> dict:
    return {
        "tenant_id": ctx.tenant_id,
        "service_account_id": ctx.actor_id,
        "tool_call_id": ctx.tool_call_id,
        "run_id": ctx.run_id,
        "connection_id": ctx.connection_id or "",
        "grant_id": ctx.grant_id or "",
        "subject_id": ctx.subject_id or "",
    }


def claim_ref(row: ToolInvocation) -> str:
    """What the audit sink needs to finish exactly this attempt of a claim."""
    return f"{row.pk}:{row.attempt}"


def parse_claim_ref(ref: str) -> tuple[int, int]:
    pk, _, attempt = ref.partition(":")
    return int(pk), int(attempt)


def invocation_claim(
    *, ctx: ToolInvocationContext, tool_id: str, args_sha256: str | None, lease_s: float
) -> ToolInvocation | None:
    """Reserve ctx.tool_call_id in its tenant with a pending row leased for `lease_s`; None if another row holds it.

    The partial unique index on executed rows decides races: of concurrent
    identical calls exactly one inserts, the others wait for its outcome.
    """
    now = timezone.now()
    try:
        with _savepoint_if_in_transaction():
            return ToolInvocation.objects.create(
                **_context_fields(ctx),
                tool_id=tool_id,
                decision=Decision.NOT_DECIDED.value,
                executed=True,
                state=ToolInvocation.State.PENDING,
                args_sha256=args_sha256 or "",
                started_at=now,
                lease_expires_at=now + timedelta(seconds=lease_s),
            )
    except IntegrityError:
        return None


def _savepoint_if_in_transaction() -> AbstractContextManager[object]:
    """A savepoint inside a transaction, so a duplicate leaves it usable; nothing in autocommit.

    In autocommit (a web request) the INSERT is its own transaction: one round
    trip instead of BEGIN, INSERT, COMMIT.
    """
    return transaction.atomic() if connection.in_atomic_block else nullcontext()


def invocation_take_over(*, row: ToolInvocation, lease_s: float) -> ToolInvocation | None:
    """Take over a pending claim whose lease has run out (its process died); None if someone else did.

    Compare-and-swap on `attempt`: of several repeats racing for one expired
    claim exactly one wins, and the dead attempt can no longer finish the row.
    """
    now = timezone.now()
    lease_expires_at = now + timedelta(seconds=lease_s)
    taken = ToolInvocation.objects.filter(
        pk=row.pk, attempt=row.attempt, state=ToolInvocation.State.PENDING, lease_expires_at__lte=now
    ).update(attempt=row.attempt + 1, started_at=now, lease_expires_at=lease_expires_at)
    if not taken:
        return None
    row.attempt, row.started_at, row.lease_expires_at = row.attempt + 1, now, lease_expires_at
    return row


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
