"""Reads of tools_app."""

from __future__ import annotations

from tools_app.models import Tool


def tool_is_enabled(*, tool_id: str) -> bool:
    """The kill switch: enabled and still present in its source."""
    return Tool.objects.filter(pk=tool_id, is_enabled=True, missing_since__isnull=True).exists()
