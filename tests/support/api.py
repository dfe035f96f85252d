"""Helpers shared by the REST API tests."""

from __future__ import annotations

import io

from django.core.management import call_command
from rest_framework.test import APIClient

from policies_app.governance import governance_bump
from tools_app.models import Tool


def enable_tools(*tool_ids: str) -> None:
    """Sync the catalog and switch these tools on (bumping the generation: .update() sends no signal)."""
    call_command("sync_tools", stdout=io.StringIO())
    Tool.objects.filter(pk__in=tool_ids).update(is_enabled=True)
    governance_bump()


def api_client(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client
