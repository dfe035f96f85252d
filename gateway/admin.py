"""The gateway's admin pages: upstream MCP servers, their tools, resources and prompts."""

from __future__ import annotations

from gateway.upstream import admin as upstream_admin  # registers the MCP servers' and tools' admin

__all__ = ["upstream_admin"]
