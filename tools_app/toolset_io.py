"""Toolsets in the policy file (`policy export|import`): the "toolsets" list beside "tools" and "policies".

Each entry: `{"name", "tenant" (a slug, or null for a global toolset),
"description", "tool_ids", "tags"}`, sorted by tenant then name so two exports
of one state are byte-identical. An import upserts by (tenant, name) through
the service (change log, governance push); `--prune` deletes the toolsets the
file does not name, only when the file has a "toolsets" list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from policies_app.models import Tenant
from runner.contracts import tags_problem
from tools_app.models import Toolset
from tools_app.toolsets import NAME_RE, NAME_RULE, toolset_delete, toolset_save

TOOLSET_KEYS = frozenset({"name", "tenant", "description", "tool_ids", "tags"})


@dataclass(frozen=True, slots=True)
class ToolsetRow:
    """One toolset of the file, checked and normalised (lists sorted and de-duplicated)."""

    name: str
    tenant: str | None
    description: str
    tool_ids: list[str]
    tags: list[str]

    @property
    def label(self) -> str:
        return f"{self.tenant or '*'}/{self.name}"

    def document(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "tenant": self.tenant,
            "description": self.description,
            "tool_ids": self.tool_ids,
            "tags": self.tags,
        }


def _row_of(toolset: Toolset) -> ToolsetRow:
    return ToolsetRow(
        name=toolset.name,
        tenant=toolset.tenant.slug if toolset.tenant_id else None,
        description=toolset.description,
        tool_ids=sorted(set(toolset.tool_ids)),
        tags=sorted(set(toolset.tags)),
    )


def toolsets_export() -> list[dict[str, Any]]:
    rows = [_row_of(toolset) for toolset in Toolset.objects.select_related("tenant")]
    return [row.document() for row in sorted(rows, key=lambda row: (row.tenant or "", row.name))]


def toolsets_validate(value: Any, *, known_tools: set[str], problems: list[str]) -> list[ToolsetRow]:
    """The file's toolsets; each problem is appended to `problems`, naming the toolset."""
    if not isinstance(value, list):
        problems.append("toolsets must be a list")
        return []
    tenants = set(Tenant.objects.values_list("slug", flat=True))
    rows: list[ToolsetRow] = []
    seen: set[tuple[str | None, str]] = set()
    for index, entry in enumerate(value):
        where = f"toolsets[{index}]"
        if not isinstance(entry, dict):
            problems.append(f"{where} must be an object")
            continue
        name, tenant = entry.get("name"), entry.get("tenant")
        if isinstance(name, str):
            where = f"toolset {tenant or '*'}/{name}"
        before = len(problems)
        problems += [f"{where}: unknown key {key!r}" for key in sorted(set(entry) - TOOLSET_KEYS)]
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            problems.append(f"{where}: name must be {NAME_RULE}")
        if tenant is not None and tenant not in tenants:
            problems.append(f"{where}: tenant {tenant!r} does not exist")
        description = entry.get("description", "")
        if not isinstance(description, str) or len(description) > 500:
            problems.append(f"{where}: description must be a string of at most 500 characters")
        tool_ids, tags = entry.get("tool_ids", []), entry.get("tags", [])
        if not isinstance(tool_ids, list) or not all(isinstance(tool_id, str) for tool_id in tool_ids):
            problems.append(f"{where}: tool_ids must be a list of strings")
            tool_ids = []
        problems += [f"{where}: unknown tool id {tool_id!r}" for tool_id in sorted(set(tool_ids) - known_tools)]
        problem = tags_problem(sorted(set(tags)) if isinstance(tags, list) else tags)
        if problem:
            problems.append(f"{where}: {problem}")
        elif not tool_ids and not tags:
            problems.append(f"{where}: a toolset must name at least one tool id or tag")
        if (tenant, name) in seen:
            problems.append(f"{where}: named twice")
        if len(problems) == before:
            seen.add((tenant, name))
            rows.append(
                ToolsetRow(
                    name=name,
                    tenant=tenant,
                    description=description,
                    tool_ids=sorted(set(tool_ids)),
                    tags=sorted(set(tags)),
                )
            )
    return rows


def toolsets_apply(rows: list[ToolsetRow], *, prune: bool) -> tuple[list[str], list[str], list[str]]:
    """Write the checked rows (inside the import's transaction); (created, updated, pruned) labels."""
    existing = {
        (row.tenant, row.name): (toolset, row)
        for toolset in Toolset.objects.select_related("tenant")
        for row in [_row_of(toolset)]
    }
    tenant_ids = dict(Tenant.objects.values_list("slug", "pk"))
    created, updated, pruned = [], [], []
    for row in rows:
        current = existing.get((row.tenant, row.name))
        if current is not None and current[1] == row:
            continue
        toolset_save(
            toolset=current[0] if current else None,
            tenant_id=tenant_ids[row.tenant] if row.tenant else None,
            name=row.name,
            description=row.description,
            tool_ids=row.tool_ids,
            tags=row.tags,
        )
        (updated if current else created).append(row.label)
    if prune:
        named = {(row.tenant, row.name) for row in rows}
        for key, (toolset, row) in sorted(existing.items(), key=lambda item: (item[0][0] or "", item[0][1])):
            if key not in named:
                toolset_delete(toolset=toolset)
                pruned.append(row.label)
    return created, updated, pruned
