"""The change log in admin: read-only, filterable by origin, object type, actor and date.

An append-only log that an operator could edit would prove nothing, so no
permission here allows adding, changing or deleting an entry (superusers
included); the change view shows the entry as read-only fields.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from changes_app.models import Change


@admin.register(Change)
class ChangeAdmin(admin.ModelAdmin):
    list_display = ("at", "action", "object_type", "object_label", "actor_label", "origin", "request_id")
    list_filter = (
        "origin",
        "object_type",
        "action",
        "actor_kind",
        ("actor_label", admin.AllValuesFieldListFilter),
        ("at", admin.DateFieldListFilter),
    )
    search_fields = ("object_label", "object_id", "actor_label", "request_id")
    date_hierarchy = "at"
    fields = (
        "at",
        "action",
        "origin",
        "actor_kind",
        "actor_id",
        "actor_label",
        "request_id",
        "object_type",
        "object_id",
        "object_label",
        "tenant_id",
        "before_pretty",
        "after_pretty",
        "links_pretty",
    )
    readonly_fields = fields
    actions = None  # no bulk delete of the log

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Change | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Change | None = None) -> bool:
        return False

    @admin.display(description="before")
    def before_pretty(self, change: Change) -> SafeString:
        return _pretty(change.before)

    @admin.display(description="after")
    def after_pretty(self, change: Change) -> SafeString:
        return _pretty(change.after)

    @admin.display(description="links")
    def links_pretty(self, change: Change) -> SafeString:
        return _pretty(change.links)


def _pretty(value: Any) -> SafeString:
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, sort_keys=True))
