"""Reading the change log: a tenant's own entries, and everything since a moment for export."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from django.db.models import Model, QuerySet

from changes_app.models import Change

EXPORT_CHUNK = 500


def changes_for_tenant(*, tenant_id: int) -> QuerySet[Change]:
    """A tenant's entries, newest first: writes to its connections, grants, accounts, policies, approvals."""
    return Change.objects.filter(tenant_id=tenant_id).order_by("-at", "-id")


def changes_since(*, since: datetime) -> Iterator[Change]:
    """Every entry at or after `since`, oldest first, streamed in chunks (an export may be large)."""
    return Change.objects.filter(at__gte=since).order_by("at", "id").iterator(chunk_size=EXPORT_CHUNK)


def change_last_actor_label(*, obj: Model, action: str) -> str | None:
    """Who made the latest `action` change to `obj`, as the log names them (`os:root (manage.py ...)`).

    For rows that keep a user foreign key only: a write from a command or a
    task has no user, but the log still knows its actor.
    """
    change = (
        Change.objects.filter(object_type=obj._meta.label_lower, object_id=str(obj.pk), action=action)
        .order_by("-at", "-id")
        .only("actor_label")
        .first()
    )
    return change.actor_label if change is not None else None


def change_as_dict(change: Change) -> dict[str, object]:
    """One entry as the export writes it (and as an integration would read it)."""
    return {
        "id": change.id,
        "at": change.at.isoformat(),
        "action": change.action,
        "origin": change.origin,
        "actor": {"kind": change.actor_kind, "id": change.actor_id, "label": change.actor_label},
        "request_id": change.request_id,
        "object": {
            "type": change.object_type,
            "id": change.object_id,
            "label": change.object_label,
            "tenant_id": change.tenant_id,
        },
        "before": change.before,
        "after": change.after,
        "links": change.links,
    }
