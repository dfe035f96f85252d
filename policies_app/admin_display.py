"""Compact values for admin lists, shared by every app's admin.

Django's default datetime ("Nov. 23, 2026, 10:26 p.m.") is twice as wide as the
information in it; at 1280 px that width is what pushed key columns (the kill
switch, error codes, decisions) out of view.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

SHORT_DATETIME = "%Y-%m-%d %H:%M"


def short_datetime(value: datetime | None) -> str | None:
    """`2026-11-23 22:26` in the site's time zone; None (shown as the admin's empty value) stays None."""
    return timezone.localtime(value).strftime(SHORT_DATETIME) if value is not None else None
