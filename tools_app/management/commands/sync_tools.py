"""manage.py sync_tools: upsert the code registry into the Tool catalog."""

from django.core.management.base import BaseCommand

from tools_app.registry import code_specs
from tools_app.services import tool_sync


class Command(BaseCommand):
    help = "Upsert the code registry into Tool rows (new tools arrive disabled; gone tools are marked)."

    def handle(self, *args, verbosity: int, **options) -> None:
        report = tool_sync(specs=code_specs())
        if verbosity < 1:
            return
        for label, ids in (
            ("created (disabled)", report.created),
            ("schema changed", report.changed),
            ("back in code", report.returned),
            ("missing from code", report.marked_missing),
        ):
            for tool_id in ids:
                self.stdout.write(f"{label}: {tool_id}")
        self.stdout.write(
            self.style.SUCCESS(
                f"sync_tools: {len(report.created)} created, {len(report.changed)} changed, "
                f"{len(report.unchanged)} unchanged, {len(report.marked_missing)} marked missing"
            )
        )
