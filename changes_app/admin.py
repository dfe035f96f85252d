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
    # Every column fits at 1280 px: the object's type is in the action's name and the filter, the request
    # id is cut to its first characters (whole in its title and on the entry's page, and searchable).
    list_display = ("at", "action", "object_label", "actor_label", "origin", "request")
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

    @admin.display(description="request", ordering="request_id")
    def request(self, change: Change) -> SafeString | str:
        if not change.request_id:
            return "—"
        return format_html('<code title="{}">{}…</code>', change.request_id, change.request_id[:8])

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
