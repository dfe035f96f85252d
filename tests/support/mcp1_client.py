"""A 1.x MCP client session against Toolgate, run with .venv-mcp1's interpreter (mcp<2, httpx).

The 1.x SDK cannot share a virtualenv with mcp 2.x, so the interoperability
test runs this file in a subprocess. It reads the endpoint from MCP_URL, the
API key from TOOLGATE_MCP_KEY (never argv: the process list is public) and a
JSON plan from stdin, then prints one JSON document with what the session saw:

    {"calls": [{"name": "...", "arguments": {...}, "meta": {...}}, ...]}
    -> {"protocol_version": "...", "tools": [{"name", "inputSchema", "outputSchema", "annotations"}],
        "pages": N, "calls": [{"is_error", "structured", "text", "meta"} | {"error_code", "message"}]}

It imports nothing from the project: only the 1.x SDK and the standard library.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError


async def run(plan: dict[str, Any]) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {os.environ['TOOLGATE_MCP_KEY']}"}
    async with (
        streamablehttp_client(os.environ["MCP_URL"], headers=headers) as (read, write, _session_id),
        ClientSession(read, write) as session,
    ):
        initialized = await session.initialize()
        tools: list[dict[str, Any]] = []
        pages = 0
        cursor = None
        while True:
            listed = await session.list_tools(cursor=cursor)
            pages += 1
            tools += [tool.model_dump(by_alias=True, exclude_none=True, mode="json") for tool in listed.tools]
            cursor = listed.nextCursor
            if cursor is None:
                break
        calls = []
        for call in plan["calls"]:
            try:
                result = await session.call_tool(call["name"], call.get("arguments"), meta=call.get("meta"))
            except McpError as exc:
                calls.append({"error_code": exc.error.code, "message": exc.error.message})
                continue
            calls.append(
                {
                    "is_error": result.isError,
                    "structured": result.structuredContent,
                    "text": result.content[0].text if result.content else None,
                    "meta": result.meta,
                }
            )
    return {"protocol_version": initialized.protocolVersion, "tools": tools, "pages": pages, "calls": calls}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run(json.load(sys.stdin)))))
