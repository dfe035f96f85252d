"""The MCP models' move from tools_app to gateway keeps their rows, permissions, admin log and change history."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from changes_app.models import Change
from changes_app.selectors import change_last_actor_label
from gateway.models import McpServer, McpTool
from tests.factories import UserFactory

BEFORE_THE_MOVE = [("tools_app", "0020_invocation_cancelled")]  # gateway 0001 comes after tools_app 0021
MOVED = ("mcpserver", "mcptool", "mcpfeature", "mcpfeatureread")
OLD_LABEL = "tools_app"  # where the models were, as rows written before the move name it


def _migrate(targets):
    MigrationExecutor(connection).migrate(targets)
    return MigrationExecutor(connection).loader.project_state(targets).apps


@pytest.mark.django_db(transaction=True)
def test_moving_the_mcp_models_keeps_rows_permissions_log_entries_and_change_history():
    # given: the schema before the move, with a server, one of its tools, an operator group allowed to
    # change MCP tools, an admin log entry and a change-log row about that tool
    old = _migrate(BEFORE_THE_MOVE)
    content_types = old.get_model("contenttypes", "ContentType")
    permissions = old.get_model("auth", "Permission")
    tool_type, _ = content_types.objects.get_or_create(app_label="tools_app", model="mcptool")
    for model in MOVED:
        content_types.objects.get_or_create(app_label="tools_app", model=model)
    assert not content_types.objects.filter(app_label="gateway").exists()
    change_tool, _ = permissions.objects.get_or_create(
        content_type=tool_type, codename="change_mcptool", defaults={"name": "Can change MCP tool"}
    )
    group = old.get_model("auth", "Group").objects.create(name="mcp reviewers")
    group.permissions.add(change_tool)
    now = timezone.now()
    server = old.get_model("tools_app", "McpServer").objects.create(slug="kept", url="https://mcp.invalid/mcp")
    catalog_row = old.get_model("tools_app", "Tool").objects.create(
        id="mcp__kept__add",
        source="mcp",
        description="adds",
        input_schema={"type": "object"},
        schema_hash="0" * 64,
        schema_changed_at=now,
        effect="read_only",
    )
    tool = old.get_model("tools_app", "McpTool").objects.create(
        server=server,
        tool=catalog_row,
        upstream_name="add",
        live_definition={"name": "add"},
        live_hash="1" * 64,
        suggested_effect="read_only",
        first_seen_at=now,
        last_seen_at=now,
    )
    user = UserFactory()
    LogEntry.objects.create(  # admin's table is the same before and after
        user_id=user.pk,
        content_type_id=tool_type.pk,
        object_id=str(tool.pk),
        object_repr="mcp__kept__add",
        action_flag=CHANGE,
    )
    old.get_model("changes_app", "Change").objects.create(
        action="tool.approve",
        origin="admin",
        actor_kind="user",
        actor_label="ops@example.com",
        object_type=f"{OLD_LABEL}.mcptool",
        object_id=str(tool.pk),
    )

    # when
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    # then: the same rows through the gateway's models, on the same tables
    assert McpServer._meta.db_table == "tools_app_mcpserver"
    assert list(McpServer.objects.values_list("pk", "slug")) == [(server.pk, "kept")]
    moved = McpTool.objects.select_related("tool", "server").get()
    assert (moved.pk, moved.tool.pk, moved.server.slug) == (tool.pk, "mcp__kept__add", "kept")
    # the content types were renamed in place (same ids), so what pointed at them still does
    renamed = ContentType.objects.get_for_model(McpTool)
    assert (renamed.pk, renamed.app_label) == (tool_type.pk, "gateway")
    assert not ContentType.objects.filter(app_label="tools_app", model__in=MOVED).exists()
    assert set(ContentType.objects.filter(model__in=MOVED).values_list("app_label", flat=True)) == {"gateway"}
    assert Permission.objects.get(pk=change_tool.pk).content_type_id == renamed.pk
    reviewer = UserFactory()
    reviewer.groups.add(Group.objects.get(name="mcp reviewers"))
    assert reviewer.has_perm("gateway.change_mcptool")
    entry = LogEntry.objects.get(object_repr="mcp__kept__add")
    assert entry.get_edited_object() == moved
    # the tool's history is still its history
    assert Change.objects.get().object_type == "gateway.mcptool"
    assert change_last_actor_label(obj=moved, action="tool.approve") == "ops@example.com"
