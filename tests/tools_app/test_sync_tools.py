"""manage.py sync_tools and the catalog service behind it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from django.core.management import call_command

from runner.contracts import ToolContract, ToolDefinition
from runner.schema import to_tool_spec
from runner.types import ToolEffect
from tests.runner import tools as test_tools
from tools_app.models import Tool
from tools_app.registry import ToolIdCollision, build_registry, code_specs
from tools_app.services import tool_sync

pytestmark = pytest.mark.django_db

BUILTIN_IDS = [
    "core__get_current_time",
    "core__wait",
    "github__create_issue",
    "github__get_user",
    "toolgate__search_tools",
]


def test_sync_tools_creates_every_builtin_disabled(capsys):
    call_command("sync_tools")

    assert list(Tool.objects.values_list("id", "is_enabled")) == [(tool_id, False) for tool_id in BUILTIN_IDS]
    assert "5 created, 0 changed, 0 unchanged, 0 marked missing" in capsys.readouterr().out


def test_second_sync_changes_nothing_and_keeps_operator_switches():
    call_command("sync_tools")
    Tool.objects.filter(pk="core__wait").update(is_enabled=True)
    before = {t.id: (t.schema_hash, t.schema_changed_at) for t in Tool.objects.all()}

    report = tool_sync(specs=code_specs())

    assert (report.created, report.changed, sorted(report.unchanged)) == ([], [], BUILTIN_IDS)
    assert {t.id: (t.schema_hash, t.schema_changed_at) for t in Tool.objects.all()} == before
    assert Tool.objects.get(pk="core__wait").is_enabled is True


def test_schema_change_updates_hash_and_stamp_but_not_the_switch():
    tool_sync(specs=[to_tool_spec(test_tools.ECHO.contract)])
    Tool.objects.filter(pk="test__echo").update(is_enabled=True)
    old = Tool.objects.get(pk="test__echo")
    changed_contract = ToolContract(
        name="test__echo",
        description="echo, now with a new description",
        input_model=test_tools.EchoArgs,
        output_model=test_tools.EchoOut,
        effect=ToolEffect.READ_ONLY,
        redaction_allowlist=("text",),
    )

    report = tool_sync(specs=[to_tool_spec(changed_contract)])

    new = Tool.objects.get(pk="test__echo")
    assert report.changed == ["test__echo"]
    assert new.schema_hash != old.schema_hash
    assert new.schema_changed_at > old.schema_changed_at
    assert (new.description, new.is_enabled) == ("echo, now with a new description", True)


def test_a_new_title_is_synced_without_a_schema_change():
    """The title is display metadata (and searched): not in the schema hash, so no review stamp."""
    tool_sync(specs=[to_tool_spec(test_tools.ECHO.contract)])
    old = Tool.objects.get(pk="test__echo")
    titled = replace(test_tools.ECHO.contract, title="Echo chamber")

    report = tool_sync(specs=[to_tool_spec(titled)])

    new = Tool.objects.get(pk="test__echo")
    assert report.changed == ["test__echo"]
    assert new.title == "Echo chamber"
    assert (new.schema_hash, new.schema_changed_at) == (old.schema_hash, old.schema_changed_at)


def test_tool_gone_from_code_is_marked_not_deleted_and_returns_cleanly():
    tool_sync(specs=[to_tool_spec(test_tools.ECHO.contract), to_tool_spec(test_tools.BOOM.contract)])

    gone = tool_sync(specs=[to_tool_spec(test_tools.ECHO.contract)])
    back = tool_sync(specs=[to_tool_spec(test_tools.ECHO.contract), to_tool_spec(test_tools.BOOM.contract)])

    assert gone.marked_missing == ["test__boom"]
    assert back.returned == ["test__boom"]
    assert Tool.objects.get(pk="test__boom").missing_since is None
    assert Tool.objects.count() == 2


def test_tool_id_collision_fails_loudly():
    twin = ToolDefinition(test_tools.ECHO.contract, test_tools.BOOM.execute)

    with pytest.raises(ToolIdCollision, match="test__echo"):
        build_registry([test_tools.ECHO, twin])
