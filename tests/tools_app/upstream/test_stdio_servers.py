"""stdio servers people actually run through the MCP host: Node servers that call fetch() under
the default limits, npm packages installed when the server is added (so a child without network
starts), folders bound per server, commands the sandbox cannot run refused at add, and slow
starts that say a retry will work.

Real parts: the host under uvicorn on loopback, bubblewrap when usable here, Node 20, npm and the
published @modelcontextprotocol servers (skipped with the reason when npm cannot fetch them).
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest
from django.core.management import call_command

from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import api_client
from tests.support.mcp_host import McpHostThread
from tools_app.models import McpServer
from tools_app.services import tool_set_enabled
from tools_app.upstream.host.sandbox import bwrap_problem, find_bwrap
from tools_app.upstream.host.serve import host_config
from tools_app.upstream.services import mcp_server_discover, mcp_tool_approve

SUPPORT = Path(__file__).resolve().parents[2] / "support"
NODE = shutil.which("node")
BWRAP_PROBLEM = bwrap_problem(find_bwrap())
SANDBOX = "bwrap" if BWRAP_PROBLEM is None else "none"
EXEC = "/api/v1/tools/exec"
ALLOWED = [
    "mcp__nodefetch__fetch_loopback",
    "mcp__everything__echo",
    "mcp__memory__create_entities",
    "mcp__memory__read_graph",
    "mcp__files__write_file",
    "mcp__files__read_text_file",
    "mcp__slow__add",
]


class _Out:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass


def add_server(slug: str, *args: str) -> str:
    out = _Out()
    call_command("mcp_server", "add", slug, *args, stdout=out)
    return out.text


@pytest.fixture
def caller(transactional_db):
    tenant = TenantFactory(slug="acme-co")
    _account, key = service_account_with_key(tenant, name="agent")
    ToolPolicyFactory(tenant=tenant, allowed_tools=ALLOWED)
    return key


@pytest.fixture
def host(tmp_path, settings):
    """The host with the default limits of settings (nothing lowered or raised for the test)."""
    settings.TOOLGATE_MCP_HOST_DIR = str(tmp_path / "mcp_host")
    config = host_config(sandbox=SANDBOX, sweep_s=0.2)
    with McpHostThread(config) as running:
        settings.TOOLGATE_MCP_HOST_URL, settings.TOOLGATE_MCP_HOST_TOKEN = running.url, running.token
        yield running


def enable(slug: str, *tools: str) -> list[str]:
    server = McpServer.objects.get(slug=slug)
    report = mcp_server_discover(server_id=server.pk)
    tool_ids = [f"mcp__{slug}__{tool}" for tool in tools]
    assert set(tool_ids) <= set(report.new), report.new
    for tool_id in tool_ids:
        mcp_tool_approve(tool_id=tool_id, via="test")
    tool_set_enabled(tool_ids=tool_ids, enabled=True)
    return tool_ids


def call(key: str, tool_id: str, args: dict) -> dict:
    response = api_client(key).post(EXEC, {"tool_id": tool_id, "args": args}, format="json")
    assert response.status_code == 200, response.json()
    return response.json()["value"]


def text_of(value: dict) -> str:
    return json.dumps(value)


# --- memory: Node's fetch() under the default limits ------------------------------------------------


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_a_node_server_that_calls_fetch_runs_under_the_default_memory_limit(host, caller, settings):
    assert settings.TOOLGATE_MCP_CHILD_MEMORY_MB == 4096  # the shipped default, not a test's
    script = SUPPORT / "fetch_server.mjs"
    if SANDBOX == "bwrap":  # Toolgate's tree is hidden from the child: the script travels in the command
        command = shlex.join([NODE, "--input-type=module", "-e", script.read_text()])
    else:
        command = shlex.join([NODE, str(script)])
    add_server("nodefetch", "--command", command)
    [tool_id] = enable("nodefetch", "fetch_loopback")

    value = call(caller, tool_id, {"word": "hello"})

    assert "served:hello" in text_of(value), value
    assert "WebAssembly" not in text_of(value)
