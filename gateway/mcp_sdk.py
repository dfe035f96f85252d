"""The one place that reaches past the MCP SDK's public API (mcp 2.3.0, pinned in requirements.txt).

After a first `tools/call`, the SDK's client lists the server's tools to validate the result against the
*live* output schema. Toolgate validates against the definition an operator approved instead, and must
never fetch or trust the live listing on the call path, so both callers (the upstream client and the MCP
host's relay) hand the SDK a listing of their own first, through `ClientSession._absorb_tool_listing`,
which has no public twin. tests/arch/test_private_dependency_names.py pins the version and holds the
name to what this module takes it to mean; a new SDK version fails that test until someone checks again.
"""

from __future__ import annotations

from collections.abc import Iterable

import mcp_types as types
from mcp import Client


def absorb_tool_listing(client: Client, tools: Iterable[types.Tool]) -> None:
    """Make `client` take `tools` as (part of) the server's listing, so a call does not list tools itself."""
    client.session._absorb_tool_listing(types.ListToolsResult(tools=list(tools)), complete=False)
