"""Reads of tools_app."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import QuerySet

from policies_app.governance import governance_cache
from tools_app.models import Tool, ToolInvocation
from tools_app.registry import code_registry
from tools_app.sources import source_providers

SCHEMA_HASH_PREFIX = "sha256:"


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


def tool_providers() -> list[str]:
    """Providers tools talk to (`github`, an MCP server's `--provider`): what a hand-entered credential may be for."""
    code = {definition.contract.provider for definition in code_registry().values() if definition.contract.provider}
    return sorted(code | source_providers())


def schema_hash_label(digest: str) -> str:
    """The one hash operators see for a tool (review pages, lists, commands): the policy file's `schema_hash`."""
    return f"{SCHEMA_HASH_PREFIX}{digest}"
