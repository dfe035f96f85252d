"""The governance change log: one append-only row per governance write.

This app sits below every other Toolgate app and imports none of them, so any
service can write here without an import cycle. That is why the object and the
actor are named by type, id and label instead of by foreign keys: the row
outlives a deleted policy or user and needs no knowledge of their models.
"""

from __future__ import annotations

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models

from changes_app.kinds import ActorKind, Origin


class Change(models.Model):
    """One governance write: who, through what, when, on what, and the allowlisted fields that changed.

    `before` and `after` hold only the fields whose value changed, and only
    fields named in changes_app.services.RECORDED_FIELDS, so a secret column
    can never reach this table. Rows are never updated or deleted by Toolgate.
    """

    id = models.BigAutoField(primary_key=True)
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    action = models.CharField(max_length=64)
    origin = models.CharField(max_length=16, choices=Origin.choices)
    actor_kind = models.CharField(max_length=16, choices=ActorKind.choices)
    actor_id = models.CharField(max_length=150, blank=True)
    actor_label = models.CharField(max_length=200, blank=True)
    request_id = models.CharField(max_length=64, blank=True)
    object_type = models.CharField(max_length=100)
    object_id = models.CharField(max_length=100)
    object_label = models.CharField(max_length=200, blank=True)
    # A plain id, not a foreign key: the change log imports no tenancy model (see the module docstring).
    tenant_id = models.BigIntegerField(null=True, blank=True)
    before = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    after = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    # Rows of other trails this write also left, e.g. {"connection_event": 12}.
    links = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name = "change log entry"
        verbose_name_plural = "change log entries"
        indexes = [
            models.Index(fields=["tenant_id", "-at"], name="change_tenant_at"),
            models.Index(fields=["object_type", "object_id"], name="change_object"),
        ]

    def __str__(self) -> str:
        return f"{self.action} {self.object_label or self.object_id} by {self.actor_label or self.actor_kind}"

    def field_changes(self) -> list[tuple[str, object, object]]:
        """(field, before, after) in name order, leaving out fields empty on both sides (a creation's blanks)."""
        names = sorted(set(self.before) | set(self.after))
        pairs = [(name, self.before.get(name), self.after.get(name)) for name in names]
        return [(name, old, new) for name, old, new in pairs if old is not None or new is not None]
