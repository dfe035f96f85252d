"""Toolgate as an MCP server: `POST /mcp` (docs/mcp.md).

A thin interface beside the REST views, in three parts: `wire` turns catalog
specs and runner results into MCP shapes, `protocol` speaks JSON-RPC and both
protocol eras without knowing about HTTP frameworks, and `views` is the DRF
view that authenticates, parses and hands the protocol the caller's catalog
(`tool_catalog`) and the runner (`tool_exec`). Stateless: nothing survives a
request, so any process answers any request.
"""
