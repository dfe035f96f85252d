"""`manage.py sso_permission_sets`: create or update the operator permission-set groups."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from identity_app.permission_sets import operator_groups_ensure


class Command(BaseCommand):
    help = "Create or update the Django groups of the operator permission sets (viewer, approver, tool admin)."

    def handle(self, *args: Any, **options: Any) -> None:
        for role, group in operator_groups_ensure().items():
            self.stdout.write(f"{role}: {group.name} ({group.permissions.count()} permissions)")
