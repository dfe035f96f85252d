"""Argument rules and result guards in the policy file: `argument_rules` and `result_guards`, exported and imported.

Each is a list of objects upserted by name, inside the policy import's one
transaction and with its checks: every row is validated as a save would
(policies_app/rules.py: the condition compiles within bounds, the patterns
are RE2, the rule covers a known tool) before the first write, and every
problem is reported at once. With `--prune`, rows a present list does not name
are deleted; a list that is absent changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from policies_app.models import ArgumentRule, ResultGuard, ScopedRule, ServiceAccount, Tenant
from policies_app.rules import guard_problems, rule_problems
from policies_app.services import argument_rule_save, result_guard_save, scoped_rule_delete

SHARED_KEYS = ("name", "tenant", "service_account", "tools", "tags", "action", "message")
RULE_KEYS = frozenset({*SHARED_KEYS, "condition", "active"})
GUARD_KEYS = frozenset({*SHARED_KEYS, "detectors", "patterns", "arguments", "active"})
FILE_KEYS = ("argument_rules", "result_guards")
# What a key a file leaves out means (a list field: empty).
FIELD_DEFAULTS: dict[str, Any] = {"condition": "", "arguments": "ignore"}


@dataclass(frozen=True, slots=True)
class _Kind:
    key: str
    model: type[ArgumentRule] | type[ResultGuard]
    fields: tuple[str, ...]  # beyond the shared ones
    keys: frozenset[str]


KINDS = (
    _Kind("argument_rules", ArgumentRule, ("condition",), RULE_KEYS),
    _Kind("result_guards", ResultGuard, ("detectors", "patterns", "arguments"), GUARD_KEYS),
)


def rules_export() -> dict[str, list[dict[str, Any]]]:
    return {kind.key: [_document(row, kind) for row in _rows(kind)] for kind in KINDS}


def _rows(kind: _Kind) -> list[ScopedRule]:
    return list(kind.model.objects.select_related("tenant", "service_account").order_by("name"))


def _document(row: ScopedRule, kind: _Kind) -> dict[str, Any]:
    return {
        "name": row.name,
        "tenant": row.tenant.slug if row.tenant else None,
        "service_account": row.service_account.name if row.service_account else None,
        "tools": list(row.tools),
        "tags": list(row.tags),
        **{name: getattr(row, name) for name in kind.fields},
        "action": row.action,  # type: ignore[attr-defined]
        "message": row.message,
        "active": row.is_active,
    }


@dataclass(slots=True)
class RulesChecked:
    """Per present list: the rows to write (unsaved or changed instances) and the names it holds."""

    rows: dict[str, list[ScopedRule]]
    present: set[str]


def rules_validate(document: dict[str, Any], *, problems: list[str]) -> RulesChecked:
    checked = RulesChecked(rows={}, present=set())
    tenants = {tenant.slug: tenant for tenant in Tenant.objects.all()}
    for kind in KINDS:
        if kind.key not in document:
            continue
        checked.present.add(kind.key)
        entries = document[kind.key]
        if not isinstance(entries, list):
            problems.append(f"{kind.key} must be a list")
            continue
        existing = {row.name: row for row in kind.model.objects.all()}
        seen: set[str] = set()
        rows: list[ScopedRule] = []
        for index, entry in enumerate(entries):
            row = _row(kind, index, entry, existing=existing, tenants=tenants, seen=seen, problems=problems)
            if row is not None:
                rows.append(row)
        checked.rows[kind.key] = rows
    return checked


def _row(
    kind: _Kind,
    index: int,
    entry: Any,
    *,
    existing: dict[str, ScopedRule],
    tenants: dict[str, Tenant],
    seen: set[str],
    problems: list[str],
) -> ScopedRule | None:
    where = f"{kind.key}[{index}]"
    if not isinstance(entry, dict):
        problems.append(f"{where} must be an object")
        return None
    name = entry.get("name")
    if isinstance(name, str) and name:
        where = f"{kind.key} {name}"
    before = len(problems)
    problems += [f"{where}: unknown key {key!r}" for key in sorted(set(entry) - kind.keys)]
    if not isinstance(name, str) or not name:
        problems.append(f"{where}: name is required")
        return None
    if name in seen:
        problems.append(f"{where}: named twice")
    seen.add(name)
    tenant = None
    if entry.get("tenant") is not None:
        tenant = tenants.get(entry["tenant"])
        if tenant is None:
            problems.append(f"{where}: tenant {entry['tenant']!r} does not exist")
    account = None
    if entry.get("service_account") is not None:
        account = (
            ServiceAccount.objects.filter(tenant=tenant, name=entry["service_account"]).first() if tenant else None
        )
        if account is None:
            problems.append(f"{where}: service account {entry['service_account']!r} needs its tenant and must exist")
    active = entry.get("active", True)
    if not isinstance(active, bool):
        problems.append(f"{where}: active must be true or false")
    if len(problems) > before:
        return None
    row = existing.get(name) or kind.model(name=name)
    row.tenant, row.service_account = tenant, account
    row.tools, row.tags = entry.get("tools", []), entry.get("tags", [])
    for field in kind.fields:
        setattr(row, field, entry.get(field, FIELD_DEFAULTS.get(field, [])))
    row.action = entry.get("action", "")  # type: ignore[attr-defined]
    row.message = entry.get("message", "")
    row.is_active = active
    found = rule_problems(row) if isinstance(row, ArgumentRule) else guard_problems(row)  # type: ignore[arg-type]
    problems += [f"{where}: {field}: {problem}" for field, problem in found.items()]
    return row


def rules_apply(checked: RulesChecked, *, prune: bool) -> tuple[list[str], list[str], list[str]]:
    """Write the checked rows (inside the import's transaction); (created, updated, pruned) labels."""
    created, updated, pruned = [], [], []
    for kind in KINDS:
        if kind.key not in checked.present:
            continue
        current = {row.name: _document(row, kind) for row in _rows(kind)}
        for row in checked.rows.get(kind.key, []):
            if row.pk is not None and current.get(row.name) == _document(row, kind):
                continue  # unchanged: no write, no change-log entry
            label = f"{kind.key}:{row.name}"
            (updated if row.pk is not None else created).append(label)
            if isinstance(row, ArgumentRule):
                argument_rule_save(rule=row)
            else:
                result_guard_save(guard=row)  # type: ignore[arg-type]
        if prune:
            named = {row.name for row in checked.rows.get(kind.key, [])}
            for row in kind.model.objects.exclude(name__in=named).order_by("name"):
                scoped_rule_delete(row=row)
                pruned.append(f"{kind.key}:{row.name}")
    return created, updated, pruned
