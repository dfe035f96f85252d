"""The MCP Inspector's CLI (2.x, the version people install today) against /mcp on a live server.

The Inspector opens the optional `GET /mcp` stream before it lists or calls; an
answer other than 405 is an error to it ("Failed to open SSE stream"), which made
it lose the tool list most of the time under gunicorn: each command runs several
times, every run must see the tools and the result, and the server's access log
must show the probe answered 405 each time.
"""

from __future__ import annotations

import io
import json
import subprocess

import pytest
from django.core.management import call_command
from structlog.testing import capture_logs

from policies_app.governance import governance_bump
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.node_tools import node_at_least, npm_install
from tools_app.models import Tool, ToolInvocation

# The first run installs Node 22 and the Inspector (about a minute each here).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(900)]

INSPECTOR = "@modelcontextprotocol/inspector"
INSPECTOR_VERSION = "2.12.0"
TIME = "core__get_current_time"
RUNS = 3


@pytest.fixture(scope="module")
def inspector() -> list[str]:
    """The argv that starts the Inspector's CLI under a Node it accepts."""
    node = node_at_least(22)
    prefix = npm_install(INSPECTOR, INSPECTOR_VERSION)
    launcher = prefix / "node_modules" / INSPECTOR / "clients" / "launcher" / "build" / "index.js"
    return [node, str(launcher), "--cli"]


@pytest.fixture
def key() -> str:
    call_command("sync_tools", stdout=io.StringIO())
    Tool.objects.filter(pk__in=[TIME, "core__wait"]).update(is_enabled=True)
    governance_bump()
    account, key = service_account_with_key(TenantFactory(slug="acme"), name="inspector")
    ToolPolicyFactory(tenant=account.tenant, allowed_tools=[TIME, "core__wait"])
    return key


def run_inspector(inspector: list[str], url: str, key: str, *args: str) -> dict:
    result = subprocess.run(
        [*inspector, f"{url}/mcp", "--transport", "http", "--header", f"Authorization: Bearer {key}", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, (result.stdout[-500:], result.stderr[-500:])
    return json.loads(result.stdout)


def stream_probe_statuses(events: list[dict]) -> list[int]:
    """What the live server answered each `GET /mcp` (its access log, one line per request)."""
    return [event["status"] for event in events if event.get("method") == "GET" and event.get("path") == "/mcp"]


def test_the_inspector_lists_the_catalog_every_time(inspector, live_server, key):
    with capture_logs() as events:
        listings = [run_inspector(inspector, live_server.url, key, "--method", "tools/list") for _ in range(RUNS)]

    assert stream_probe_statuses(events) == [405] * RUNS  # the Inspector took its optional stream probe each time
    assert [sorted(tool["name"] for tool in listing["tools"]) for listing in listings] == [
        ["core__get_current_time", "core__wait"]
    ] * RUNS


def test_the_inspector_calls_a_tool_every_time(inspector, live_server, key):
    results = [
        run_inspector(
            inspector, live_server.url, key, "--method", "tools/call", "--tool-name", TIME, "--tool-arg", "timezone=UTC"
        )
        for _ in range(RUNS)
    ]

    assert [(result.get("isError"), result["structuredContent"]["timezone"]) for result in results] == [
        (False, "UTC")
    ] * RUNS
    assert ToolInvocation.objects.filter(tool_id=TIME, ok=True).count() == RUNS
