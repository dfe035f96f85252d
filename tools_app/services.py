"""Writes of tools_app: the catalog sync and the audit record."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from runner.types import ToolInvocationRecord, ToolSpec
from tools_app.models import Tool, ToolInvocation


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


def _spec_fields(spec: ToolSpec) -> dict:
    return {
        "description": spec.description,
        "input_schema": dict(spec.input_schema),
        "schema_hash": spec.schema_hash,
        "effect": spec.effect.value,
        "provider": spec.provider or "",
        "requires_connection": spec.requires_connection,
    }


def invocation_record(record: ToolInvocationRecord) -> ToolInvocation:
    """Write the audit row of one call (the one database write of the hot path)."""
    ctx = record.context
    if ctx is None or record.started_at is None or record.ended_at is None:
        raise ValueError("an audit record needs its context and both timestamps")
    return ToolInvocation.objects.create(
        tenant_id=ctx.tenant_id,
        actor_id=ctx.actor_id,
        tool_call_id=ctx.tool_call_id,
        run_id=ctx.run_id,
        tool_id=record.tool_id,
        connection_id=ctx.connection_id or "",
        grant_id=ctx.grant_id or "",
        decision=record.decision.value,
        ok=bool(record.ok),
        executed=record.executed,
        error_code=record.error_code.value if record.error_code else "",
        safe_message=(record.safe_message or "")[:500],
        args_sha256=record.args_sha256 or "",
        result=record.value if record.ok else None,
        result_bytes=record.result_bytes,
        started_at=record.started_at,
        ended_at=record.ended_at,
        duration_ms=record.duration_ms or 0,
    )
