"""Real MCP clients against /mcp on a live server (loopback socket), in both protocol eras.

The official SDK 2.x in `legacy` (initialize handshake, 2025-11-25), `2026-07-28`
(per-request envelope, headers checked) and `auto` (server/discover) modes, and
a 1.x client (httpx, `streamablehttp_client` + `ClientSession`) run from its
own virtualenv in a subprocess. What they see is compared with the REST API of
the same live server: the catalog, the audit rows, the github tools against a
loopback GitHub, and an approval decided in admin.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from django.core.management import call_command
from django.test import Client as DjangoClient
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from config.runtime import runtime
from gateway.inbound import protocol
from policies_app.governance import governance_bump
from policies_app.models import ApprovalRequest
from tests.factories import (
    ConnectionFactory,
    GrantFactory,
    TenantFactory,
    ToolPolicyFactory,
    UserFactory,
    service_account_with_key,
)
from tests.support.loopback import LoopbackServer
from tools_app.models import Tool, ToolInvocation
from tools_app.services import tool_set_enabled

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[3]
MCP1_PYTHON = ROOT / ".venv-mcp1" / "bin" / "python"
MCP1_CLIENT = ROOT / "tests" / "support" / "mcp1_client.py"
SDK_MODES = ("legacy", "2026-07-28")
GITHUB_TOKEN = "ghp_mcpEndToEnd0123456789abcdefABCDEF"
GITHUB_USER = {"login": "octocat", "id": 583231, "name": "The Octocat", "html_url": "https://github.com/octocat"}
ALL_TOOLS = ("core__get_current_time", "core__wait", "github__create_issue", "github__get_user")

T = TypeVar("T")


def enable(*tool_ids: str) -> None:
    call_command("sync_tools", stdout=io.StringIO())
    Tool.objects.filter(pk__in=tool_ids).update(is_enabled=True)
    governance_bump()


def session(url: str, key: str, mode: str, fn: Callable[[Client], Awaitable[T]]) -> T:
    """Open an SDK 2.x client on /mcp with the API key, run `fn` with it, close it."""

    async def run() -> T:
        async with (
            create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http), mode=mode) as client,
        ):
            return await fn(client)

    return asyncio.run(run())


async def all_tools(client: Client) -> tuple[list[Any], int]:
    """Every page of tools/list, and how many pages it took."""
    tools, cursor, pages = [], None, 0
    while True:
        listed = await client.list_tools(cursor=cursor)
        tools += listed.tools
        pages += 1
        cursor = listed.next_cursor
        if cursor is None:
            return tools, pages


def rest(url: str, key: str, path: str) -> Any:
    response = httpx.get(f"{url}{path}", headers={"Authorization": f"Bearer {key}"}, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture
def url(live_server) -> str:
    return live_server.url


@pytest.fixture
def two_callers():
    """Two service accounts of one tenant whose service-account policies allow different tools."""
    enable(*ALL_TOOLS)
    tenant = TenantFactory(slug="acme")
    first, first_key = service_account_with_key(tenant, name="planner")
    second, second_key = service_account_with_key(tenant, name="reporter")
    ToolPolicyFactory(service_account=first, tenant=tenant, allowed_tools=["core__get_current_time", "core__wait"])
    ToolPolicyFactory(
        service_account=second, tenant=tenant, allowed_tools=["core__get_current_time", "github__create_issue"]
    )
    return first_key, second_key


@pytest.mark.parametrize("mode", [*SDK_MODES, "auto"])
def test_tools_list_is_the_rest_catalog_for_each_caller(url, two_callers, mode, monkeypatch):
    # given pages of one tool, so the client has to follow nextCursor
    monkeypatch.setattr(protocol, "PAGE_SIZE", 1)

    for key in two_callers:
        # when
        tools, pages = session(url, key, mode, all_tools)
        catalog = rest(url, key, "/api/v1/tools")["tools"]

        # then
        assert [(tool.name, tool.description, tool.input_schema) for tool in tools] == [
            (spec["name"], spec["description"], spec["input_schema"]) for spec in catalog
        ]
        assert pages == len(catalog) == 2
    planner, reporter = (session(url, key, mode, all_tools)[0] for key in two_callers)
    assert [tool.name for tool in planner] == ["core__get_current_time", "core__wait"]
    assert [tool.name for tool in reporter] == ["core__get_current_time", "github__create_issue"]
    hints = {tool.name: (tool.annotations.read_only_hint, tool.annotations.open_world_hint) for tool in reporter}
    assert hints == {"core__get_current_time": (True, None), "github__create_issue": (False, True)}
    assert reporter[1].output_schema == {
        "type": "object",
        "properties": {"number": {"type": "integer"}, "html_url": {"type": "string"}},
        "required": ["number", "html_url"],
        "additionalProperties": False,
    }


def test_auto_mode_discovers_the_2026_revision(url, two_callers):
    async def negotiated(client: Client) -> str:
        return client.protocol_version

    assert session(url, two_callers[0], "auto", negotiated) == "2026-07-28"
    assert session(url, two_callers[0], "legacy", negotiated) == "2025-11-25"


@pytest.mark.parametrize("mode", SDK_MODES)
def test_kill_switch_removes_the_tool_from_the_next_list_and_refuses_the_next_call(url, two_callers, mode):
    key = two_callers[0]

    async def scenario(client: Client) -> dict[str, Any]:
        before = [tool.name for tool in (await client.list_tools()).tools]
        ran = await client.call_tool("core__wait", {"ms": 1}, meta={"toolgate/tool_call_id": f"before-{mode}"})
        await asyncio.to_thread(tool_set_enabled, tool_ids=["core__wait"], enabled=False)
        after = [tool.name for tool in (await client.list_tools()).tools]
        with pytest.raises(MCPError) as refused:
            await client.call_tool("core__wait", {"ms": 1}, meta={"toolgate/tool_call_id": f"after-{mode}"})
        return {"before": before, "ran": ran, "after": after, "refused": refused.value}

    seen = session(url, key, mode, scenario)

    assert seen["before"] == ["core__get_current_time", "core__wait"]
    assert (seen["ran"].is_error, seen["ran"].structured_content) == (False, {"waited_ms": 1})
    assert seen["after"] == ["core__get_current_time"]
    assert (seen["refused"].code, seen["refused"].error.message) == (-32602, "unknown tool")
    refused_row = ToolInvocation.objects.get(tool_call_id=f"after-{mode}")
    assert (refused_row.ok, refused_row.error_code, refused_row.executed) == (False, "policy_denied", False)


@pytest.mark.parametrize("mode", SDK_MODES)
def test_a_call_is_audited_with_its_meta_ids_and_is_idempotent_like_rest(url, two_callers, mode):
    key = two_callers[0]
    meta = {"toolgate/tool_call_id": f"audited-{mode}", "toolgate/run_id": "run-42"}

    async def scenario(client: Client) -> list[Any]:
        first = await client.call_tool("core__get_current_time", {"timezone": "Europe/Paris"}, meta=meta)
        repeat = await client.call_tool("core__get_current_time", {"timezone": "Europe/Paris"}, meta=meta)
        other_args = await client.call_tool("core__get_current_time", {"timezone": "UTC"}, meta=meta)
        return [first, repeat, other_args]

    first, repeat, other_args = session(url, key, mode, scenario)

    assert first.is_error is False
    assert first.structured_content["timezone"] == "Europe/Paris"
    assert json.loads(first.content[0].text) == first.structured_content
    assert first.meta["toolgate/tool_call_id"] == f"audited-{mode}"
    assert repeat.structured_content == first.structured_content  # replayed, not run again
    assert (other_args.is_error, other_args.meta["toolgate/error_code"]) == (True, "idempotency_conflict")
    assert other_args.content[0].text.startswith("idempotency_conflict: ")
    row = rest(url, key, f"/api/v1/invocations/audited-{mode}")
    assert (row["run_id"], row["tool_id"], row["ok"]) == ("run-42", "core__get_current_time", True)
    assert ToolInvocation.objects.filter(tool_call_id=f"audited-{mode}", executed=True).count() == 1


@pytest.fixture
def github(settings):
    """A loopback GitHub the live server's runtime calls (the runtime is rebuilt around it)."""
    with LoopbackServer() as server:
        settings.TOOLGATE_GITHUB_API_URL = server.url
        runtime.cache_clear()
        yield server
    runtime.cache_clear()


@pytest.mark.parametrize("mode", SDK_MODES)
def test_connection_and_grant_in_meta_reach_the_github_tool(url, github, mode):
    # given a caller granted one github connection
    enable("github__get_user")
    account, key = service_account_with_key(TenantFactory(slug="octo"), name="agent")
    ToolPolicyFactory(tenant=account.tenant, allowed_tools=["github__get_user"])
    connection = ConnectionFactory(tenant=account.tenant, credentials={"api_key": GITHUB_TOKEN})
    grant = GrantFactory(service_account=account, connections=[connection])
    github.route("GET", "/user", json={**GITHUB_USER, "email": "octocat@github.example", "site_admin": False})
    meta = {"toolgate/connection_id": str(connection.pk), "toolgate/grant_id": str(grant.pk)}

    # when (the SDK validates structuredContent against the listed outputSchema)
    async def scenario(client: Client) -> Any:
        await client.list_tools()
        return await client.call_tool("github__get_user", {}, meta={**meta, "toolgate/tool_call_id": f"gh-{mode}"})

    result = session(url, key, mode, scenario)

    # then
    assert (result.is_error, result.structured_content) == (False, GITHUB_USER)
    assert [(r.method, r.path, r.headers["authorization"]) for r in github.requests] == [
        ("GET", "/user", f"Bearer {GITHUB_TOKEN}")
    ]
    row = ToolInvocation.objects.get(tool_call_id=f"gh-{mode}")
    assert (row.connection_id, row.grant_id, row.ok) == (str(connection.pk), str(grant.pk), True)
    assert GITHUB_TOKEN not in result.model_dump_json()


@pytest.mark.parametrize("mode", SDK_MODES)
def test_approval_over_mcp_then_approved_in_admin_runs_once(url, mode):
    # given a policy that asks an operator before any read_only call
    enable("core__wait")
    account, key = service_account_with_key(TenantFactory(slug="careful"), name="agent")
    ToolPolicyFactory(tenant=account.tenant, allowed_tools=["core__wait"], require_approval_for_effects=["read_only"])
    meta = {"toolgate/tool_call_id": f"needs-approval-{mode}"}

    def call() -> Any:
        return session(url, key, mode, lambda client: client.call_tool("core__wait", {"ms": 2}, meta=meta))

    # when
    asked = call()
    approval = ApprovalRequest.objects.get()
    operator = UserFactory(username="operator", is_staff=True, is_superuser=True)
    admin = DjangoClient()
    admin.force_login(operator)
    decided = admin.post(
        "/admin/policies_app/approvalrequest/",
        {"action": "approve_selected", "_selected_action": [approval.pk]},
    )
    approved, repeated = call(), call()

    # then
    assert asked.is_error is True
    assert asked.meta["toolgate/error_code"] == "approval_required"
    assert asked.meta["toolgate/approval_id"] == str(approval.pk)
    assert asked.content[0].text.startswith("approval_required: ")
    assert decided.status_code == 302
    assert (approved.is_error, approved.structured_content) == (False, {"waited_ms": 2})
    assert (repeated.is_error, repeated.structured_content) == (False, {"waited_ms": 2})
    assert ToolInvocation.objects.filter(tool_call_id=meta["toolgate/tool_call_id"], executed=True).count() == 1
    approval.refresh_from_db()
    assert approval.status == "consumed"


def test_a_1x_client_sees_the_same_catalog_and_calls_through_the_pipeline(url, two_callers, monkeypatch):
    if not MCP1_PYTHON.exists():
        pytest.fail(f"{MCP1_PYTHON} is missing: `make install-dev` builds it from requirements-mcp1.txt")
    monkeypatch.setattr(protocol, "PAGE_SIZE", 1)
    key = two_callers[0]
    plan = {
        "calls": [
            {"name": "core__wait", "arguments": {"ms": 3}, "meta": {"toolgate/tool_call_id": "v1-call"}},
            {"name": "github__create_issue", "arguments": {"owner": "o", "repo": "r", "title": "t"}},
            {"name": "core__wait", "arguments": {"ms": -1}},
        ]
    }

    completed = subprocess.run(
        [str(MCP1_PYTHON), str(MCP1_CLIENT)],
        input=json.dumps(plan),
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ.get("PATH", ""), "MCP_URL": f"{url}/mcp", "TOOLGATE_MCP_KEY": key},
        check=False,
    )

    assert completed.returncode == 0, completed.stderr[-2000:]
    seen = json.loads(completed.stdout)
    catalog = rest(url, key, "/api/v1/tools")["tools"]
    assert seen["protocol_version"] == "2025-11-25"
    assert [(tool["name"], tool["inputSchema"]) for tool in seen["tools"]] == [
        (spec["name"], spec["input_schema"]) for spec in catalog
    ]
    assert seen["pages"] == 2
    ran, hidden, invalid = seen["calls"]
    assert (ran["is_error"], ran["structured"], ran["meta"]) == (
        False,
        {"waited_ms": 3},
        {"toolgate/tool_call_id": "v1-call"},
    )
    assert hidden == {"error_code": -32602, "message": "unknown tool"}
    assert invalid["is_error"] is True
    assert invalid["meta"]["toolgate/error_code"] == "validation"
    assert ToolInvocation.objects.filter(tool_call_id="v1-call", executed=True, ok=True).count() == 1
