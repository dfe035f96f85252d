"""What the change-log tests read back: the entries a step left, as plain tuples."""

from __future__ import annotations

from typing import Any

from changes_app.models import Change


def mark() -> int:
    """The id of the newest entry so far: entries made by a test's set-up stay out of its assertions."""
    newest = Change.objects.order_by("-id").values_list("id", flat=True).first()
    return newest or 0


def entries_since(since: int) -> list[Change]:
    return list(Change.objects.filter(id__gt=since).order_by("id"))


def summary(change: Change) -> dict[str, Any]:
    """Who, from where, on what, and the diff: the parts every write-path test checks."""
    return {
        "action": change.action,
        "origin": change.origin,
        "actor": (change.actor_kind, change.actor_label),
        "object": (change.object_type, change.object_id),
        "tenant_id": change.tenant_id,
        "before": change.before,
        "after": change.after,
    }


def only_entry_since(since: int) -> dict[str, Any]:
    """The one entry a write must leave (fails naming every entry when there are more or none)."""
    entries = entries_since(since)
    assert len(entries) == 1, [summary(entry) for entry in entries]
    return summary(entries[0])
