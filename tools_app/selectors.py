"""Reads of tools_app."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Count, QuerySet

from policies_app.governance import governance_cache
from tools_app.models import McpServer, Tool, ToolInvocation
from tools_app.registry import code_registry
from tools_app.upstream.definitions import server_tool_id_prefix


def enabled_tool_ids() -> frozenset[str]:
    """The kill switches, cached per governance generation: enabled and still present in code."""
    return governance_cache.get(
        "enabled-tools",
        lambda: frozenset(
            Tool.objects.filter(is_enabled=True, missing_since__isnull=True).values_list("id", flat=True)
        ),
    )


def invocation_list(
    *,
    tenant_id: int,
    service_account_id: str | None = None,
    run_id: str = "",
    tool_id: str = "",
    ok: bool | None = None,
    subject_id: str = "",
) -> QuerySet:
    """A tenant's audit rows, newest first; calls still running show as `pending`.

    `service_account_id` narrows them to one caller's own rows; `subject_id`
    (`user:<id>`) to the calls made on one person's behalf.
    """
    rows = ToolInvocation.objects.filter(tenant_id=tenant_id)
    if service_account_id is not None:
        rows = rows.filter(service_account_id=service_account_id)
    if subject_id:
        rows = rows.filter(subject_id=subject_id)
    if run_id:
        rows = rows.filter(run_id=run_id)
    if tool_id:
        rows = rows.filter(tool_id=tool_id)
    if ok is not None:
        rows = rows.filter(ok=ok)
    return rows.select_related("service_account").order_by("-started_at", "-id")


def invocation_get(
    *, tenant_id: int, tool_call_id: str, service_account_id: str | None = None
) -> ToolInvocation | None:
    """The executed (or still running) row for this id if any, else the latest attempt.

    `service_account_id` reads only that caller's own rows: another caller's id is None.
    """
    rows = ToolInvocation.objects.filter(tenant_id=tenant_id, tool_call_id=tool_call_id).select_related(
        "service_account"
    )
    if service_account_id is not None:
        rows = rows.filter(service_account_id=service_account_id)
    return rows.order_by("-executed", "-started_at", "-id").first()


def tool_ids_known() -> list[str]:
    """Every tool id an operator may name: the code registry's and the catalog's, sorted.

    A tool gone from code keeps its row, so policies that still name it stay editable.
    """
    return sorted(set(code_registry()) | set(Tool.objects.values_list("id", flat=True)))


def tools_by_id(*, tool_ids: Iterable[str]) -> dict[str, Tool]:
    """The catalog rows of these ids (what a page shows of a tool: title, description, effect, level)."""
    return {tool.id: tool for tool in Tool.objects.filter(pk__in=list(tool_ids))}


def mcp_server_tool_id_prefixes() -> list[str]:
    """`mcp__<server>__` of every registered (not removed) upstream server: what a policy pattern may name
    before the server's tools are discovered."""
    slugs = McpServer.objects.filter(removed_at__isnull=True).values_list("slug", flat=True)
    return sorted(server_tool_id_prefix(slug) for slug in slugs)


def tool_providers() -> list[str]:
    """Providers tools talk to (`github`, an MCP server's `--provider`): what a hand-entered credential may be for."""
    code = {definition.contract.provider for definition in code_registry().values() if definition.contract.provider}
    upstream = set(
        McpServer.objects.filter(removed_at__isnull=True).exclude(provider="").values_list("provider", flat=True)
    )
    return sorted(code | upstream)


# --- key rotation (manage.py rotate_encryption_keys): MCP servers' sealed values -----------------
# Removed servers count too: their rows keep their sealed values, and `mcp_server add` brings them back.


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
