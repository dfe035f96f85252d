"""The feature reads' audit trail (`McpFeatureRead`): exported, pruned and listed like the tool calls.

tools_app's `manage.py audit` exports and prunes the invocations; it never imports the
gateway, so the gateway installs this trail there at startup (tools_app/audit_kinds.py):
`audit export --kind feature-reads` streams these rows, and every `audit prune` and
retention run deletes those older than the same cutoff. The portal's activity page lists
a tenant's rows through `feature_reads_seen_by`.

Export streams (started_at, id) order through the database cursor, as tuples, so memory
stays constant whatever the range. Prune deletes one batch per statement (a DELETE whose
IN names the batch's ids by a LIMITed subquery): each batch its own short transaction, never
a query per row.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet

from gateway.upstream.models import McpFeatureRead
from tools_app.audit_kinds import AuditKind

KIND_NAME = "feature-reads"
EXPORT_FIELDS = (
    "id",
    "tenant",
    "service_account_id",
    "subject_id",
    "kind",
    "ident",
    "name",
    "ok",
    "error_code",
    "safe_message",
    "args_sha256",
    "result_bytes",
    "started_at",
    "ended_at",
    "duration_ms",
)
SOURCE_COLUMNS = {"tenant": "tenant__slug"}  # exported name → column read
EXPORT_CHUNK = 2000


def feature_reads_between(*, since: datetime, until: datetime, tenant_slug: str | None = None) -> QuerySet:
    """Reads started in [since, until), oldest first, as tuples of EXPORT_FIELDS (no model instances)."""
    rows = McpFeatureRead.objects.filter(started_at__gte=since, started_at__lt=until)
    if tenant_slug:
        rows = rows.filter(tenant__slug=tenant_slug)
    columns = [SOURCE_COLUMNS.get(field, field) for field in EXPORT_FIELDS]
    return rows.order_by("started_at", "id").values_list(*columns)


def feature_read_rows(*, since: datetime, until: datetime, tenant_slug: str | None = None) -> Iterator[dict[str, Any]]:
    rows = feature_reads_between(since=since, until=until, tenant_slug=tenant_slug)
    for row in rows.iterator(chunk_size=EXPORT_CHUNK):
        yield {
            field: value.isoformat() if isinstance(value, datetime) else value
            for field, value in zip(EXPORT_FIELDS, row, strict=True)
        }


def feature_reads_prune(*, cutoff: datetime, batch_size: int) -> tuple[int, int]:
    """Delete reads started before `cutoff`, `batch_size` at a time; returns (rows deleted, batches).

    A read has no idempotency window to respect (nothing replays it), so age alone decides.
    Walking the primary key finds the oldest rows first without an index on started_at.
    """
    old = McpFeatureRead.objects.filter(started_at__lt=cutoff)
    deleted = batches = 0
    while True:
        count, _ = McpFeatureRead.objects.filter(pk__in=old.order_by("pk").values("pk")[:batch_size]).delete()
        if not count:
            return deleted, batches
        deleted += count
        batches += 1


FEATURE_READS = AuditKind(
    name=KIND_NAME, noun="feature reads", fields=EXPORT_FIELDS, rows=feature_read_rows, prune=feature_reads_prune
)


def feature_reads_seen_by(
    *, tenant_id: int, person: str | None, ok: bool | None = None, subject_id: str = ""
) -> QuerySet[McpFeatureRead]:
    """The tenant's reads a viewer may see, newest first: `person` None for an owner (every row).

    A plain member sees, as with calls, the reads made for nobody and those made on their own
    behalf (`person` is their subject id); a read names no connection, so no other row is theirs.
    """
    rows = McpFeatureRead.objects.filter(tenant_id=tenant_id).select_related("service_account")
    if person is not None:
        rows = rows.filter(Q(subject_id="") | Q(subject_id=person))
    if ok is not None:
        rows = rows.filter(ok=ok)
    if subject_id:
        rows = rows.filter(subject_id=subject_id)
    return rows.order_by("-started_at", "-id")
