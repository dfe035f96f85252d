"""`manage.py audit export|prune`: the audit trail for a SIEM, and its retention.

    audit export --since 2026-11-01 --until 2026-11-02 [--tenant acme] [--format jsonl|csv] [--output FILE]
                 [--kind invocations|feature-reads]
    audit prune --older-than 90

`--kind` picks the trail: the tool calls (the default, unchanged) or one installed
above tools_app (tools_app/audit_kinds.py: the gateway's resource reads, prompt fetches
and completions). Prune retires every trail under the same cutoff.

Export writes to stdout unless `--output` names a file; it streams, so any
range fits in constant memory. Prune reports what it deleted and what it
kept because the row is still inside the idempotency window; on PostgreSQL it
drops whole partitions first (tools_app/partitions.py).
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from tools_app.audit import INVOCATIONS, MIN_RETENTION_DAYS, audit_export, audit_prune, export_kinds


def _instant(value: str) -> datetime:
    """An ISO 8601 date (midnight UTC) or date-time (UTC when it names no offset)."""
    parsed = parse_datetime(value)
    if parsed is None:
        day = parse_date(value)
        if day is None:
            raise ValueError(value)
        parsed = datetime(day.year, day.month, day.day)
    return parsed if timezone.is_aware(parsed) else parsed.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = "Export audit rows (JSON lines or CSV), or prune old ones outside the idempotency window."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        export = actions.add_parser("export", help="stream audit rows started in [--since, --until)")
        export.add_argument("--since", required=True, help="ISO 8601 date or date-time (UTC unless it says)")
        export.add_argument("--until", help="ISO 8601 date or date-time, exclusive (default: now)")
        export.add_argument("--tenant", metavar="SLUG", help="only this tenant's rows")
        export.add_argument("--format", dest="export_format", choices=("jsonl", "csv"), default="jsonl")
        export.add_argument("--output", metavar="FILE", help="write here instead of stdout")
        export.add_argument(
            "--kind", choices=export_kinds(), default=INVOCATIONS, help="which trail (default: the tool calls)"
        )
        prune = actions.add_parser("prune", help="delete finished rows older than --older-than days, in batches")
        prune.add_argument("--older-than", dest="older_than", type=int, required=True, metavar="DAYS")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "export":
            self._export(options)
        else:
            self._prune(options["older_than"])

    def _export(self, options: dict[str, Any]) -> None:
        try:
            since = _instant(options["since"])
            until = _instant(options["until"]) if options["until"] else timezone.now()
        except ValueError as exc:
            raise CommandError(f"not an ISO 8601 date or date-time: {exc}") from None
        if until <= since:
            raise CommandError("--until must come after --since")
        arguments = {
            "export_format": options["export_format"],
            "since": since,
            "until": until,
            "tenant_slug": options["tenant"],
            "kind": options["kind"],
        }
        if options["output"]:
            with open(options["output"], "w", encoding="utf-8", newline="") as out:
                written = audit_export(out=out, **arguments)
        else:
            written = audit_export(out=sys.stdout, **arguments)
        noun = "rows" if options["kind"] == INVOCATIONS else f"{options['kind']} rows"
        self.stderr.write(f"audit export: {written} {noun}")

    def _prune(self, older_than: int) -> None:
        if older_than < MIN_RETENTION_DAYS:
            raise CommandError(f"--older-than must be at least {MIN_RETENTION_DAYS} day")
        report = audit_prune(older_than_days=older_than)
        self.stdout.write(
            f"audit prune: {report.deleted} rows started before {report.cutoff.isoformat()} deleted "
            f"in {report.batches} batches; {report.kept_in_window} kept (pending or claim lease live)"
        )
        for trail in report.trails:
            self.stdout.write(f"audit prune: {trail.deleted} {trail.noun} deleted in {trail.batches} batches")
        if report.partitions_dropped or report.partitions_busy or report.claims_deleted:
            self.stdout.write(
                f"audit prune: {len(report.partitions_dropped)} partitions dropped "
                f"(about {report.rows_dropped} rows), {report.claims_deleted} claims deleted"
                + (
                    f"; busy, left for the next run: {', '.join(report.partitions_busy)}"
                    if report.partitions_busy
                    else ""
                )
            )
