"""Log messages through /mcp: a live SDK upstream that logs, the SDK client in both eras.

The upstream is the SDK's MCPServer answering event streams, a 2025-11-25 one with sessions
and a stateless 2026-07-28 one; the client is the official SDK 2.x in `legacy` mode (it asks
with `logging/setLevel`) and in `2026-07-28` mode (it asks with `_meta` on each request).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import Context
from mcp.shared._httpx_utils import create_mcp_http_client

from gateway.upstream.client import LOG_DATA_MAX_CHARS
from gateway.upstream.services import mcp_server_discover, mcp_server_register, mcp_tool_approve
from policies_app.models import ToolPolicy
from runner.progress import DEFAULT_MAX_EVENTS
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.mcp_upstream import McpUpstream
from tools_app.models import ToolInvocation
from tools_app.services import tool_set_enabled

# The SDK marks logging deprecated (2026-07-28, SEP-2577); the upstream's ctx.log and the client's
# set_logging_level warn, which this suite otherwise turns into errors.
pytestmark = [
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
    pytest.mark.django_db(transaction=True),
]

TOKEN = "tok-operator-5f4e3d2c1b0a9f8e"
TOOLS = ("mcp__up__chatty", "mcp__up__noisy", "mcp__up__endless")
MODES = {"legacy": "legacy", "modern": "2026-07-28"}


def install(upstream: McpUpstream) -> None:
    async def chatty(ctx: Context) -> str:
        """Log once at each of four levels, one holding a hidden character, a secret, and a huge one."""
        await ctx.log("debug", "debug line", logger_name="db")
        await ctx.log("info", {"step": "info\u202e line"}, logger_name="db")
        await ctx.log("warning", f"the token is {TOKEN}")  # the call's credential: never passed on
        await ctx.log("warning", {"rows": ["x" * 100] * 100})
        await asyncio.sleep(0.1)
        await ctx.log("error", "error line", logger_name="db")
        return "chatted"

    async def noisy(events: int, ctx: Context) -> str:
        """Interleave `events` progress reports and `events` log messages, as fast as it can."""
        for event in range(events):
            await ctx.report_progress(event, events)
            await ctx.log("info", f"line {event}")
        return "noisy"

    async def endless(ctx: Context) -> str:
        """Log forever: the answer never comes."""
        while True:
            await ctx.log("info", "still going")
            await asyncio.sleep(0.05)

    for fn in (chatty, noisy, endless):
        upstream.server.add_tool(fn, structured_output=False)


@pytest.fixture(params=["legacy", "modern"])
def era(request) -> str:
    return request.param


@pytest.fixture
def upstream(era):
    with McpUpstream(legacy=era == "legacy", json_response=False) as server:
        install(server)
        yield server


@pytest.fixture
def key(settings, upstream):
    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = True
    tenant = TenantFactory(slug="acme")
    _account, key = service_account_with_key(tenant, name="agent")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["mcp__up__*"])
    server, _ = mcp_server_register(slug="up", url=upstream.url, operator_token=TOKEN)
    mcp_server_discover(server_id=server.pk)
    for tool_id in TOOLS:
        mcp_tool_approve(tool_id=tool_id, via="test")
    tool_set_enabled(tool_ids=list(TOOLS), enabled=True)
    return key


def client_run(url: str, key: str, mode: str, scenario: Any, **options: Any) -> Any:
    async def run() -> Any:
        async with (
            create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http), mode=mode, **options) as client,
        ):
            return await scenario(client)

    return asyncio.run(run())


def logged_call(url: str, key: str, era: str, tool: str, *, level: str | None) -> tuple[Any, list]:
    """The call's result and each log message with the time it came; `level` is asked for as the era asks."""
    seen: list[tuple[str, str | None, Any, float]] = []

    async def on_log(params: Any) -> None:
        seen.append((params.level, params.logger, params.data, time.monotonic()))

    async def scenario(client: Client) -> Any:
        if level is not None and era == "legacy":
            await client.set_logging_level(level)
        result = await client.call_tool(tool, {})
        return result, time.monotonic()

    options: dict[str, Any] = {"logging_callback": on_log}
    if level is not None and era == "modern":
        options["log_level"] = level
    result, answered_at = client_run(url, key, MODES[era], scenario, **options)
    assert all(at <= answered_at for *_, at in seen)
    return result, seen


def test_log_messages_at_or_above_the_clients_level_arrive_cleaned_before_the_result(live_server, key, era):
    result, seen = logged_call(live_server.url, key, era, "mcp__up__chatty", level="info")

    assert result.content[0].text == "chatted"
    levels = [(level, logger) for level, logger, _data, _at in seen]
    assert levels == [("info", "db"), ("warning", None), ("error", "db")]  # no debug; the secret's line dropped
    assert seen[0][2] == {"step": "info[U+202E] line"}
    huge = seen[1][2]
    assert isinstance(huge, str)
    assert huge.startswith('{"rows":["xxx')
    assert huge.endswith(" [cut]")
    assert len(huge) == LOG_DATA_MAX_CHARS + len(" [cut]")
    assert seen[2][2] == "error line"
    (row,) = ToolInvocation.objects.filter(tool_id="mcp__up__chatty")
    assert row.ok


def test_a_client_that_asked_for_no_level_gets_no_log_messages_and_the_plain_answer(live_server, key, upstream, era):
    result, seen = logged_call(live_server.url, key, era, "mcp__up__chatty", level=None)

    assert result.content[0].text == "chatted"
    assert seen == []
    (call,) = [r for r in upstream.requests if r.rpc_method == "tools/call"]
    assert "io.modelcontextprotocol/logLevel" not in (call.meta or {})  # nothing asked of the upstream either


def test_log_messages_and_progress_share_the_calls_event_cap(live_server, key, era):
    progressed: list[float] = []
    logged: list[Any] = []

    async def on_log(params: Any) -> None:
        logged.append(params.data)

    async def scenario(client: Client) -> Any:
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            progressed.append(progress)

        if era == "legacy":
            await client.set_logging_level("debug")
        return await client.call_tool("mcp__up__noisy", {"events": 300}, progress_callback=on_progress)

    options: dict[str, Any] = {"logging_callback": on_log, **({"log_level": "debug"} if era == "modern" else {})}
    result = client_run(live_server.url, key, MODES[era], scenario, **options)

    assert result.content[0].text == "noisy"
    assert len(progressed) + len(logged) == DEFAULT_MAX_EVENTS
    assert progressed
    assert logged
    assert logged == [f"line {event}" for event in range(len(logged))]


def test_a_call_that_logs_forever_on_its_own_session_is_cut_at_the_runtime_budget(live_server, key, era):
    ToolPolicy.objects.update(max_runtime_ms=1000)

    result, seen = logged_call(live_server.url, key, era, "mcp__up__endless", level="info")

    assert result.content[0].text == "timeout: the tool ran past its 1000 ms budget"
    assert seen  # the lines came while it ran
    (row,) = ToolInvocation.objects.filter(tool_id="mcp__up__endless")
    assert (row.ok, row.error_code) == (False, "timeout")


@pytest.mark.parametrize("era", ["legacy"])  # what is advertised does not depend on the upstream's era
@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_logging_is_advertised_only_to_a_caller_whose_catalog_can_log(live_server, key, mode):
    other_tenant = TenantFactory(slug="plain")
    _account, plain_key = service_account_with_key(other_tenant, name="agent")
    ToolPolicyFactory(tenant=other_tenant, allowed_tools=["core__get_current_time"])

    async def capabilities(client: Client) -> Any:
        return client.server_capabilities

    assert client_run(live_server.url, key, mode, capabilities).logging is not None
    assert client_run(live_server.url, plain_key, mode, capabilities).logging is None


@pytest.mark.parametrize("era", ["legacy"])  # nor do the wire's checks
def test_levels_are_checked_and_a_handshake_level_needs_the_session_initialize_gave(live_server, key):
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream"}
    legacy = {**headers, "MCP-Protocol-Version": "2025-11-25"}
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}

    def post(method: str, params: dict, extra: dict) -> httpx.Response:
        message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        return httpx.post(f"{live_server.url}/mcp", json=message, headers=extra, timeout=10)

    session_id = post("initialize", init, headers).headers["Mcp-Session-Id"]
    without_session = post("logging/setLevel", {"level": "info"}, legacy)
    not_a_level = post("logging/setLevel", {"level": "loud"}, {**legacy, "Mcp-Session-Id": session_id})
    set_level = post("logging/setLevel", {"level": "error"}, {**legacy, "Mcp-Session-Id": session_id})
    streamed = post("tools/call", {"name": "mcp__up__chatty"}, {**legacy, "Mcp-Session-Id": session_id})
    modern_meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/logLevel": "loud",
    }
    modern_headers = {**headers, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call"}
    modern_headers["Mcp-Name"] = "mcp__up__chatty"
    modern = post("tools/call", {"name": "mcp__up__chatty", "_meta": modern_meta}, modern_headers)

    assert without_session.json()["error"]["code"] == -32600
    assert not_a_level.json()["error"]["code"] == -32602
    assert set_level.json()["result"] == {}
    assert streamed.headers["content-type"].startswith("text/event-stream")  # no progressToken: logs alone open it
    messages = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: ")]
    assert [(m.get("method"), m.get("params", {}).get("level")) for m in messages] == [
        ("notifications/message", "error"),
        (None, None),
    ]
    assert (modern.status_code, modern.json()["error"]["code"]) == (400, -32602)
    assert ToolInvocation.objects.filter(tool_id="mcp__up__chatty").count() == 1  # the refused one never ran
