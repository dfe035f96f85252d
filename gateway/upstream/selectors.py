"""Reads of the upstream MCP servers that other apps ask for (the catalog, policies, key rotation)."""

from __future__ import annotations

from django.db.models import Count

from gateway.upstream.definitions import server_tool_id_prefix
from gateway.upstream.models import McpServer


def mcp_server_tool_id_prefixes() -> list[str]:
    """`mcp__<server>__` of every registered (not removed) upstream server: what a policy pattern may name
    before the server's tools are discovered."""
    slugs = McpServer.objects.filter(removed_at__isnull=True).values_list("slug", flat=True)
    return sorted(server_tool_id_prefix(slug) for slug in slugs)


def mcp_server_providers() -> list[str]:
    """The providers of the registered (not removed) servers: what their tools' connections are for."""
    rows = McpServer.objects.filter(removed_at__isnull=True).exclude(provider="")
    return sorted(set(rows.values_list("provider", flat=True)))


# --- key rotation (manage.py rotate_encryption_keys): MCP servers' sealed values -----------------
# Removed servers count too: their rows keep their sealed values, and `mcp_upstream add` brings them back.


def mcp_servers_token_to_rewrap(*, primary_key_id: str, after: int | None, limit: int) -> list[McpServer]:
    """The next batch of servers whose operator token is not under the primary key, in pk order after `after`."""
    rows = McpServer.objects.filter(operator_token_sealed__isnull=False).exclude(operator_token_key_id=primary_key_id)
    if after is not None:
        rows = rows.filter(pk__gt=after)
    return list(rows.order_by("pk").only("id", "slug", "operator_token_sealed", "operator_token_key_id")[:limit])


def mcp_server_token_key_usage() -> dict[str, int]:
    """How many MCP servers' operator tokens each key id seals."""
    rows = McpServer.objects.filter(operator_token_sealed__isnull=False).order_by("operator_token_key_id")
    return dict(rows.values_list("operator_token_key_id").annotate(n=Count("pk")))


def mcp_servers_secret_env_to_rewrap(*, primary_key_id: str, after: int | None, limit: int) -> list[McpServer]:
    """The next batch of stdio servers whose sealed environment is not under the primary key, in pk order."""
    rows = McpServer.objects.filter(secret_env_sealed__isnull=False).exclude(secret_env_key_id=primary_key_id)
    if after is not None:
        rows = rows.filter(pk__gt=after)
    return list(rows.order_by("pk").only("id", "slug", "secret_env_sealed", "secret_env_key_id")[:limit])


def mcp_server_secret_env_key_usage() -> dict[str, int]:
    """How many stdio servers' sealed environments each key id seals."""
    rows = McpServer.objects.filter(secret_env_sealed__isnull=False).order_by("secret_env_key_id")
    return dict(rows.values_list("secret_env_key_id").annotate(n=Count("pk")))
