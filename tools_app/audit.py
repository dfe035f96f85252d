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
from functools import cache
from typing import Any, TextIO

from django.db import IntegrityError, connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from runner.types import Decision, ToolInvocationContext, ToolInvocationRecord
from tools_app.audit_kinds import audit_kinds
from tools_app.models import ToolCallClaim, ToolInvocation
from tools_app.partitions import TABLE as _TABLE
from tools_app.partitions import audit_claims_prune, audit_is_partitioned, audit_partitions_retire
from tools_app.rows import RowInserter, write_ahead

_invocations = RowInserter(ToolInvocation)
_CLAIMS = ToolCallClaim._meta.db_table

LEASE_LOST_MESSAGE = "this attempt's claim expired and a repeat took the call over; its outcome is not replayed"


def invocation_record(record: ToolInvocationRecord) -> None:
    """Write the audit row of one call, finishing its idempotency claim when it has one.

    A claim taken over by a repeat (this process outlived its lease) is not
    overwritten: the late outcome gets a row of its own, outside the replayed one.
    A claim refused before its tool ran lets its `tool_call_id` go.
    """
    ctx = record.context
    fields = {
        "tool_id": record.tool_id,
        "decision": record.decision.value,
        "ok": record.ok,
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
        "duration_ms": record.duration_ms,
        "lease_expires_at": None,
        "authz_reason": record.authz_reason or "",
        "rule_id": record.rule_id or "",
        "rule_action": record.rule_action or "",
        "guardrail": dict(record.guardrail) if record.guardrail is not None else None,
        "connection_choice": record.connection_choice.value if record.connection_choice else "",
        "approved_by": (record.approved_by or "")[:150],
    }
    if record.audit_ref is not None:
        if _claim_finished(ctx, record.audit_ref, fields):
            return
        fields.update(executed=False, safe_message=LEASE_LOST_MESSAGE)
    if fields["executed"] and audit_is_partitioned():
        _insert_with_claim(ctx, fields)
    else:
        _invocations.insert(**_context_fields(ctx), **fields)


def _claim_finished(ctx: ToolInvocationContext, ref: str, fields: dict[str, Any]) -> bool:
    """Write the outcome onto this attempt's pending row; False if a repeat took the claim over meanwhile.

    `started_at` in the filter lets PostgreSQL touch the one partition holding the row.
    """
    pk, attempt, started_at = parse_claim_ref(ref)
    pending = ToolInvocation.objects.filter(
        pk=pk, started_at=started_at, attempt=attempt, state=ToolInvocation.State.PENDING
    )
    if fields["executed"] or not audit_is_partitioned():
        return bool(pending.update(**fields))
    with transaction.atomic():  # the row and its claim let the id go together
        finished = pending.update(**fields)
        if finished:
            ToolCallClaim.objects.filter(tenant_id=ctx.tenant_id, tool_call_id=ctx.tool_call_id).delete()
    return bool(finished)


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
    """What the audit sink needs to finish exactly this attempt of a claim (and find its partition)."""
    return f"{row.pk}:{row.attempt}:{row.started_at.isoformat()}"


def parse_claim_ref(ref: str) -> tuple[int, int, datetime]:
    pk, attempt, started_at = ref.split(":", 2)
    return int(pk), int(attempt), datetime.fromisoformat(started_at)


def invocation_claim(
    *, ctx: ToolInvocationContext, tool_id: str, args_sha256: str | None, lease_s: float
) -> ToolInvocation | None:
    """Reserve ctx.tool_call_id in its tenant with a pending row leased for `lease_s`; None if another row holds it.

    A unique key decides races: of concurrent identical calls exactly one
    inserts, the others wait for its outcome. On SQLite that key is the audit
    table's partial unique index; on PostgreSQL it is the claims table, written
    in the same statement as the row, so the claim stays one round trip.
    """
    now = timezone.now()
    values = {
        **_context_fields(ctx),
        "tool_id": tool_id,
        "decision": Decision.NOT_DECIDED.value,
        "executed": True,
        "state": ToolInvocation.State.PENDING,
        "args_sha256": args_sha256 or "",
        "started_at": now,
        "lease_expires_at": now + timedelta(seconds=lease_s),
    }
    if audit_is_partitioned():
        columns, params = _invocations.prepared(**values)
        with _savepoint_if_in_transaction():
            inserted = _claimed(_claimed_insert_sql(columns), [ctx.tenant_id, ctx.tool_call_id, now, *params])
        return None if inserted is None else ToolInvocation(id=inserted, **values)
    try:
        with _savepoint_if_in_transaction():
            return ToolInvocation.objects.create(**values)
    except IntegrityError:
        return None


def _insert_with_claim(ctx: ToolInvocationContext, fields: dict[str, Any]) -> None:
    """An executed row that was not claimed first (a generated id) claims its id in the same statement.

    Its row is written whatever the claim finds: the audit never loses a row.
    """
    columns, params = _invocations.prepared(**_context_fields(ctx), **fields)
    write_ahead(_claiming_insert_sql(columns), [ctx.tenant_id, ctx.tool_call_id, fields["started_at"], *params])


def _claim_cte() -> str:
    return (
        f'WITH claim AS (INSERT INTO "{_CLAIMS}" (tenant_id, tool_call_id, claimed_at) VALUES (%s, %s, %s) '  # noqa: S608 - model table names; values are parameters
        "ON CONFLICT DO NOTHING RETURNING 1) "
    )


@cache
def _claimed_insert_sql(columns: tuple[str, ...]) -> str:
    """The row is inserted only if its claim was: one statement, one round trip, atomic in autocommit."""
    names = ", ".join(f'"{column}"' for column in columns)
    values = ", ".join("%s" for _ in columns)
    return f'{_claim_cte()}INSERT INTO "{_TABLE}" ({names}) SELECT {values} FROM claim RETURNING "id"'  # noqa: S608


@cache
def _claiming_insert_sql(columns: tuple[str, ...]) -> str:
    names = ", ".join(f'"{column}"' for column in columns)
    values = ", ".join("%s" for _ in columns)
    return f'{_claim_cte()}INSERT INTO "{_TABLE}" ({names}) VALUES ({values})'  # noqa: S608


def _claimed(sql: str, params: list[Any]) -> int | None:
    """The id of the row the claim inserted, or None if another row holds the claim.

    Toolgate's PostgreSQL backend (config/postgresql) prepares the statement; another backend runs it plainly.
    """
    execute_prepared = getattr(connection, "execute_prepared", None)
    if execute_prepared is not None:
        rows = execute_prepared(sql, params)
        return int(rows[0][0]) if rows else None
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        inserted = cursor.fetchone()
    return None if inserted is None else inserted[0]


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
    The row restarts now (and may move to today's partition); its claim moves
    with it, so retention never lets the id go before the row.
    """
    now = timezone.now()
    lease_expires_at = now + timedelta(seconds=lease_s)
    with transaction.atomic():
        taken = ToolInvocation.objects.filter(
            pk=row.pk, attempt=row.attempt, state=ToolInvocation.State.PENDING, lease_expires_at__lte=now
        ).update(attempt=row.attempt + 1, started_at=now, lease_expires_at=lease_expires_at)
        if taken and audit_is_partitioned():
            ToolCallClaim.objects.filter(tenant_id=row.tenant_id, tool_call_id=row.tool_call_id).update(claimed_at=now)
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
    "connection_choice",
    "subject_id",
    "approved_by",
    "authz_reason",
    "rule_id",
    "rule_action",
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


INVOCATIONS = "invocations"  # the default kind: tool calls, as the export always wrote them


def export_kinds() -> tuple[str, ...]:
    """What `audit export --kind` accepts: the invocations, then every installed trail (tools_app.audit_kinds)."""
    return (INVOCATIONS, *audit_kinds())


def audit_export(
    *,
    out: TextIO,
    export_format: str,
    since: datetime,
    until: datetime,
    tenant_slug: str | None = None,
    kind: str = INVOCATIONS,
) -> int:
    """Write the rows of one kind as JSON lines or CSV (with a header) to `out`; returns how many were written.

    Each kind has its own columns, so one file never mixes them: a SIEM reads one shape per export.
    """
    written = 0
    if kind == INVOCATIONS:
        fields, rows = EXPORT_FIELDS, audit_rows(since=since, until=until, tenant_slug=tenant_slug)
    else:
        trail = audit_kinds()[kind]
        fields, rows = trail.fields, trail.rows(since=since, until=until, tenant_slug=tenant_slug)
    if export_format == "csv":
        writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
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
class TrailPruned:
    """What a prune deleted of one installed trail (tools_app.audit_kinds)."""

    noun: str
    deleted: int
    batches: int


@dataclass(frozen=True, slots=True)
class PruneReport:
    cutoff: datetime
    deleted: int  # rows deleted one by one (SQLite; on PostgreSQL the rest of a partly covered partition)
    batches: int
    kept_in_window: int  # older than the cutoff but pending or under a live lease
    partitions_dropped: tuple[str, ...] = ()  # PostgreSQL: whole partitions retired at once
    rows_dropped: int = 0  # their rows, as the planner counts them (no scan)
    claims_deleted: int = 0  # PostgreSQL: the tool_call_id claims of the retired rows
    partitions_busy: tuple[str, ...] = ()  # a lock kept these from retiring this run; the next run will
    trails: tuple[TrailPruned, ...] = ()  # the installed trails (tools_app.audit_kinds), same cutoff


def _outside_the_idempotency_window(now: datetime) -> Q:
    return Q(state=ToolInvocation.State.DONE) & (Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now))


def audit_prune(*, older_than_days: int, now: datetime | None = None, batch_size: int = PRUNE_BATCH) -> PruneReport:
    """Retire audit rows started more than `older_than_days` ago.

    On PostgreSQL every partition wholly older than the cutoff is dropped, then
    the rest (the part of the partition the cutoff falls in, stray rows of the
    default partition) is deleted batch by batch, then the retired rows' claims.
    On SQLite everything goes batch by batch. Then every installed trail
    (tools_app.audit_kinds: the gateway's feature reads) prunes its rows older
    than the same cutoff, batch by batch.
    """
    if older_than_days < MIN_RETENTION_DAYS:
        raise ValueError(f"audit rows are kept at least {MIN_RETENTION_DAYS} day")
    now = now or timezone.now()
    cutoff = now - timedelta(days=older_than_days)
    retired = audit_partitions_retire(cutoff=cutoff, now=now) if audit_is_partitioned() else None
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
    trails = tuple(
        TrailPruned(trail.noun, *trail.prune(cutoff=cutoff, batch_size=batch_size)) for trail in audit_kinds().values()
    )
    if retired is None:
        return PruneReport(cutoff=cutoff, deleted=deleted, batches=batches, kept_in_window=kept, trails=trails)
    # A claim goes only once its row has: not past a partition a lock kept.
    claims_cutoff = min([cutoff, *(partition.start for partition in retired.busy)])
    return PruneReport(
        cutoff=cutoff,
        deleted=deleted,
        batches=batches,
        kept_in_window=kept,
        partitions_dropped=retired.dropped,
        rows_dropped=retired.rows_dropped,
        claims_deleted=audit_claims_prune(cutoff=claims_cutoff, now=now),
        partitions_busy=tuple(partition.name for partition in retired.busy),
        trails=trails,
    )
