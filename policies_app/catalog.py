"""The tool catalog as policies see it: tool ids, provided by the app that owns the catalog.

A policy names tool ids as plain strings (this app sits below tools_app and
never imports it). The policy admin still offers the catalog's ids as choices
and marks which are enabled: tools_app installs its selectors here when it is
ready (the MCP gateway its servers' id prefixes), the way connections_app installs its vaults. Until then the catalog is
empty.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

ToolIds = Callable[[], Iterable[str]]

_installed: dict[str, ToolIds] = {}


def install_tool_catalog(*, known: ToolIds, enabled: ToolIds) -> None:
    """Called by the catalog's owner at startup: every tool id, and the ids switched on."""
    _installed["known"] = known
    _installed["enabled"] = enabled


def install_server_prefixes(server_prefixes: ToolIds) -> None:
    """Called by the MCP gateway at startup: the id prefixes of the registered upstream servers
    (what a policy's `mcp__<server>__*` may name before their tools are discovered)."""
    _installed["server_prefixes"] = server_prefixes


def tool_ids_known() -> list[str]:
    return list(_installed.get("known", list)())


def enabled_tool_ids() -> set[str]:
    return set(_installed.get("enabled", list)())


def tool_server_prefixes() -> list[str]:
    return list(_installed.get("server_prefixes", list)())
