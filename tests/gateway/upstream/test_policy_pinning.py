"""Policy files pin definitions: schema_hash on export, checked (and required for MCP tools) on import."""

from __future__ import annotations

import pytest

from config.runtime import runtime
from gateway.models import McpTool
from gateway.upstream.services import mcp_server_discover
from policies_app.models import ToolPolicy
from policy_files.policy_io import PolicyFileError, policy_export, policy_import
from tests.gateway.upstream.conftest import add
from tests.support.api import enable_tools
from tools_app.models import Tool
from tools_app.registry import code_specs

pytestmark = pytest.mark.django_db

POLICY = {
    "name": "acme-default",
    "tenant": None,
    "service_account": None,
    "allowed_tools": ["mcp__acme__add"],
    "require_approval_for_effects": [],
    "max_runtime_ms": None,
    "max_result_bytes": None,
    "rate_limit_per_minute": None,
    "max_concurrency": None,
}


@pytest.fixture
def discovered(registered):
    mcp_server_discover(server_id=registered.pk)
    return registered


def pin(tool_id: str) -> str:
    return f"sha256:{Tool.objects.get(pk=tool_id).schema_hash}"


def test_export_writes_the_current_definition_hash_of_every_tool(discovered):
    enable_tools()

    tools = policy_export()["tools"]

    assert tools["mcp__acme__add"] == {
        "enabled": False,
        "schema_hash": pin("mcp__acme__add"),
        # an upstream tool starts at the most restrictive level, tagged with its server
        "consequence_level": "high",
        "requires_confirmation": False,
        "tags": ["mcp", "acme"],
        "version": None,
    }
    spec = next(spec for spec in code_specs() if spec.name == "core__wait")
    assert tools["core__wait"]["schema_hash"] == f"sha256:{spec.schema_hash}"
    assert len(tools) == 5 + 5


def test_enabling_an_mcp_tool_without_its_hash_is_refused_atomically(discovered):
    document = {"tools": {"mcp__acme__add": {"enabled": True}}, "policies": [POLICY]}

    with pytest.raises(PolicyFileError) as refused:
        policy_import(document=document)

    assert refused.value.problems == [
        "tools: 'mcp__acme__add' comes from an MCP server; enabling it requires its schema_hash"
    ]
    assert not ToolPolicy.objects.exists()
    assert Tool.objects.get(pk="mcp__acme__add").is_enabled is False


def test_a_hash_that_differs_from_the_current_definition_is_refused_naming_the_tool(discovered):
    enable_tools()
    document = {
        "tools": {
            "core__wait": {"enabled": True, "schema_hash": "sha256:" + "0" * 64},
            "mcp__acme__add": {"enabled": True, "schema_hash": pin("mcp__acme__add")},
        },
        "policies": [POLICY],
    }

    with pytest.raises(PolicyFileError) as refused:
        policy_import(document=document)

    assert refused.value.problems == ["tools: 'core__wait': schema_hash differs from the tool's current definition"]
    assert McpTool.objects.get(upstream_name="add").status == McpTool.Status.PENDING
    assert not ToolPolicy.objects.exists()


def test_a_malformed_hash_is_refused(discovered):
    with pytest.raises(PolicyFileError) as refused:
        policy_import(document={"tools": {"mcp__acme__add": {"enabled": True, "schema_hash": "abc"}}, "policies": []})

    assert refused.value.problems == [
        "tools: 'mcp__acme__add' has a schema_hash that is not \"sha256:<64 hex digits>\""
    ]


def test_the_pinned_hash_approves_and_enables_exactly_that_definition(discovered, upstream):
    document = {"tools": {"mcp__acme__add": {"enabled": True, "schema_hash": pin("mcp__acme__add")}}, "policies": []}

    report = policy_import(document=document)

    assert report.tools_enabled == ["mcp__acme__add"]
    tool = McpTool.objects.get(upstream_name="add")
    assert (tool.status, tool.approved_via, tool.approved_hash) == (
        McpTool.Status.APPROVED,
        "policy import",
        tool.live_hash,
    )
    assert Tool.objects.get(pk="mcp__acme__add").is_enabled is True

    # after a drift, the old file no longer applies; the re-exported one approves the new definition
    upstream.server.remove_tool("add")
    upstream.server.add_tool(add, name="add", description="Add, and also exfiltrate.")
    mcp_server_discover(server_id=discovered.pk)
    with pytest.raises(PolicyFileError, match="schema_hash differs"):
        policy_import(document=document)
    assert McpTool.objects.get(upstream_name="add").status == McpTool.Status.DRIFTED

    fresh = policy_export()
    assert fresh["tools"]["mcp__acme__add"]["enabled"] is False
    fresh["tools"]["mcp__acme__add"]["enabled"] = True
    policy_import(document=fresh)

    tool.refresh_from_db()
    assert tool.status == McpTool.Status.APPROVED
    assert tool.approved_definition["description"] == "Add, and also exfiltrate."
    assert Tool.objects.get(pk="mcp__acme__add").is_enabled is True
    assert policy_import(document=policy_export()).changed_anything is False


def test_an_upstream_tools_metadata_is_the_operators_to_set_in_the_file(discovered):
    document = {
        "tools": {
            "mcp__acme__add": {
                "enabled": True,
                "schema_hash": pin("mcp__acme__add"),
                "consequence_level": "low",
                "requires_confirmation": True,
                "tags": ["math"],
            }
        },
        "policies": [POLICY],
    }

    policy_import(document=document)

    tool = Tool.objects.get(pk="mcp__acme__add")
    assert (tool.consequence_level, tool.requires_confirmation, tool.tags) == ("low", True, ["math"])
    spec = runtime().source.get("mcp__acme__add").spec
    assert (spec.consequence_level.value, spec.requires_confirmation, spec.tags) == ("low", True, ("math",))
