"""manage.py policy export [FILE] / manage.py policy import FILE [--prune]

Policies and tool switches as JSON (the format is in docs/policy.md): export
to review them in git, import to apply them from CI. FILE "-" is stdout/stdin.
"""

import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from core.errors import command_errors
from policy_files.policy_io import (
    policy_document_dumps,
    policy_document_loads,
    policy_export,
    policy_import,
)

STDIO = "-"


class Command(BaseCommand):
    help = "Export or import tool policies and tool switches as JSON."

    def add_arguments(self, parser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="{export,import}")
        export = actions.add_parser("export", help="write every policy and tool switch as JSON")
        export.add_argument("file", nargs="?", default=STDIO, help="output file (default: stdout)")
        load = actions.add_parser(
            "import",
            help="apply a policy file atomically: upsert policies by name, set tool switches",
            description=(
                "Validates the whole file first; any problem refuses it and nothing changes. "
                "Tool switches for tools that have no catalog row yet run sync_tools first."
            ),
        )
        load.add_argument("file", help='policy file ("-" reads stdin)')
        load.add_argument("--prune", action="store_true", help="also delete policies the file does not name")

    def handle(self, *args, action: str, file: str, **options) -> None:
        if action == "export":
            self.export(file)
        else:
            self.load(file, prune=options["prune"])

    def export(self, file: str) -> None:
        document = policy_export()
        text = policy_document_dumps(document)
        if file == STDIO:
            self.stdout.write(text, ending="")
            return
        Path(file).write_text(text, encoding="utf-8")
        self.stdout.write(f"exported {len(document['tools'])} tools and {len(document['policies'])} policies to {file}")

    def load(self, file: str, *, prune: bool) -> None:
        try:
            text = sys.stdin.read() if file == STDIO else Path(file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise CommandError(f"cannot read {file}: {error}") from None
        with command_errors():
            report = policy_import(document=policy_document_loads(text), prune=prune)
        if report.tools_synced:
            self.stdout.write("synced the tool catalog first (some switched tools had no row yet)")
        for label, names in (
            ("created policy", report.created),
            ("updated policy", report.updated),
            ("pruned policy", report.pruned),
            ("enabled tool", report.tools_enabled),
            ("disabled tool", report.tools_disabled),
            ("created toolset", report.toolsets_created),
            ("updated toolset", report.toolsets_updated),
            ("pruned toolset", report.toolsets_pruned),
            ("created rule", report.rules_created),
            ("updated rule", report.rules_updated),
            ("pruned rule", report.rules_pruned),
            ("created role mapping", report.role_mappings_created),
            ("pruned role mapping", report.role_mappings_pruned),
        ):
            for name in names:
                self.stdout.write(f"{label}: {name}")
        switched = len(report.tools_enabled) + len(report.tools_disabled)
        self.stdout.write(
            self.style.SUCCESS(
                f"policy import: {len(report.created)} created, {len(report.updated)} updated, "
                f"{len(report.unchanged)} unchanged, {len(report.pruned)} pruned, {switched} tools switched"
            )
        )
