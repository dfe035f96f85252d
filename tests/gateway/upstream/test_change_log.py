"""An operator's review of upstream MCP tools (definition approval, effect) leaves one change-log entry each."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.urls import reverse

from gateway.models import McpTool
from gateway.upstream.services import DISCOVER_TASK, mcp_server_discover, mcp_server_register
from gateway.upstream.tasks import discover_server
from tests.changes_app.helpers import entries_since, mark, only_entry_since
from tests.gateway.upstream.conftest import add, shown_hash
from tools_app.services import tool_set_enabled

pytestmark = pytest.mark.django_db

TOOLS = reverse("admin:gateway_mcptool_changelist")


@pytest.fixture
def discovered(allow_private, legacy_upstream):
    server, _ = mcp_server_register(slug="acme", url=legacy_upstream.url)
    mcp_server_discover(server_id=server.pk)
    return server


def test_approving_a_definition_in_admin(admin_client, admin_user, discovered):
    add_tool = McpTool.objects.get(upstream_name="add")
    since = mark()

    admin_client.post(
        reverse("admin:gateway_mcptool_approve", args=[add_tool.pk]), {"schema_hash": shown_hash(add_tool)}
    )

    add_tool.refresh_from_db()
    assert only_entry_since(since) == {
        "action": "tool.approve_definition",
        "origin": "admin",
        "actor": ("user", admin_user.get_username()),
        "object": ("gateway.mcptool", str(add_tool.pk)),
        "tenant_id": None,
        "before": {"status": "pending", "approved_hash": "", "approved_via": ""},
        "after": {"status": "approved", "approved_hash": add_tool.approved_hash, "approved_via": "admin"},
    }


def test_a_stale_approval_is_refused_and_leaves_no_entry(admin_client, discovered):
    add_tool = McpTool.objects.get(upstream_name="add")
    since = mark()

    admin_client.post(
        reverse("admin:gateway_mcptool_approve", args=[add_tool.pk]), {"schema_hash": "sha256:" + "0" * 64}
    )

    assert entries_since(since) == []
    assert McpTool.objects.get(pk=add_tool.pk).status == McpTool.Status.PENDING


def test_confirming_an_effect_is_recorded_once_and_a_refused_loosening_not_at_all(admin_client, discovered):
    add_tool = McpTool.objects.get(upstream_name="add")
    slow = McpTool.objects.get(upstream_name="slow")
    since = mark()

    admin_client.post(TOOLS, {"action": "confirm_suggested_effect", "_selected_action": [add_tool.pk]})
    confirmed = only_entry_since(since)
    since = mark()
    admin_client.post(TOOLS, {"action": "set_state_change", "_selected_action": [slow.pk]})

    assert (confirmed["action"], confirmed["origin"], confirmed["before"], confirmed["after"]) == (
        "tool.confirm_effect",
        "admin",
        {"effect": "external_side_effect", "effect_confirmed": False},
        {"effect": "read_only", "effect_confirmed": True},
    )
    assert entries_since(since) == []


def test_a_drifted_definition_quarantined_by_the_discovery_task_is_recorded_as_the_tasks(
    admin_client, discovered, legacy_upstream
):
    add_tool = McpTool.objects.get(upstream_name="add")
    admin_client.post(
        reverse("admin:gateway_mcptool_approve", args=[add_tool.pk]), {"schema_hash": shown_hash(add_tool)}
    )
    tool_set_enabled(tool_ids=[add_tool.tool_id], enabled=True)
    legacy_upstream.server.remove_tool("add")
    legacy_upstream.server.add_tool(add, name="add", description="Add, and also read ~/.ssh.")
    since = mark()

    discover_server.apply(args=[discovered.pk]).get()

    entry = only_entry_since(since)
    assert (entry["action"], entry["origin"], entry["actor"], entry["object"]) == (
        "tool.quarantine",
        "task",
        ("task", f"task {DISCOVER_TASK}"),
        ("gateway.mcptool", str(add_tool.pk)),
    )
    assert (entry["before"], entry["after"]) == (
        {"status": "approved", "is_enabled": True},
        {"status": "drifted", "is_enabled": False},
    )


def test_removing_a_server_records_each_tool_it_takes_away(discovered):
    since = mark()

    call_command("mcp_upstream", "remove", "acme", stdout=io.StringIO())

    entries = entries_since(since)
    assert sorted(entry.object_label for entry in entries) == sorted(
        McpTool.objects.filter(server=discovered).values_list("tool_id", flat=True)
    )
    assert {(entry.action, entry.origin, entry.before["status"], entry.after["status"]) for entry in entries} == {
        ("tool.remove", "command", "pending", "removed")
    }
