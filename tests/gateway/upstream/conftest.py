"""Real upstream MCP servers (SDK MCPServer under uvicorn) and the rows that register them."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest
from django.test import override_settings
from mcp_types import ToolAnnotations
from pydantic import BaseModel

from gateway.host.serve import host_config
from gateway.upstream.models import McpTool
from gateway.upstream.services import mcp_server_register, mcp_tool_approval_preview
from tests.support.mcp_host import McpHostThread
from tests.support.mcp_upstream import McpUpstream


class Issue(BaseModel):
    number: int
    title: str
    labels: list[str]


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def get_issue(number: int) -> Issue:
    """Read one issue."""
    return Issue(number=number, title=f"Bug report {number}", labels=["bug"])


async def slow(ms: int) -> str:
    """Sleep for ms milliseconds, then answer."""
    await asyncio.sleep(ms / 1000)
    return f"slept {ms}"


def big(size: int) -> str:
    """Answer `size` characters of text."""
    return "x" * size


def fail() -> str:
    """Always fails."""
    raise ValueError("Traceback: /srv/secret/path.py line 3 password=hunter2")


def install_tools(upstream: McpUpstream) -> None:
    server = upstream.server
    server.add_tool(add, annotations=ToolAnnotations(readOnlyHint=True))
    server.add_tool(get_issue, annotations=ToolAnnotations(readOnlyHint=True))
    server.add_tool(slow, structured_output=False)
    server.add_tool(big, structured_output=False)
    server.add_tool(fail, structured_output=False)


@pytest.fixture
def allow_private(settings) -> None:
    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = True


@pytest.fixture(params=["legacy", "modern"])
def upstream(request) -> Iterator[McpUpstream]:
    """One upstream per protocol era: a 2025-11-25 server with sessions, a stateless 2026-07-28 one."""
    with McpUpstream(legacy=request.param == "legacy") as server:
        install_tools(server)
        yield server


@pytest.fixture
def legacy_upstream() -> Iterator[McpUpstream]:
    with McpUpstream(legacy=True) as server:
        install_tools(server)
        yield server


@pytest.fixture
def registered(allow_private, upstream):
    server, _ = mcp_server_register(slug="acme", url=upstream.url)
    return server


def shown_hash(tool: McpTool) -> str:
    """The schema hash an approve page shows (and posts back) for this tool."""
    return mcp_tool_approval_preview(tool).schema_hash


def server_everything_fetched(host) -> None:
    """Fetch @modelcontextprotocol/server-everything into its child's private HOME first, within a bound;
    skip, saying why, when npx is missing or npm cannot fetch it (the child itself starts with no download)."""
    npx = shutil.which("npx")
    if npx is None:
        pytest.skip("npx is not installed")
    home = host.app.supervisor.config.root / "children" / "everything" / "shared" / "home"
    home.mkdir(parents=True, exist_ok=True)
    try:
        warm = subprocess.run(
            [npx, "-y", "@modelcontextprotocol/server-everything", "stdio"],
            env={"PATH": os.environ["PATH"], "HOME": str(home)},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=180,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.skip("npx could not fetch @modelcontextprotocol/server-everything within 180 s")
    if b"npm error" in warm.stderr.lower() or b"npm err!" in warm.stderr.lower():
        pytest.skip("npx could not fetch @modelcontextprotocol/server-everything (npm error)")


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> Iterator[McpHostThread]:
    """An MCP host on a thread for a whole test module, without a sandbox (files with their own override it)."""
    root = tmp_path_factory.mktemp("mcp_host")
    with override_settings(TOOLGATE_MCP_CHILD_MEMORY_MB=4096):
        config = host_config(sandbox="none", root=root, sweep_s=0.2)
    with McpHostThread(config) as running:
        yield running
