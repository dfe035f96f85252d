"""Progress and cancellation from stdio upstreams: the child's reports reach an SDK client through /mcp.

Real parts: the MCP host under uvicorn on loopback (one for the module), children started
through the SDK's stdio client (tests/support/stdio_progress_server.py, and the published
server-everything over npx, skipped with the reason when npm cannot fetch it), Toolgate's
/mcp on Django's live server, and the official SDK client in both eras.
"""

from __future__ import annotations

import asyncio
import io
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from gateway.models import McpServer
from gateway.upstream.services import mcp_server_discover, mcp_tool_approve
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.gateway.upstream.conftest import server_everything_fetched
from tools_app.models import ToolInvocation
from tools_app.services import tool_set_enabled

SCRIPT = Path(__file__).resolve().parents[2] / "support" / "stdio_progress_server.py"
COMMAND = f"{shlex.quote(sys.executable)} {shlex.quote(str(SCRIPT))}"
SECRET = "sk-progress-7c1d2e3f4a5b6c7d8e9f"
MODES = {"legacy": "legacy", "modern": "2026-07-28"}
EVERYTHING = "npx -y @modelcontextprotocol/server-everything stdio"


@pytest.fixture
def key(host, settings, transactional_db, monkeypatch) -> str:
    settings.TOOLGATE_MCP_HOST_URL, settings.TOOLGATE_MCP_HOST_TOKEN = host.url, host.token
    settings.TOOLGATE_MCP_HOST_SANDBOX = "none"
    settings.TOOLGATE_MCP_CHILD_MEMORY_MB = 4096
    monkeypatch.setenv("PROGRESS_SOURCE", SECRET)
    tenant = TenantFactory(slug="acme-co")
    _account, key = service_account_with_key(tenant, name="agent")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["mcp__prog__*", "mcp__everything__*"])
    enable("prog", COMMAND, "--secret-env", "PROGRESS_TOKEN=PROGRESS_SOURCE")
    return key


def enable(slug: str, command: str, *args: str) -> list[str]:
    call_command("mcp_upstream", "add", slug, "--command", command, *args, stdout=io.StringIO())
    report = mcp_server_discover(server_id=McpServer.objects.get(slug=slug).pk)
    for tool_id in report.new:
        mcp_tool_approve(tool_id=tool_id, via="test")
    tool_set_enabled(tool_ids=list(report.new), enabled=True)
    return list(report.new)


def client_run(url: str, key: str, mode: str, scenario: Any, **options: Any) -> Any:
    async def run() -> Any:
        async with (
            create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http), mode=mode, **options) as client,
        ):
            return await scenario(client)

    return asyncio.run(run())


def call_with_progress(url: str, key: str, mode: str, tool_id: str, arguments: dict) -> tuple[Any, list, float]:
    """The call's result, each progress event with the time it came, and the time the result came."""
    seen: list[tuple[float, float | None, str | None, float]] = []

    async def scenario(client: Client) -> Any:
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append((progress, total, message, time.monotonic()))

        result = await client.call_tool(tool_id, arguments, progress_callback=on_progress)
        return result, time.monotonic()

    result, answered_at = client_run(url, key, mode, scenario)
    return result, seen, answered_at


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_a_stdio_childs_progress_reaches_the_sdk_client_before_the_result(live_server, key, era):
    result, seen, answered_at = call_with_progress(live_server.url, key, MODES[era], "mcp__prog__count", {"steps": 3})

    assert result.is_error is False
    assert result.content[0].text == "counted 3"
    assert [(progress, total, message) for progress, total, message, _ in seen] == [
        (1, 3, "step 1"),
        (2, 3, "step 2"),
        (3, 3, "step 3"),
    ]
    assert seen[0][3] < answered_at - 0.05  # the first came while the child still ran, not with the answer
    (row,) = ToolInvocation.objects.filter(tool_id="mcp__prog__count")
    assert (row.ok, row.state) == (True, ToolInvocation.State.DONE)


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")  # the client's set_logging_level
def test_a_stdio_childs_log_messages_reach_the_sdk_client_at_its_level_without_a_secret(live_server, key, era):
    seen: list[tuple[str, str | None, Any]] = []

    async def on_log(params: Any) -> None:
        seen.append((params.level, params.logger, params.data))

    async def scenario(client: Client) -> Any:
        if era == "legacy":
            await client.set_logging_level("info")
        return await client.call_tool("mcp__prog__talk", {"name": "PROGRESS_TOKEN"})

    options: dict[str, Any] = {"logging_callback": on_log, **({"log_level": "info"} if era == "modern" else {})}
    result = client_run(live_server.url, key, MODES[era], scenario, **options)

    assert result.content[0].text == "talked"
    assert seen == [("info", "talk", {"said": "info line"})]  # no debug; the warning held the declared secret


def test_a_progress_message_holding_a_declared_secret_arrives_without_its_text(live_server, key):
    result, seen, _ = call_with_progress(live_server.url, key, "auto", "mcp__prog__leak", {"name": "PROGRESS_TOKEN"})

    assert result.content[0].text == "leaked"
    assert [(progress, total, message) for progress, total, message, _ in seen] == [(1, 1, None)]


def test_a_cancel_mid_call_reaches_the_stdio_child_and_the_row_says_cancelled(live_server, key, tmp_path):
    marker = tmp_path / "hang.marker"

    async def scenario(client: Client) -> None:
        started = asyncio.Event()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            started.set()

        call = asyncio.ensure_future(
            client.call_tool("mcp__prog__hang", {"marker": str(marker)}, progress_callback=on_progress)
        )
        await asyncio.wait_for(started.wait(), 20)
        call.cancel()  # the SDK sends notifications/cancelled for it and leaves the stream
        with pytest.raises(asyncio.CancelledError):
            await call
        await asyncio.sleep(0.5)  # the SDK posts its notifications/cancelled in the background

    client_run(live_server.url, key, "2026-07-28", scenario)

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not marker.exists():
        time.sleep(0.05)
    assert marker.read_text() == "cancelled"  # the child's handler itself was cancelled
    while time.monotonic() < deadline and not ToolInvocation.objects.filter(error_code="cancelled").exists():
        time.sleep(0.05)
    (row,) = ToolInvocation.objects.filter(tool_id="mcp__prog__hang")
    assert (row.state, row.ok, row.error_code) == (ToolInvocation.State.DONE, False, "cancelled")


def test_server_everythings_long_running_operation_reports_progress_through_toolgate(live_server, key, host):
    server_everything_fetched(host)
    tool_ids = enable("everything", EVERYTHING)
    (tool_id,) = [tool_id for tool_id in tool_ids if "long" in tool_id]

    result, seen, answered_at = call_with_progress(live_server.url, key, "auto", tool_id, {"duration": 1, "steps": 3})

    assert result.is_error is not True
    assert [(progress, total) for progress, total, _message, _ in seen] == [(1, 3), (2, 3), (3, 3)]
    assert seen[0][3] < answered_at
