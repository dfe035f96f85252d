"""The operator permission sets, as Django groups that role mappings hand out.

Admin enforces Django permissions already, so a permission set is a group of
them: viewer reads everything Toolgate keeps (admin and audit), approver
decides approvals and nothing else, tool admin changes switches, policies,
rules and upstream MCP servers. Superuser is Django's own flag. The groups are
rebuilt from this table (`manage.py sso_permission_sets`, and before every
login that grants one), so a permission added here reaches every operator.
"""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission
from django.db import transaction
from django.db.models import Q

from identity_app.models import OPERATOR_GROUP_NAMES

# The apps whose rows operators look after (django-axes and Celery beat are maintenance, kept for superusers).
TOOLGATE_APPS = ("tools_app", "gateway", "policies_app", "signin", "connections_app", "changes_app", "identity_app")


def _viewer() -> Q:
    return Q(content_type__app_label__in=TOOLGATE_APPS, codename__startswith="view_")


def _approver() -> Q:
    return Q(
        content_type__app_label="policies_app",
        content_type__model="approvalrequest",
        codename__in=("view_approvalrequest", "change_approvalrequest"),
    )


def _tool_admin() -> Q:
    return _viewer() | Q(content_type__app_label__in=("tools_app", "gateway", "policies_app", "signin"))


PERMISSION_SETS = {"viewer": _viewer, "approver": _approver, "tool_admin": _tool_admin}


@transaction.atomic
def operator_groups_ensure() -> dict[str, Group]:
    """The permission-set groups, created or brought up to date; role -> group."""
    groups = {}
    for role, permissions in PERMISSION_SETS.items():
        group, _ = Group.objects.get_or_create(name=OPERATOR_GROUP_NAMES[role])
        group.permissions.set(Permission.objects.filter(permissions()))
        groups[role] = group
    return groups
