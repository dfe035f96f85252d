"""`/mcp/t/<toolset>` and `?mode=search` with real SDK clients in both protocol eras.

A live server on loopback; the SDK 2.x client in `legacy` (initialize handshake)
and `2026-07-28` modes. What each endpoint shows and runs is compared with the
audit rows: a toolset only narrows, a search only ranks what the caller could
list anyway and is a governed tool of its own (kill switch, policy, person,
budgets, the runner's audit row), and a call through `toolgate__call_tool` is
the target's own call.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import pytest
from django.core.management import call_command
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from policies_app.governance import governance_bump
from policies_app.models import ServiceAccount, Tenant, ToolPolicy
from policies_app.services import delegation_create
from tests.factories import MembershipFactory, TenantFactory, ToolPolicyFactory, UserFactory, service_account_with_key
from tests.support.rate_window import room_in_the_rate_window
from tools_app.models import Tool, ToolInvocation
from tools_app.toolsets import toolset_save

pytestmark = pytest.mark.django_db(transaction=True)

SDK_MODES = ("legacy", "2026-07-28")
SEARCH = "toolgate__search_tools"
T = TypeVar("T")


def session(url: str, key: str, mode: str, fn: Callable[[Client], Awaitable[T]]) -> T:
    async def run() -> T:
        async with (
            create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as http,
            Client(streamable_http_client(url, http_client=http), mode=mode) as client,
        ):
            return await fn(client)

    return asyncio.run(run())


def leaf(error: BaseException) -> BaseException:
    """The SDK may wrap a refusal in ExceptionGroups (its task groups): the leaf is the refusal."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


async def names(client: Client) -> list[str]:
    return [tool.name for tool in (await client.list_tools()).tools]


@pytest.fixture
def acme(live_server):
    """acme/agent may run core__get_current_time, core__wait, github__get_user and the search tool;
    github__create_issue is enabled but not allowed; acme has toolset `clock` (time tag + core__wait +
    github__create_issue)."""
    call_command("sync_tools", stdout=io.StringIO())
    Tool.objects.update(is_enabled=True)
    governance_bump()
    tenant = TenantFactory(slug="acme")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["core__get_current_time", "core__wait", "github__get_user", SEARCH])
    _account, key = service_account_with_key(tenant, name="agent")
    toolset_save(tenant_id=tenant.pk, name="clock", tool_ids=["core__wait", "github__create_issue"], tags=["time"])
    other = TenantFactory(slug="globex")
    toolset_save(tenant_id=other.pk, name="theirs", tool_ids=["github__get_user"])
    return live_server.url, key


@pytest.mark.parametrize("mode", SDK_MODES)
def test_a_toolset_endpoint_lists_and_runs_only_its_tools(acme, mode):
    url, key = acme

    async def scenario(client: Client) -> tuple[list[str], Any, BaseException]:
        listed = await names(client)
        ran = await client.call_tool("core__wait", {"ms": 0}, meta={"toolgate/tool_call_id": f"in-{mode}"})
        try:
            await client.call_tool("github__get_user", {}, meta={"toolgate/tool_call_id": f"out-{mode}"})
        except BaseException as refused:
            return listed, ran, leaf(refused)
        raise AssertionError("a tool outside the toolset ran")

    listed, ran, refused = session(f"{url}/mcp/t/clock", key, mode, scenario)

    assert listed == ["core__get_current_time", "core__wait"]  # github__create_issue: in the set, not allowed
    assert ran.is_error is False
    assert isinstance(refused, MCPError)
    assert refused.error.code == -32602
    assert str(refused.error.message) == "unknown tool"
    rows = dict(ToolInvocation.objects.values_list("tool_call_id", "error_code"))
    assert rows == {f"in-{mode}": "", f"out-{mode}": "unavailable"}  # the refused call is audited too


@pytest.mark.parametrize("mode", SDK_MODES)
def test_a_tool_outside_the_toolset_answers_as_one_outside_the_catalog(acme, mode):
    """Allowed-but-outside, not allowed, and nonexistent: one answer (-32602 `unknown tool`)."""
    url, key = acme

    async def scenario(client: Client) -> list[tuple[int, str]]:
        answers = []
        for name in ("github__get_user", "github__create_issue", "nothing__here"):
            try:
                await client.call_tool(name, {})
            except BaseException as refused:
                error = leaf(refused)
                assert isinstance(error, MCPError)
                answers.append((error.error.code, error.error.message))
        return answers

    assert session(f"{url}/mcp/t/clock", key, mode, scenario) == [(-32602, "unknown tool")] * 3


@pytest.mark.parametrize("toolset", ["theirs", "nobody-uses-this"])
def test_an_unknown_or_another_tenants_toolset_is_404_before_anything_else(acme, toolset):
    url, key = acme
    response = httpx.post(
        f"{url}/mcp/t/{toolset}",
        headers={"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream"},
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        timeout=10,
    )
    assert response.status_code == 404
    assert response.json()["error"]["message"] == "no such toolset"

    with pytest.raises(BaseException) as raised:  # noqa: PT011 - the SDK's own transport error
        session(f"{url}/mcp/t/{toolset}", key, "legacy", names)
    assert "github__get_user" not in repr(raised.value)


def test_an_unknown_mode_is_refused(acme):
    url, key = acme
    response = httpx.post(
        f"{url}/mcp?mode=everything",
        headers={"Authorization": f"Bearer {key}"},
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        timeout=10,
    )
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith("unknown mode")


@pytest.mark.parametrize("mode", SDK_MODES)
def test_search_mode_lists_the_two_meta_tools_and_finds_only_callable_tools(acme, mode):
    url, key = acme

    async def scenario(client: Client) -> tuple[list[str], Any, Any]:
        listed = await names(client)
        found = await client.call_tool(
            "toolgate__search_tools",
            {"query": "github user issue time", "limit": 10},
            meta={"toolgate/tool_call_id": f"search-{mode}"},
        )
        scoped = None
        return listed, found, scoped

    listed, found, _ = session(f"{url}/mcp?mode=search", key, mode, scenario)

    assert listed == ["toolgate__call_tool", "toolgate__search_tools"]
    assert found.is_error is False
    tools = found.structured_content["tools"]
    # github__create_issue is enabled but not allowed: never found; every result carries its schema
    assert sorted(tool["name"] for tool in tools) == ["core__get_current_time", "github__get_user"]
    assert all(tool["inputSchema"]["type"] == "object" for tool in tools)
    # the runner's own audit row: allowed by the policy, executed, the matches (names only) as its result
    row = ToolInvocation.objects.get(tool_call_id=f"search-{mode}")
    assert (row.tool_id, row.ok, row.decision, row.executed) == (SEARCH, True, "allow", True)
    assert [match["name"] for match in row.result["tools"]] == [tool["name"] for tool in tools]
    assert set(row.result["tools"][0]) == {"name", "title", "description"}


@pytest.mark.parametrize("mode", SDK_MODES)
def test_search_mode_on_a_toolset_searches_only_the_toolset(acme, mode):
    url, key = acme

    async def scenario(client: Client) -> Any:
        return await client.call_tool("toolgate__search_tools", {"query": "github user time wait"})

    found = session(f"{url}/mcp/t/clock?mode=search", key, mode, scenario)
    assert sorted(tool["name"] for tool in found.structured_content["tools"]) == [
        "core__get_current_time",
        "core__wait",
    ]


@pytest.mark.parametrize("mode", SDK_MODES)
def test_call_tool_runs_the_target_through_the_runner_with_the_same_ids(acme, mode):
    url, key = acme

    async def scenario(client: Client) -> tuple[Any, Any, Any]:
        ran = await client.call_tool(
            "toolgate__call_tool",
            {"tool_id": "core__get_current_time", "arguments": {"timezone": "UTC"}},
            meta={"toolgate/tool_call_id": f"meta-ok-{mode}", "toolgate/run_id": "run-7"},
        )
        hidden = await client.call_tool(
            "toolgate__call_tool",
            {"tool_id": "github__create_issue", "arguments": {}},
            meta={"toolgate/tool_call_id": f"meta-hidden-{mode}"},
        )
        unknown = await client.call_tool("toolgate__call_tool", {"tool_id": "nothing__here", "arguments": {}})
        return ran, hidden, unknown

    ran, hidden, unknown = session(f"{url}/mcp?mode=search", key, mode, scenario)

    assert ran.is_error is False
    assert ran.structured_content["timezone"] == "UTC"
    row = ToolInvocation.objects.get(tool_call_id=f"meta-ok-{mode}")
    assert (row.tool_id, row.run_id, row.ok) == ("core__get_current_time", "run-7", True)
    # a tool the policy does not allow and one that does not exist: the same refusal text
    assert hidden.is_error is True
    assert unknown.is_error is True
    assert hidden.content[0].text.split(";")[0] == unknown.content[0].text.split(";")[0] == "unavailable: no such tool"
    assert "github__create_issue" not in hidden.content[0].text
    refused = ToolInvocation.objects.get(tool_call_id=f"meta-hidden-{mode}")
    assert (refused.tool_id, refused.error_code) == ("github__create_issue", "policy_denied")


@pytest.mark.parametrize("mode", SDK_MODES)
def test_call_tool_on_a_toolset_endpoint_cannot_leave_the_toolset(acme, mode):
    url, key = acme

    async def scenario(client: Client) -> Any:
        return await client.call_tool(
            "toolgate__call_tool",
            {"tool_id": "github__get_user", "arguments": {}},
            meta={"toolgate/tool_call_id": f"leave-{mode}"},
        )

    answer = session(f"{url}/mcp/t/clock?mode=search", key, mode, scenario)
    assert answer.is_error is True
    assert answer.content[0].text.startswith("unavailable: no such tool")
    assert ToolInvocation.objects.get(tool_call_id=f"leave-{mode}").error_code == "unavailable"


def test_a_plain_tool_name_is_unknown_in_search_mode(acme):
    url, key = acme

    async def scenario(client: Client) -> BaseException:
        try:
            await client.call_tool("core__wait", {"ms": 0})
        except BaseException as refused:
            return leaf(refused)
        raise AssertionError("search mode ran a catalog tool by its own name")

    refused = session(f"{url}/mcp?mode=search", key, "legacy", scenario)
    assert isinstance(refused, MCPError)
    assert refused.error.code == -32602
    assert not ToolInvocation.objects.filter(tool_id="core__wait").exists()


@pytest.mark.parametrize("mode", SDK_MODES)
def test_search_mode_follows_the_persons_delegation(acme, mode):
    """On a person's behalf, search and call see only what the delegation lets the caller run for them."""
    url, key = acme
    account = ServiceAccount.objects.get(name="agent")
    alice = MembershipFactory(tenant=account.tenant, user=UserFactory(username="alice"), role="member").user
    _delegation, token = delegation_create(
        tenant=account.tenant, user=alice, service_account=account, tools=["core__wait", SEARCH]
    )

    async def run() -> tuple[Any, Any]:
        async with (
            create_mcp_http_client(headers={"Authorization": f"Bearer {key}", "X-Toolgate-Subject": token}) as http,
            Client(streamable_http_client(f"{url}/mcp?mode=search", http_client=http), mode=mode) as client,
        ):
            found = await client.call_tool("toolgate__search_tools", {"query": "current time wait github user"})
            outside = await client.call_tool(
                "toolgate__call_tool", {"tool_id": "core__get_current_time", "arguments": {}}
            )
            return found, outside

    found, outside = asyncio.run(run())

    assert [tool["name"] for tool in found.structured_content["tools"]] == ["core__wait"]
    # the runner's authorization stage refuses it, as on plain /mcp (the caller itself may list the tool)
    assert outside.is_error is True
    assert outside.content[0].text.startswith("authz_denied")


# --- the search is a governed tool: switch, policy, person, budgets, the runner's audit -------------------


async def search_or_refusal(client: Client, tool_call_id: str) -> Any:
    """The search's answer, or the JSON-RPC refusal the SDK raised for it."""
    try:
        return await client.call_tool(SEARCH, {"query": "time wait"}, meta={"toolgate/tool_call_id": tool_call_id})
    except BaseException as refused:
        return leaf(refused)


@pytest.mark.parametrize("mode", SDK_MODES)
@pytest.mark.parametrize("why", ["switched-off", "not-in-policy"])
def test_a_search_tool_switched_off_or_outside_the_policy_is_refused_as_an_unknown_tool(acme, mode, why):
    """As a disabled tool answers on plain /mcp: not listed, -32602; the runner audits the refusal."""
    url, key = acme
    if why == "switched-off":
        Tool.objects.filter(pk=SEARCH).update(is_enabled=False)
    else:
        policy = ToolPolicy.objects.get(tenant__slug="acme")
        policy.allowed_tools = [tool for tool in policy.allowed_tools if tool != SEARCH]
        policy.save()
    governance_bump()

    async def scenario(client: Client) -> tuple[list[str], Any]:
        return await names(client), await search_or_refusal(client, f"off-{why}-{mode}")

    listed, refused = session(f"{url}/mcp?mode=search", key, mode, scenario)

    assert listed == ["toolgate__call_tool"]
    assert isinstance(refused, MCPError)
    assert (refused.error.code, refused.error.message) == (-32602, "unknown tool")
    row = ToolInvocation.objects.get(tool_call_id=f"off-{why}-{mode}")
    assert (row.tool_id, row.ok, row.decision, row.error_code, row.executed) == (
        SEARCH,
        False,
        "deny",
        "policy_denied",
        False,
    )
    assert row.result is None


@pytest.mark.parametrize("mode", SDK_MODES)
def test_a_person_whose_delegation_leaves_out_the_search_tool_cannot_search(acme, mode):
    url, key = acme
    account = ServiceAccount.objects.get(name="agent")
    alice = MembershipFactory(tenant=account.tenant, user=UserFactory(username="alice"), role="member").user
    _delegation, token = delegation_create(
        tenant=account.tenant, user=alice, service_account=account, tools=["core__wait"]
    )

    async def run() -> tuple[list[str], Any]:
        async with (
            create_mcp_http_client(headers={"Authorization": f"Bearer {key}", "X-Toolgate-Subject": token}) as http,
            Client(streamable_http_client(f"{url}/mcp?mode=search", http_client=http), mode=mode) as client,
        ):
            return await names(client), await search_or_refusal(client, f"person-{mode}")

    listed, refused = asyncio.run(run())

    assert listed == ["toolgate__call_tool"]
    # the caller itself may list the search tool: the authorization stage's refusal, as on plain /mcp
    assert refused.is_error is True
    assert refused.content[0].text.startswith("authz_denied")
    row = ToolInvocation.objects.get(tool_call_id=f"person-{mode}")
    assert (row.tool_id, row.decision, row.error_code, row.authz_reason) == (
        SEARCH,
        "deny",
        "authz_denied",
        "tool_not_delegated",
    )


@pytest.mark.parametrize("mode", SDK_MODES)
def test_the_policys_budgets_apply_to_searches(acme, mode):
    url, key = acme
    ToolPolicy.objects.filter(tenant__slug="acme").update(rate_limit_per_minute=1)
    governance_bump()

    async def scenario(client: Client) -> tuple[Any, Any]:
        return await search_or_refusal(client, f"first-{mode}"), await search_or_refusal(client, f"second-{mode}")

    room_in_the_rate_window()
    first, second = session(f"{url}/mcp?mode=search", key, mode, scenario)

    assert first.is_error is False
    assert second.is_error is True
    assert second.content[0].text.startswith("rate_limited")
    rows = dict(ToolInvocation.objects.filter(tool_id=SEARCH).values_list("tool_call_id", "error_code"))
    assert rows == {f"first-{mode}": "", f"second-{mode}": "rate_limited"}


@pytest.mark.parametrize("mode", SDK_MODES)
def test_a_search_never_names_a_tool_outside_the_callers_catalog(acme, mode):
    """Another tenant's tool, a disabled one, one outside the policy, outside the toolset: none is found."""
    url, key = acme
    ToolPolicyFactory(
        tenant=Tenant.objects.get(slug="globex"), allowed_tools=["github__create_issue", "github__get_user", SEARCH]
    )
    Tool.objects.filter(pk="github__get_user").update(is_enabled=False)  # acme's policy allows it: disabled now
    governance_bump()
    everything = "github user issue repository time wait milliseconds search tools"

    async def scenario(client: Client) -> Any:
        return await client.call_tool(SEARCH, {"query": everything, "limit": 50})

    plain = session(f"{url}/mcp?mode=search", key, mode, scenario)
    scoped = session(f"{url}/mcp/t/clock?mode=search", key, mode, scenario)

    # the search tool never finds itself; github__create_issue is another tenant's (and outside acme's policy)
    assert sorted(tool["name"] for tool in plain.structured_content["tools"]) == [
        "core__get_current_time",
        "core__wait",
    ]
    assert sorted(tool["name"] for tool in scoped.structured_content["tools"]) == [
        "core__get_current_time",
        "core__wait",
    ]
    audited = [row["tools"] for row in ToolInvocation.objects.filter(tool_id=SEARCH).values_list("result", flat=True)]
    assert sorted({match["name"] for matches in audited for match in matches}) == [
        "core__get_current_time",
        "core__wait",
    ]


@pytest.mark.parametrize("mode", SDK_MODES)
def test_a_toolset_search_ranks_only_the_toolset_while_the_search_tool_stays_outside_it(acme, mode):
    url, key = acme

    async def scenario(client: Client) -> tuple[list[str], Any]:
        listed = await names(client)
        found = await client.call_tool(
            SEARCH, {"query": "github user time wait"}, meta={"toolgate/tool_call_id": f"set-{mode}"}
        )
        return listed, found

    listed, found = session(f"{url}/mcp/t/clock?mode=search", key, mode, scenario)

    assert listed == ["toolgate__call_tool", SEARCH]
    assert sorted(tool["name"] for tool in found.structured_content["tools"]) == [
        "core__get_current_time",
        "core__wait",
    ]
    assert ToolInvocation.objects.get(tool_call_id=f"set-{mode}").tool_id == SEARCH
    # on the toolset's plain endpoint the search tool is outside the set: unknown, as any tool outside it
    refused = session(f"{url}/mcp/t/clock", key, mode, lambda client: search_or_refusal(client, f"plain-{mode}"))
    assert isinstance(refused, MCPError)
    assert refused.error.code == -32602
