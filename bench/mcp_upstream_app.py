"""The upstream of the MCP benchmark: an SDK MCPServer (stateless 2026-07-28, JSON) under uvicorn.

python -m bench.mcp_upstream_app PORT
"""

from __future__ import annotations

import sys

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import ToolAnnotations


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def app(port: int):
    server = MCPServer(name="bench-upstream")
    server.add_tool(add, annotations=ToolAnnotations(readOnlyHint=True))
    security = TransportSecuritySettings(allowed_hosts=[f"127.0.0.1:{port}"], allowed_origins=[])
    return server.streamable_http_app(stateless_http=True, json_response=True, transport_security=security)


if __name__ == "__main__":
    port = int(sys.argv[1])
    uvicorn.run(app(port), host="127.0.0.1", port=port, log_level="warning", access_log=False)
