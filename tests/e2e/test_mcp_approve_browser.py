"""An operator turns discovered upstream MCP tools on in one step, in a real browser: select them in the
MCP tools list, "Approve and enable selected tools", review each definition, effect and hash, confirm."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from gateway.models import McpTool
from gateway.upstream.services import mcp_server_discover, mcp_server_register
from policy_files.policy_io import policy_export
from tests.factories import PASSWORD, TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.gateway.upstream.conftest import install_tools
from tests.support.api import api_client
from tests.support.mcp_upstream import McpUpstream
from tools_app.models import Tool


@pytest.fixture
def upstream(settings) -> Iterator[McpUpstream]:
    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = True
    with McpUpstream(legacy=True) as server:
        install_tools(server)
        yield server


@pytest.fixture
def discovered(browsing, upstream):
    get_user_model().objects.create_superuser("operator", "operator@example.com", PASSWORD)
    server, _ = mcp_server_register(slug="acme", url=upstream.url)
    mcp_server_discover(server_id=server.pk)
    return server


def test_an_operator_approves_and_enables_two_tools_in_one_step(browsing, discovered, upstream):
    page = browsing.page
    browsing.visit("/admin/gateway/mcptool/", "mcp-approve-01-login")
    page.get_by_label("Username").fill("operator")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("#result_list")).to_be_visible()
    browsing.screenshot("mcp-approve-02-list")

    for tool_id in ("mcp__acme__add", "mcp__acme__get_issue"):
        page.locator("#result_list tr", has_text=tool_id).locator("input.action-select").check()
    page.locator("select[name=action]").select_option("approve_and_enable_selected")
    page.get_by_role("button", name="Go").click()

    expect(page.locator("h1")).to_have_text("Approve and enable 2 MCP tool(s)")
    reviews = page.locator("section.mcp-tool-review")
    expect(reviews).to_have_count(2)
    expect(reviews.first.locator("h2")).to_have_text("mcp__acme__add")
    expect(reviews.first.locator("td.effect strong")).to_have_text("read_only")
    expect(reviews.first.locator(".mcp-definition-comparison")).to_contain_text("Add two integers.")
    shown = reviews.locator("code.schema-hash").all_inner_texts()
    assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", text) for text in shown)
    browsing.screenshot("mcp-approve-03-confirm")
    assert not Tool.objects.filter(source="mcp", is_enabled=True).exists()  # the page alone changes nothing

    page.get_by_role("button", name="Yes, approve and enable 2 tools").click()

    expect(page.locator(".messagelist .success")).to_contain_text("Approved and enabled 2 tool(s)")
    browsing.screenshot("mcp-approve-04-done")
    rows = {row.tool_id: row for row in McpTool.objects.select_related("tool").filter(server=discovered)}
    assert [(tool_id, row.status, row.tool.is_enabled) for tool_id, row in sorted(rows.items())] == [
        ("mcp__acme__add", "approved", True),
        ("mcp__acme__big", "pending", False),
        ("mcp__acme__fail", "pending", False),
        ("mcp__acme__get_issue", "approved", True),
        ("mcp__acme__slow", "pending", False),
    ]
    exported = policy_export()["tools"]
    assert shown == [exported["mcp__acme__add"]["schema_hash"], exported["mcp__acme__get_issue"]["schema_hash"]]
    listed = page.locator("#result_list tr", has_text="mcp__acme__add").locator("code.schema-hash")
    expect(listed).to_have_attribute("title", shown[0])

    # The policy step (docs/mcp-upstream.md): a caller whose policy allows the id can call it now.
    tenant = TenantFactory(slug="acme-co")
    _account, key = service_account_with_key(tenant, name="agent")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["mcp__acme__add"])
    answer = api_client(key).post(
        "/api/v1/tools/exec", {"tool_id": "mcp__acme__add", "args": {"a": 20, "b": 22}}, format="json"
    )
    assert (answer.status_code, answer.json()["value"]) == (200, {"result": 42})
    assert upstream.calls("add") == 1
    assert browsing.csp_violations() == []
