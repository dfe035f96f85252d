"""Compact values, counters, filters and permissions for admin pages, shared by the apps' admins.

Django's default datetime ("Nov. 23, 2026, 10:26 p.m.") is twice as wide as the
information in it; at 1280 px that width is what pushed key columns (the kill
switch, error codes, decisions) out of view.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, ClassVar, TypeVar

from django.contrib import admin
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.utils import timezone

from core.models import Revocable

SHORT_DATETIME = "%Y-%m-%d %H:%M"
RowT = TypeVar("RowT", bound=Revocable)
# An admin action: what `@admin.action` decorates, then `ModelAdmin.actions` names.
AdminAction = Callable[[admin.ModelAdmin, HttpRequest, QuerySet[Any]], None]


def short_datetime(value: datetime | None) -> str | None:
    """`2026-11-23 22:26` in the site's time zone; None (shown as the admin's empty value) stays None."""
    return timezone.localtime(value).strftime(SHORT_DATETIME) if value is not None else None


def count_of(n: int, noun: str) -> str:
    """`1 grant`, `3 grants`: the admin's messages after a bulk action."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def act_on_each(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    rows: Iterable[Model],
    act: Callable[[Model], bool],
    *,
    done: str,
    noun: str,
    logged: str,
    unchanged: str,
) -> None:
    """A bulk action: `act` (a service call) on each row, one admin log entry per row it changed, one message.

    `act` answers whether it changed the row (a revoke of a revoked row does not); the message
    says how many it changed (`Revoked 2 grants.`) and how many it left (`1 already revoked.`).
    """
    changed = left = 0
    for row in rows:
        if act(row):
            model_admin.log_change(request, row, logged)
            changed += 1
        else:
            left += 1
    message = f"{done} {count_of(changed, noun)}."
    if left:
        message += f" {left} {unchanged}."
    model_admin.message_user(request, message)


def revoke_action(revoke: Callable[[RowT, Any], bool], *, noun: str, description: str | None = None) -> AdminAction:
    """The "Revoke selected <nouns>" action of a revocable model's admin, the same on every screen.

    `revoke(row, user)` is the model's revoking service (built on `revoke_once`,
    so the change log is written there, in its transaction). Each row it
    revoked gets an admin log entry; the message counts the revoked and the
    already revoked alike (`Revoked 1 grant. 1 already revoked.`). Requires the
    change permission.
    """

    @admin.action(description=description or f"Revoke selected {noun}s", permissions=["change"])
    def revoke_selected(model_admin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[RowT]) -> None:
        act_on_each(
            model_admin,
            request,
            queryset,
            lambda row: revoke(row, request.user),  # type: ignore[arg-type]
            done="Revoked",
            noun=noun,
            logged="Revoked.",
            unchanged="already revoked",
        )

    return revoke_selected


class RevokedFilter(admin.SimpleListFilter):
    """Revoked or not, for any Revocable model (service accounts, grants, connections, delegations, clients)."""

    title = "revoked"
    parameter_name = "revoked"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [("yes", "Revoked"), ("no", "Not revoked")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() in ("yes", "no"):
            return queryset.filter(revoked_at__isnull=self.value() == "no")
        return queryset


class WrittenElsewhereAdmin:
    """A ModelAdmin mixin for rows that services write: admin shows them and adds, edits or deletes none.

    Each flag a class sets to True gives that permission back to Django's own check (the user's model
    permissions). The reasons differ (tools come from code or discovery, the audit trail is written only
    by the runner, revoked rows are kept for the rows that point at them), and each class says its own.
    """

    admin_may_add: ClassVar[bool] = False
    admin_may_change: ClassVar[bool] = False
    admin_may_delete: ClassVar[bool] = False

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return self.admin_may_add and super().has_add_permission(request, *args)  # type: ignore[misc]

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return self.admin_may_change and super().has_change_permission(request, obj)  # type: ignore[misc]

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return self.admin_may_delete and super().has_delete_permission(request, obj)  # type: ignore[misc]
