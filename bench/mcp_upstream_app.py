"""The upstream of the MCP benchmark: an SDK MCPServer (stateless 2026-07-28, JSON) under uvicorn,
or the same server over stdio (run by Toolgate's MCP host).

python -m bench.mcp_upstream_app PORT
python bench/mcp_upstream_app.py stdio
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


def mcp_server() -> MCPServer:
    server = MCPServer(name="bench-upstream")
    server.add_tool(add, annotations=ToolAnnotations(readOnlyHint=True))
    return server


def app(port: int):
    server = mcp_server()
    security = TransportSecuritySettings(allowed_hosts=[f"127.0.0.1:{port}"], allowed_origins=[])
    return server.streamable_http_app(stateless_http=True, json_response=True, transport_security=security)


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        mcp_server().run("stdio")
        sys.exit(0)
    port = int(sys.argv[1])
    uvicorn.run(app(port), host="127.0.0.1", port=port, log_level="warning", access_log=False)
