"""Real upstream MCP servers (SDK MCPServer under uvicorn) and the rows that register them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from mcp_types import ToolAnnotations
from pydantic import BaseModel

from tests.support.mcp_upstream import McpUpstream
from tools_app.upstream.models import McpTool
from tools_app.upstream.services import mcp_server_register, mcp_tool_approval_preview


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
