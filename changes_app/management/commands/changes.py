"""manage.py changes export --since <ISO date or date-time>

Writes the change log's entries at or after that moment to stdout as JSON
lines, oldest first: one object per governance write, ready for a SIEM or
`jq`. A date alone means its midnight; a time without an offset is read in
TIME_ZONE (UTC unless configured).
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from changes_app.selectors import change_as_dict, changes_since


def moment(value: str) -> datetime:
    """An ISO 8601 date or date-time, made aware in the current time zone when it has no offset."""
    try:
        parsed = parse_datetime(value)
        if parsed is None:
            day = parse_date(value)
            parsed = datetime(day.year, day.month, day.day) if day is not None else None
    except ValueError:
        parsed = None
    if parsed is None:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an ISO date or date-time; write e.g. 2026-11-01 or 2026-11-01T09:30:00Z"
        )
    return timezone.make_aware(parsed) if timezone.is_naive(parsed) else parsed


class Command(BaseCommand):
    help = "Export the governance change log as JSON lines (one entry per line, oldest first)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", metavar="export", required=True)
        export = actions.add_parser("export", help="write entries at or after --since to stdout as JSON lines")
        export.add_argument(
            "--since", type=moment, required=True, help="ISO date or date-time, e.g. 2026-11-01T00:00:00Z"
        )

    def handle(self, *args: object, since: datetime, **options: object) -> None:
        count = 0
        for change in changes_since(since=since):
            self.stdout.write(json.dumps(change_as_dict(change), sort_keys=True, ensure_ascii=False))
            count += 1
        self.stderr.write(f"{count} entries since {since.isoformat()}")
