"""`manage.py approvals list|decide`: the operators' approval queue, for runbooks.

A decision made here is recorded like one made in admin, under the name of the
operating-system user running the command (`os:<user>`), with its reason.
"""

from __future__ import annotations

import getpass
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from core.ids import uuid_or_none
from policies_app.models import ApprovalRequest
from policies_app.selectors import approvals_for_operators
from policies_app.services import approval_decide

LIST_COLUMNS = ("id", "status", "tenant", "service_account", "tool", "expires_at")


class Command(BaseCommand):
    help = "List approval requests, or approve or deny one."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        listing = actions.add_parser("list", help="one line per request: id, status, tenant, account, tool, expiry")
        listing.add_argument("--pending", action="store_true", help="only requests still waiting for a decision")
        listing.add_argument("--tenant", metavar="SLUG", help="only this tenant's requests")
        listing.add_argument("--no-header", action="store_true", help="rows only (for scripts)")
        decide = actions.add_parser("decide", help="approve or deny one pending request")
        decide.add_argument("approval_id", metavar="ID")
        verdict = decide.add_mutually_exclusive_group(required=True)
        verdict.add_argument("--approve", action="store_true")
        verdict.add_argument("--deny", action="store_true")
        decide.add_argument("--reason", default="", help="why (kept with the decision; at most 500 characters)")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "list":
            self._list(pending_only=options["pending"], tenant_slug=options["tenant"], header=not options["no_header"])
        else:
            self._decide(options["approval_id"], approve=options["approve"], reason=options["reason"])

    def _list(self, *, pending_only: bool, tenant_slug: str | None, header: bool) -> None:
        """Tab-separated rows under a header row (none when there is no row: nothing to name)."""
        now = timezone.now()
        for index, approval in enumerate(approvals_for_operators(pending_only=pending_only, tenant_slug=tenant_slug)):
            if index == 0 and header:
                self.stdout.write("\t".join(LIST_COLUMNS))
            self.stdout.write(
                "\t".join(
                    (
                        str(approval.pk),
                        approval.status_at(now),
                        approval.tenant.slug,
                        approval.service_account.name,
                        approval.tool_id,
                        approval.expires_at.isoformat(),
                    )
                )
            )

    def _decide(self, approval_id: str, *, approve: bool, reason: str) -> None:
        pk = uuid_or_none(approval_id)
        approval = approvals_for_operators().filter(pk=pk).first() if pk is not None else None
        if approval is None:
            raise CommandError(f"no approval request {approval_id}; `manage.py approvals list` shows their ids")
        decided = approval_decide(
            approval=approval,
            approve=approve,
            decided_by=None,
            decided_by_name=f"os:{getpass.getuser()}",
            reason=reason,
        )
        if not decided:
            raise CommandError(
                f"approval request {approval_id} is {approval.status_at(timezone.now())}, not pending: "
                "only a pending, unexpired request can be decided"
            )
        self.stdout.write(f"{approval_id} {ApprovalRequest.Status(approval.status).label.lower()}")
