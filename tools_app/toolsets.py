"""Toolsets: writes (remembered in the change log, pushed to every process) and the reads interfaces use.

A toolset narrows what a caller sees and may call to a named subset of the
catalog; it never widens anything. The runner enforces it: an interface
resolves the name to a set of tool ids (`toolset_scope`) and hands that set to
the runner in `ToolInvocationContext.tool_scope`, where the lookup stage treats
a tool outside it as an unknown one and the catalog leaves it out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet

from changes_app.services import change_record, change_snapshot
from core.errors import AppError
from policies_app.governance import governance_bump, governance_cache
from runner.contracts import tags_problem
from tools_app.models import Tool, Toolset
from tools_app.selectors import tool_ids_known

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
NAME_RULE = "1..64 lower-case letters, digits, '-' or '_', starting with a letter or digit"
MAX_TOOL_IDS = 500
UNKNOWN_TOOLSET = "no such toolset"


def toolset_save(
    *,
    toolset: Toolset | None = None,
    tenant_id: int | None,
    name: str,
    description: str = "",
    tool_ids: Iterable[str] = (),
    tags: Iterable[str] = (),
) -> Toolset:
    """Create (`toolset` None) or edit a toolset; checked, remembered, and live on every process's next call.

    Tool ids must be ones the catalog knows (a typo would silently narrow to
    nothing); they need not be enabled or allowed: the toolset never grants.
    """
    with transaction.atomic():
        ids = sorted(dict.fromkeys(tool_ids))
        tag_list = sorted(dict.fromkeys(tags))
        toolset_check(name=name, tool_ids=ids, tags=tag_list, description=description)
        stored = (
            Toolset.objects.select_for_update().filter(pk=toolset.pk).order_by("pk").first()
            if toolset and toolset.pk
            else None
        )
        before = change_snapshot(stored) if stored is not None else None
        row = stored or Toolset()
        if stored is None:
            row.tenant_id = tenant_id
        row.name, row.description, row.tool_ids, row.tags = name, description, ids, tag_list
        try:
            with transaction.atomic():
                row.save()
        except IntegrityError:
            where = "this tenant" if row.tenant_id else "the global toolsets"
            raise AppError(
                f"a toolset named {name!r} already exists in {where}", field_errors=[("name", "already taken")]
            ) from None
        change_record(
            action="toolset.update" if stored is not None else "toolset.create",
            obj=row,
            before=before,
            after=change_snapshot(row),
        )
        governance_bump()
        return row


@transaction.atomic
def toolset_delete(*, toolset: Toolset) -> None:
    """Delete a toolset: its URL answers as an unknown toolset from the next call on.

    The row is read again under lock, so the log keeps what was stored, not a stale copy.
    """
    stored = Toolset.objects.select_for_update().filter(pk=toolset.pk).order_by("pk").first()
    if stored is None:
        return
    change_record(action="toolset.delete", obj=stored, before=change_snapshot(stored))
    stored.delete()
    governance_bump()


def toolset_check(*, name: str, tool_ids: list[str], tags: list[str], description: str) -> None:
    """Raise AppError naming the first problem of a toolset's fields (forms call it to show it at the field)."""
    if not NAME_RE.fullmatch(name):
        raise AppError(f"name must be {NAME_RULE}", field_errors=[("name", f"must be {NAME_RULE}")])
    if len(description) > 500:
        raise AppError("description: at most 500 characters", field_errors=[("description", "at most 500 characters")])
    if not all(isinstance(tool_id, str) for tool_id in tool_ids) or len(tool_ids) > MAX_TOOL_IDS:
        rule = f"at most {MAX_TOOL_IDS} tool ids (strings)"
        raise AppError(f"tool_ids: {rule}", field_errors=[("tool_ids", rule)])
    problem = tags_problem(tags)
    if problem:
        raise AppError(problem, field_errors=[("tags", problem)])
    unknown = sorted(set(tool_ids) - set(tool_ids_known()))
    if unknown:
        message = f"unknown tool id {unknown[0]!r}"
        raise AppError(message, field_errors=[("tool_ids", message)])
    if not tool_ids and not tags:
        rule = "name at least one tool id or tag"
        raise AppError(f"a toolset must {rule}", field_errors=[("tool_ids", rule)])


def toolsets_visible_to(*, tenant_id: int) -> QuerySet[Toolset]:
    """The toolsets a tenant's callers may name: its own and the global ones (its own win on a name clash)."""
    return Toolset.objects.filter(Q(tenant_id=tenant_id) | Q(tenant__isnull=True)).select_related("tenant")


def toolset_find(*, tenant_id: int, name: str) -> Toolset | None:
    """The toolset `name` means for this tenant: its own, else the global one; another tenant's is never found."""
    if not NAME_RE.fullmatch(name):
        return None
    rows = sorted(toolsets_visible_to(tenant_id=tenant_id).filter(name=name), key=lambda row: row.tenant_id is None)
    return rows[0] if rows else None


def toolset_scope(*, tenant_id: int, name: str) -> frozenset[str] | None:
    """The tool ids toolset `name` stands for in this tenant (listed, or carrying a listed tag); None if unknown.

    Cached per governance generation: a toolset edit, a tag change or a new
    tool bumps it, so the next call in every process sees the new set.
    """
    return governance_cache.get(("toolset-scope", tenant_id, name), lambda: _scope_load(tenant_id, name))


def _scope_load(tenant_id: int, name: str) -> frozenset[str] | None:
    toolset = toolset_find(tenant_id=tenant_id, name=name)
    if toolset is None:
        return None
    members = set(toolset.tool_ids)
    wanted = set(toolset.tags)
    if wanted:
        members |= {tool_id for tool_id, tags in Tool.objects.values_list("id", "tags") if wanted & set(tags or ())}
    return frozenset(members)
