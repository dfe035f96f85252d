"""Writes of tools_app: the catalog sync, exec and tool switches (the audit writes live in tools_app/audit.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connections, transaction
from django.utils import timezone

from changes_app.services import ObjectRef, change_record
from core.errors import AppError
from policies_app.adapters import DatabaseDelegationStore
from policies_app.governance import governance_bump
from policies_app.selectors import Caller, delegation_for_token, policy_effective_for
from runner.authz import SUBJECT_REFUSED, subject_refusal
from runner.catalog import catalog_for
from runner.contracts import tags_problem
from runner.pipeline import ToolRunner
from runner.ports import PolicyDecider, ToolSource
from runner.types import (
    UNKNOWN_DELEGATION,
    ConsequenceLevel,
    ErrorCode,
    ToolExecResult,
    ToolInvocationContext,
    ToolSpec,
    new_tool_call_id,
)
from tools_app.models import Tool
from tools_app.routing import CallRouting


@dataclass
class SyncReport:
    created: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    marked_missing: list[str] = field(default_factory=list)
    returned: list[str] = field(default_factory=list)


@transaction.atomic
def tool_sync(*, specs: Iterable[ToolSpec], source: str = Tool.Source.CODE) -> SyncReport:
    """Upsert the catalog from `specs`: new tools disabled, changes stamped, gone tools marked.

    Operator switches are never touched: a schema change keeps `is_enabled` as
    it was and records `schema_changed_at` so operators can review it.
    """
    now = timezone.now()
    report = SyncReport()
    existing = {tool.id: tool for tool in Tool.objects.select_for_update().filter(source=source)}
    seen = set()
    for spec in specs:
        seen.add(spec.name)
        fields = _spec_fields(spec)
        tool = existing.get(spec.name)
        if tool is None:
            Tool.objects.create(id=spec.name, source=source, is_enabled=False, schema_changed_at=now, **fields)
            report.created.append(spec.name)
            continue
        if tool.missing_since is not None:
            tool.missing_since = None
            report.returned.append(spec.name)
        if tool.schema_hash != spec.schema_hash:
            for name, value in fields.items():
                setattr(tool, name, value)
            tool.schema_changed_at = now
            report.changed.append(spec.name)
        elif _metadata_differs(tool, fields):  # metadata is no schema change: no review stamp
            for name in METADATA_FIELDS:
                setattr(tool, name, fields[name])
            report.changed.append(spec.name)
        elif spec.name not in report.returned:
            report.unchanged.append(spec.name)
            continue
        tool.save()
    for tool_id, tool in existing.items():
        if tool_id not in seen and tool.missing_since is None:
            tool.missing_since = now
            tool.save(update_fields=["missing_since", "updated_at"])
            report.marked_missing.append(tool_id)
    return report


# What a code tool's contract may change without a schema change (no review stamp): its metadata and title.
METADATA_FIELDS = ("consequence_level", "requires_confirmation", "tags", "version", "title")


def _spec_fields(spec: ToolSpec) -> dict:
    return {
        "description": spec.description,
        "input_schema": dict(spec.input_schema),
        "schema_hash": spec.schema_hash,
        "effect": spec.effect.value,
        "provider": spec.provider or "",
        "requires_connection": spec.requires_connection,
        "consequence_level": spec.consequence_level.value,
        "requires_confirmation": spec.requires_confirmation,
        "tags": list(spec.tags),
        "version": spec.version or "",
        "title": spec.title or "",
    }


def _metadata_differs(tool: Tool, fields: dict) -> bool:
    return any(getattr(tool, name) != fields[name] for name in METADATA_FIELDS)


@dataclass(frozen=True, slots=True)
class ExecRequest:
    """An exec call as the REST contract shapes it, already parsed and size-checked."""

    tool_id: str
    args: Any
    tool_call_id: str | None = None
    routing: CallRouting = field(default_factory=CallRouting)

    @classmethod
    def of(cls, fields: Mapping[str, Any]) -> ExecRequest:
        """From ExecInputSerializer's validated data (REST, MCP)."""
        return cls(
            tool_id=fields["tool_id"],
            args=fields["args"],
            tool_call_id=fields.get("tool_call_id"),
            routing=CallRouting.of(fields),
        )


def tool_exec(
    *,
    runner: ToolRunner,
    caller: Caller,
    request: ExecRequest,
    subject_token: str | None = None,
    tool_scope: frozenset[str] | None = None,
) -> ToolExecResult:
    """Run one call for an authenticated service account through the runner (the only path).

    `subject_token` is the person's token the caller sent beside its key (on
    whose behalf it calls); it is resolved here to the delegation it names and
    goes no further. The runner's authorization stage decides what it allows.
    `tool_scope` (a toolset's ids, `/mcp/t/<name>`) makes every tool outside it unknown to the runner.
    """
    ctx = exec_context(caller=caller, request=request, subject_token=subject_token, tool_scope=tool_scope)
    return runner.exec(request.tool_id, request.args, ctx)


def exec_context(
    *,
    caller: Caller,
    request: ExecRequest,
    subject_token: str | None = None,
    tool_scope: frozenset[str] | None = None,
) -> ToolInvocationContext:
    """The context of one call from a request: the one place a request becomes a context (see tool_exec)."""
    routing = request.routing
    return ToolInvocationContext(
        run_id=routing.run_id or "",
        tool_call_id=request.tool_call_id or new_tool_call_id(),
        tool_call_id_generated=request.tool_call_id is None,
        tenant_id=str(caller.tenant_id),
        actor_id=caller.service_account_id,
        connection_id=routing.connection_id,
        grant_id=routing.grant_id,
        declared_connection_ids=routing.declared_connection_ids,
        delegation_id=_delegation_of(caller, subject_token),
        tool_scope=tool_scope,
    )


def _delegation_of(caller: Caller, subject_token: str | None) -> str | None:
    """Whose behalf a call is on: a signed-in client's person (its token says), else the subject token's.

    A signed-in MCP client always acts for the person who signed it in; a
    subject token it might send as well is not read.
    """
    if caller.delegation_id is not None:
        return caller.delegation_id
    return None if subject_token is None else delegation_for_token(token=subject_token)


def tool_catalog(
    *,
    source: ToolSource,
    policy: PolicyDecider,
    caller: Caller,
    tags: Iterable[str] = (),
    subject_token: str | None = None,
    tool_scope: frozenset[str] | None = None,
) -> list[ToolSpec]:
    """The specs this caller may run now (enabled and in its policy), carrying every tag in `tags`.

    With a person's subject token, the specs it may run for that person: the
    delegation's tool subset narrows the list; a token that cannot be used at
    all (forged, revoked, expired, another caller's) is refused as a call with
    it would be (`authz_denied`, the same message for every reason).
    `tool_scope` (a toolset's ids) narrows the list further, as it narrows calls.
    """
    ctx = ToolInvocationContext(
        run_id="",
        tool_call_id="catalog",
        tenant_id=str(caller.tenant_id),
        actor_id=caller.service_account_id,
        delegation_id=_delegation_of(caller, subject_token),
        tool_scope=tool_scope,
    )
    specs = context_catalog(ctx=ctx, source=source, policy=policy)
    if specs is None:
        raise AppError(SUBJECT_REFUSED, code=ErrorCode.AUTHZ_DENIED)
    wanted = set(tags)
    return [spec for spec in specs if wanted <= set(spec.tags)]


def context_catalog(*, ctx: ToolInvocationContext, source: ToolSource, policy: PolicyDecider) -> list[ToolSpec] | None:
    """The specs a call's context may run now: policy ∩ its person's delegation ∩ its toolset (`ctx.tool_scope`).

    None when the context's subject token cannot be used at all. One rule for
    the catalogs (`tool_catalog`) and for the search tool, which ranks the
    catalog of the call it serves (tools_app.search.CatalogSearchIndex).
    """
    specs = catalog_for(ctx, source, policy)
    if ctx.delegation_id is None:
        return specs
    delegation = None if ctx.delegation_id == UNKNOWN_DELEGATION else DatabaseDelegationStore().get(ctx.delegation_id)
    refusal = subject_refusal(ctx, delegation, now=timezone.now())
    if refusal is not None or delegation is None:
        return None
    return [spec for spec in specs if delegation.tools is None or spec.name in delegation.tools]


def tool_catalog_empty_hint(*, caller: Caller) -> str:
    """Why this caller's catalog is empty, and who can change that: an empty list alone reads like a bug.

    It names the caller's own policy only (never another tenant's), and no tool ids.
    """
    who = f"{caller.tenant_slug}/{caller.name}"
    policy = policy_effective_for(tenant_id=caller.tenant_id, service_account_id=caller.service_account_id)
    if policy is None:
        return (
            f"no tool policy applies to the service account {who}, so no tool is allowed (deny by default); "
            "an operator adds a policy for it, its tenant or everyone in admin (Policies > Tool policies) "
            "or with `manage.py policy import`"
        )
    return (
        f"the policy {policy.name!r} that applies to {who} allows no tool that is enabled now; "
        "an operator enables tools in admin (Tools > Tools) or adds them to the policy"
    )


@transaction.atomic
def tool_set_enabled(*, tool_ids: Iterable[str], enabled: bool) -> list[str]:
    """Flip the operator's kill switch of these tools; returns the ids that actually changed.

    One UPDATE sends no save signal, so the governance generation is bumped here:
    every process's cached switches drop on their next call.
    """
    changing = Tool.objects.filter(pk__in=list(tool_ids)).exclude(is_enabled=enabled)
    changed = sorted(changing.values_list("pk", flat=True))
    if changed:
        Tool.objects.filter(pk__in=changed).update(is_enabled=enabled, updated_at=timezone.now())
        governance_bump()
    for tool_id in changed:
        tool_switch_record(tool_id=tool_id, enabled=enabled)
    return changed


# --- the rows of upstream MCP tools, written by the gateway's discovery and review ------------------


def mcp_tool_row_create(*, tool_id: str, fields: Mapping[str, Any]) -> Tool:
    """An upstream tool's catalog row at its first discovery (or its return under the same id): disabled."""
    row, _ = Tool.objects.update_or_create(
        pk=tool_id, defaults={**fields, "source": Tool.Source.MCP, "is_enabled": False, "missing_since": None}
    )
    return row


def mcp_tool_row_mirror(row: Tool, *, fields: Mapping[str, Any], now: datetime, missing: bool, runs: bool) -> None:
    """Mirror an upstream tool's live definition into its row (policy files pin its schema_hash).

    A new hash dates the change; a tool gone from its server is marked missing;
    one whose definition is not approved (`runs` false) is switched off.
    """
    if fields["schema_hash"] != row.schema_hash:
        row.schema_changed_at = now
    for key, value in fields.items():
        setattr(row, key, value)
    row.source = Tool.Source.MCP
    row.missing_since = now if missing else None
    if not runs:
        row.is_enabled = False
    row.save()


def mcp_tool_row_gone(*, tool_id: str, now: datetime) -> None:
    """An upstream tool its server no longer lists: missing and off (one UPDATE; the caller records it)."""
    Tool.objects.filter(pk=tool_id).update(missing_since=now, is_enabled=False, updated_at=now)


def tool_switch_record(*, tool_id: str, enabled: bool) -> None:
    """The change-log entry of one flipped switch (inside the transaction that flipped it)."""
    change_record(
        action="tool.enable" if enabled else "tool.disable",
        obj=ObjectRef(type="tools_app.tool", id=tool_id, label=tool_id),
        before={"is_enabled": not enabled},
        after={"is_enabled": enabled},
    )


@transaction.atomic
def tool_metadata_set(*, tool_id: str, consequence_level: str, requires_confirmation: bool, tags: list[str]) -> bool:
    """An operator's metadata for an upstream MCP tool (tightening its defaults); True if anything changed.

    Code tools declare theirs in the contract (an operator edit would be undone
    by the next sync), so they are refused here. The governance generation
    moves, so policy decisions use the new values on the next call in every
    process.
    """
    problem = tags_problem(tags)
    if problem:
        raise AppError(problem, field_errors=[("tags", problem)])
    levels = [level.value for level in ConsequenceLevel]
    if consequence_level not in levels:
        rule = f"must be one of: {', '.join(levels)}"
        raise AppError(f"consequence_level {rule}", field_errors=[("consequence_level", rule)])
    level = ConsequenceLevel(consequence_level)
    tool = Tool.objects.select_for_update().get(pk=tool_id)
    if tool.source != Tool.Source.MCP:
        raise AppError(f"{tool_id} is a code tool: its metadata is set in its contract, not here")
    new = {"consequence_level": level.value, "requires_confirmation": requires_confirmation, "tags": list(tags)}
    before = {name: getattr(tool, name) for name in new}
    if before == new:
        return False
    Tool.objects.filter(pk=tool_id).update(**new, updated_at=timezone.now())
    governance_bump()
    change_record(
        action="tool.metadata",
        obj=ObjectRef(type="tools_app.tool", id=tool_id, label=tool_id),
        before=before,
        after=new,
    )
    return True


def release_thread_connections() -> None:
    """Close the calling thread's database connections: a helper thread (a streamed MCP call) ends here.

    Django opens one connection per thread and closes a request's at its end; a
    thread that is not a request's would keep its connection open until the
    process exits.
    """
    connections.close_all()
