"""Policies and tool switches as a JSON file: review them in git, apply them in CI.

`policy_export` writes the whole governance state that operators edit (every
policy, every tool's switch, toolsets, rules, single sign-on role mappings) in
one deterministic text, so two exports of the same state are byte-identical and a diff shows exactly what changes.
`policy_import` applies such a file all or nothing: the whole document is
checked first and any problem refuses it with every offending name listed.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.db import IntegrityError, transaction

from changes_app.services import change_record, change_snapshot
from core.errors import AppError
from gateway.upstream.selectors import mcp_server_tool_id_prefixes
from gateway.upstream.services import mcp_tool_approve
from policies_app.models import (
    DEFAULT_APPROVAL_TTL_S,
    MAX_APPROVAL_TTL_S,
    MIN_APPROVAL_TTL_S,
    Approver,
    ServiceAccount,
    Tenant,
    ToolPolicy,
)
from policies_app.services import policy_delete
from policies_app.toolpatterns import feature_entry_problem, is_pattern, pattern_problem
from policy_files.role_mapping_io import FILE_KEY as ROLE_MAPPINGS_KEY
from policy_files.role_mapping_io import (
    RoleMappingsChecked,
    role_mappings_apply,
    role_mappings_export,
    role_mappings_validate,
)
from runner.catalog import closest_tool_id
from runner.contracts import tags_problem
from runner.types import ConsequenceLevel, ToolEffect
from tools_app.models import Tool
from tools_app.registry import code_registry, code_specs
from tools_app.rule_io import FILE_KEYS as RULE_FILE_KEYS
from tools_app.rule_io import RulesChecked, rules_apply, rules_export, rules_validate
from tools_app.selectors import SCHEMA_HASH_PREFIX, schema_hash_label
from tools_app.services import tool_metadata_set, tool_switch_record, tool_sync
from tools_app.toolset_io import ToolsetRow, toolsets_apply, toolsets_export, toolsets_validate

# Upstream resources and prompts a policy allows (names or `*` patterns; absent: none).
FEATURE_FIELDS = ("allowed_resources", "allowed_prompts")
BUDGET_FIELDS = (
    "max_runtime_ms",
    "max_result_bytes",
    "rate_limit_per_minute",
    "max_concurrency",
    "max_samples_per_call",
)
OPTIONAL_BUDGET_FIELDS = ("max_samples_per_call",)
# Approval settings beyond the effects (docs/approvals.md): absent keys take the model's defaults.
APPROVAL_FIELDS = ("require_approval_at_or_above", "require_approval_for_tools", "approver", "approval_ttl_s")
POLICY_FIELDS = (
    "name",
    "tenant",
    "service_account",
    "allowed_tools",
    *FEATURE_FIELDS,
    "require_approval_for_effects",
    *APPROVAL_FIELDS,
    *BUDGET_FIELDS,
)
# "active" is ours, beyond the contract's shape: without it an export of an
# inactive policy would come back active. A file without it means active.
POLICY_KEYS = frozenset({*POLICY_FIELDS, "active"})
TOP_LEVEL_KEYS = frozenset({"tools", "policies", "toolsets", *RULE_FILE_KEYS, ROLE_MAPPINGS_KEY})
# A tool's metadata: exported for review; on import an upstream MCP tool takes it (the operator's to
# set), and a code tool's must equal its contract (set in code, so a different value is a mistake).
TOOL_METADATA_KEYS = ("consequence_level", "requires_confirmation", "tags")
TOOL_KEYS = frozenset({"enabled", "schema_hash", *TOOL_METADATA_KEYS, "version"})
SCHEMA_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")
VALID_EFFECTS = frozenset(effect.value for effect in ToolEffect)
VALID_LEVELS = tuple(level.value for level in ConsequenceLevel)
POLICY_APPROVERS = tuple(Approver.values)
MAX_BUDGET = 2_147_483_647  # PositiveIntegerField's bound on every supported database
MAX_NAME_LENGTH = ToolPolicy._meta.get_field("name").max_length


class PolicyFileError(AppError):
    """The file was refused: a `validation` AppError whose field errors name every offending tool id,
    tenant or policy (`problems`), one message each, all in its safe message too."""

    def __init__(self, problems: Iterable[str]) -> None:
        problems = list(problems)
        super().__init__(
            "policy file refused, nothing was changed:\n  " + "\n  ".join(problems),
            field_errors=[("", problem) for problem in problems],
        )

    @property
    def problems(self) -> list[str]:
        return [error.message for error in self.field_errors]


@dataclass
class ImportReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    tools_enabled: list[str] = field(default_factory=list)
    tools_disabled: list[str] = field(default_factory=list)
    tools_synced: bool = False
    toolsets_created: list[str] = field(default_factory=list)
    toolsets_updated: list[str] = field(default_factory=list)
    toolsets_pruned: list[str] = field(default_factory=list)
    rules_created: list[str] = field(default_factory=list)
    rules_updated: list[str] = field(default_factory=list)
    rules_pruned: list[str] = field(default_factory=list)
    role_mappings_created: list[str] = field(default_factory=list)
    role_mappings_pruned: list[str] = field(default_factory=list)

    @property
    def changed_anything(self) -> bool:
        toolsets = self.toolsets_created or self.toolsets_updated or self.toolsets_pruned
        rules = self.rules_created or self.rules_updated or self.rules_pruned
        role_mappings = self.role_mappings_created or self.role_mappings_pruned
        return bool(
            self.created
            or self.updated
            or self.pruned
            or self.tools_enabled
            or self.tools_disabled
            or toolsets
            or rules
            or role_mappings
        )


@dataclass(frozen=True, slots=True)
class _PolicyRow:
    """One policy of the file, checked and normalised (lists sorted and de-duplicated)."""

    name: str
    tenant: str | None
    service_account: str | None
    allowed_tools: list[str]
    features: dict[str, list[str]]
    require_approval_for_effects: list[str]
    approval: dict[str, Any]
    budgets: dict[str, int | None]
    active: bool

    @property
    def scope(self) -> tuple[str | None, str | None]:
        return (self.tenant, self.service_account)


# --- export ------------------------------------------------------------------------------


def policy_export() -> dict[str, Any]:
    """The current tool switches and policies as the contract's document."""
    tools = {
        tool.id: {
            "enabled": tool.is_enabled,
            "schema_hash": schema_hash_label(tool.schema_hash),
            "consequence_level": tool.consequence_level,
            "requires_confirmation": tool.requires_confirmation,
            "tags": list(tool.tags),
            "version": tool.version or None,
        }
        for tool in Tool.objects.order_by("id")
    }
    policies = [
        _policy_document(policy)
        for policy in ToolPolicy.objects.select_related("tenant", "service_account").order_by("name")
    ]
    return {
        "tools": tools,
        "policies": policies,
        "toolsets": toolsets_export(),
        **rules_export(),
        ROLE_MAPPINGS_KEY: role_mappings_export(),  # by provider slug: no provider, and no secret, is in the file
    }


def _policy_document(policy: ToolPolicy) -> dict[str, Any]:
    return {
        "name": policy.name,
        "tenant": policy.tenant.slug if policy.tenant else None,
        "service_account": policy.service_account.name if policy.service_account else None,
        "allowed_tools": sorted(set(policy.allowed_tools)),
        # Only when set: files of policies without resources or prompts read as they always did.
        **{name: sorted(set(getattr(policy, name))) for name in FEATURE_FIELDS if getattr(policy, name)},
        "require_approval_for_effects": sorted(set(policy.require_approval_for_effects)),
        "require_approval_at_or_above": policy.require_approval_at_or_above or None,
        "require_approval_for_tools": sorted(set(policy.require_approval_for_tools)),
        "approver": policy.approver,
        "approval_ttl_s": policy.approval_ttl_s,
        **{budget: getattr(policy, budget) for budget in BUDGET_FIELDS if budget not in OPTIONAL_BUDGET_FIELDS},
        # Only when set, as for resources and prompts: files of policies that pass no sampling read as before.
        **{budget: getattr(policy, budget) for budget in OPTIONAL_BUDGET_FIELDS if getattr(policy, budget)},
        "active": policy.is_active,
    }


def policy_document_dumps(document: Mapping[str, Any]) -> str:
    """The one text form of a document: stable key order, two-space indent, final newline."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def policy_document_loads(text: str) -> Any:
    """Parse a policy file, refusing duplicate keys (JSON would silently keep the last one)."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as error:
        raise PolicyFileError([f"not valid JSON: {error}"]) from None


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    duplicates = sorted(key for key, count in Counter(key for key, _ in pairs).items() if count > 1)
    if duplicates:
        raise PolicyFileError([f"duplicate key {key!r}" for key in duplicates])
    return dict(pairs)


# --- import ------------------------------------------------------------------------------


@transaction.atomic
def policy_import(*, document: Any, prune: bool = False) -> ImportReport:
    """Apply a policy document: upsert policies by name, set tool switches, optionally prune.

    A file may hold "tools", "policies" or both; a key that is absent changes
    nothing of its part. All or nothing: the document is validated against the
    registry and the database before the first write, every problem found is
    reported at once, and every write happens in this one transaction. A
    switch for a tool that is in the code registry but has no Tool row yet
    (sync_tools never ran) syncs the catalog first, inside the same
    transaction, so a fresh database can be set up from the file alone.
    Saves and deletes go through the models, whose signals bump the governance
    generation: every process sees the new state on its next call.
    """
    existing = {
        policy.name: policy
        for policy in ToolPolicy.objects.select_for_update(of=("self",)).select_related("tenant", "service_account")
    }
    problems: list[str] = []
    checked = _validate(document, existing=existing, prune=prune, problems=problems)
    report = ImportReport()

    switches = checked.switches
    tool_rows = {tool.id: tool for tool in Tool.objects.select_for_update().filter(id__in=switches)}
    if set(switches) - set(tool_rows):
        tool_sync(specs=code_specs())  # rolled back with everything else if the file is refused below
        report.tools_synced = True
        tool_rows = {tool.id: tool for tool in Tool.objects.select_for_update().filter(id__in=switches)}
    problems += _pin_problems(checked.pins, switches, tool_rows)
    problems += _metadata_conflicts(checked.metadata, tool_rows)
    if problems:
        raise PolicyFileError(problems)
    _approve_pinned(switches, checked.pins, tool_rows)
    _apply_metadata(checked.metadata, tool_rows)
    for tool_id, enabled in sorted(switches.items()):
        tool = tool_rows[tool_id]
        if tool.is_enabled != enabled:
            tool.is_enabled = enabled
            tool.save(update_fields=["is_enabled", "updated_at"])
            tool_switch_record(tool_id=tool_id, enabled=enabled)
            (report.tools_enabled if enabled else report.tools_disabled).append(tool_id)

    if prune:
        named = {row.name for row in checked.rows}
        for name in sorted(set(existing) - named):
            policy_delete(policy=existing[name])
            report.pruned.append(name)

    try:
        _apply_policies(checked.rows, existing=existing, report=report)
    except IntegrityError as error:  # a concurrent writer took a scope we checked as free
        raise PolicyFileError([f"the database refused the policies: {error}"]) from None
    if checked.toolsets is not None:
        report.toolsets_created, report.toolsets_updated, report.toolsets_pruned = toolsets_apply(
            checked.toolsets, prune=prune
        )
    if checked.rules is not None:  # after the policies and switches: a rule's tools are checked against them
        report.rules_created, report.rules_updated, report.rules_pruned = rules_apply(checked.rules, prune=prune)
    if checked.role_mappings is not None:
        report.role_mappings_created, report.role_mappings_pruned = role_mappings_apply(
            checked.role_mappings, prune=prune
        )
    return report


def _apply_policies(rows: list[_PolicyRow], *, existing: dict[str, ToolPolicy], report: ImportReport) -> None:
    """Write new and changed policies; unchanged ones are not touched (no updated_at churn).

    The database allows one active policy per scope and checks it per
    statement, so a file that moves "active" between two policies of a scope
    would fail half-way. Changed policies are therefore first deactivated
    together, then written with their final values: the final state was
    checked as conflict-free, so no intermediate state can conflict.
    """
    tenants = {tenant.slug: tenant for tenant in Tenant.objects.filter(slug__in={row.tenant for row in rows})}
    accounts = {
        (account.tenant.slug, account.name): account
        for account in ServiceAccount.objects.select_related("tenant").filter(tenant__slug__in=set(tenants))
    }
    to_write: list[tuple[ToolPolicy, dict[str, Any] | None]] = []  # with its recorded state before, if any
    for row in rows:
        policy = existing.get(row.name)
        if policy is None:
            to_write.append((ToolPolicy(name=row.name), None))
            report.created.append(row.name)
        elif _policy_document(policy) != _row_document(row):
            to_write.append((policy, change_snapshot(policy)))
            report.updated.append(row.name)
        else:
            report.unchanged.append(row.name)
    ToolPolicy.objects.filter(pk__in=[policy.pk for policy, before in to_write if before is not None]).update(
        is_active=False
    )
    by_name = {row.name: row for row in rows}
    for policy, before in to_write:
        row = by_name[policy.name]
        policy.tenant = tenants[row.tenant] if row.tenant else None
        policy.service_account = accounts[row.scope] if row.service_account else None
        policy.allowed_tools = row.allowed_tools
        for name, entries in row.features.items():
            setattr(policy, name, entries)
        policy.require_approval_for_effects = row.require_approval_for_effects
        policy.require_approval_at_or_above = row.approval["require_approval_at_or_above"] or ""
        policy.require_approval_for_tools = row.approval["require_approval_for_tools"]
        policy.approver = row.approval["approver"]
        policy.approval_ttl_s = row.approval["approval_ttl_s"]
        for budget, value in row.budgets.items():
            setattr(policy, budget, value)
        policy.is_active = row.active
        policy.save()
        change_record(
            action="policy.create" if before is None else "policy.update",
            obj=policy,
            before=before,
            after=change_snapshot(policy),
        )


def _row_document(row: _PolicyRow) -> dict[str, Any]:
    return {
        "name": row.name,
        "tenant": row.tenant,
        "service_account": row.service_account,
        "allowed_tools": row.allowed_tools,
        **{name: entries for name, entries in row.features.items() if entries},
        "require_approval_for_effects": row.require_approval_for_effects,
        **row.approval,
        **{budget: value for budget, value in row.budgets.items() if budget not in OPTIONAL_BUDGET_FIELDS or value},
        "active": row.active,
    }


# --- validation --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Checked:
    """What a document asks for, as far as it passed its checks."""

    switches: dict[str, bool]
    rows: list[_PolicyRow]
    pins: dict[str, str]
    metadata: dict[str, dict[str, Any]] = field(default_factory=dict)
    toolsets: list[ToolsetRow] | None = None  # None: the file has no "toolsets" list (nothing of them changes)
    rules: RulesChecked | None = None
    role_mappings: RoleMappingsChecked | None = None  # None: the file has no "role_mappings" list


def _validate(document: Any, *, existing: Mapping[str, ToolPolicy], prune: bool, problems: list[str]) -> _Checked:
    """The document's switches and policies; every problem found is appended to `problems`.

    Each part is checked on its own, so one run names every problem of the file. A
    part that is absent is empty (and `--prune`, which deletes the policies a file
    does not name, requires the "policies" part to be there).
    """
    if not isinstance(document, dict):
        problems.append('the file must hold a JSON object with "tools", "policies" or both')
        return _Checked(switches={}, rows=[], pins={})
    problems += [
        f"unknown top-level key {key!r} (the keys are {', '.join(sorted(TOP_LEVEL_KEYS))})"
        for key in sorted(set(document) - TOP_LEVEL_KEYS)
    ]
    if not set(document) & TOP_LEVEL_KEYS:
        problems.append('the file has neither "tools" nor "policies": nothing to import')
    if prune and "policies" not in document:
        problems.append('--prune deletes the policies the file does not name: it needs a "policies" list')

    known_tools = set(code_registry()) | set(Tool.objects.values_list("id", flat=True))
    pins: dict[str, str] = {}
    metadata: dict[str, dict[str, Any]] = {}
    switches = _validate_switches(
        document.get("tools", {}), known_tools=known_tools, problems=problems, pins=pins, metadata=metadata
    )
    rows = _validate_policies(document.get("policies", []), known_tools=known_tools, problems=problems)
    _check_scopes(rows, existing=existing, prune=prune, problems=problems)
    toolsets = (
        toolsets_validate(document["toolsets"], known_tools=known_tools, problems=problems)
        if "toolsets" in document
        else None
    )
    rules = rules_validate(document, problems=problems)
    role_mappings = (
        role_mappings_validate(document[ROLE_MAPPINGS_KEY], problems=problems)
        if ROLE_MAPPINGS_KEY in document
        else None
    )
    return _Checked(
        switches=switches,
        rows=rows,
        pins=pins,
        metadata=metadata,
        toolsets=toolsets,
        rules=rules,
        role_mappings=role_mappings,
    )


def _validate_switches(
    tools: Any, *, known_tools: set[str], problems: list[str], pins: dict[str, str], metadata: dict[str, dict]
) -> dict[str, bool]:
    if not isinstance(tools, dict):
        problems.append('"tools" must be an object of tool id -> {"enabled": true|false}')
        return {}
    switches = {}
    for tool_id, entry in tools.items():
        if tool_id not in known_tools:
            problems.append(f"tools: {_unknown_tool(tool_id, known_tools)}")
        elif (
            not isinstance(entry, dict)
            or "enabled" not in entry
            or not set(entry) <= TOOL_KEYS
            or not isinstance(entry["enabled"], bool)
        ):
            problems.append(f'tools: {tool_id!r} must be {{"enabled": true|false}}')
        elif "schema_hash" in entry and not (
            isinstance(entry["schema_hash"], str) and SCHEMA_HASH.match(entry["schema_hash"])
        ):
            problems.append(f'tools: {tool_id!r} has a schema_hash that is not "sha256:<64 hex digits>"')
        elif _metadata_problems(tool_id, entry, problems):
            continue
        else:
            switches[tool_id] = entry["enabled"]
            if "schema_hash" in entry:
                pins[tool_id] = entry["schema_hash"].removeprefix(SCHEMA_HASH_PREFIX)
            metadata[tool_id] = {key: entry[key] for key in (*TOOL_METADATA_KEYS, "version") if key in entry}
    return switches


def _metadata_problems(tool_id: str, entry: dict[str, Any], problems: list[str]) -> bool:
    """Add what is wrong with a tool entry's metadata keys; True if anything was."""
    found_before = len(problems)
    if "consequence_level" in entry and entry["consequence_level"] not in VALID_LEVELS:
        problems.append(f"tools: {tool_id!r}: consequence_level must be one of {', '.join(VALID_LEVELS)}")
    if "requires_confirmation" in entry and not isinstance(entry["requires_confirmation"], bool):
        problems.append(f"tools: {tool_id!r}: requires_confirmation must be true or false")
    if "tags" in entry:
        problem = tags_problem(entry["tags"])
        if problem:
            problems.append(f"tools: {tool_id!r}: {problem}")
    if "version" in entry and not (entry["version"] is None or isinstance(entry["version"], str)):
        problems.append(f"tools: {tool_id!r}: version must be a string or null")
    return len(problems) > found_before


def _current_metadata(tool: Tool) -> dict[str, Any]:
    return {
        "consequence_level": tool.consequence_level,
        "requires_confirmation": tool.requires_confirmation,
        "tags": list(tool.tags),
        "version": tool.version or None,
    }


def _metadata_conflicts(metadata: Mapping[str, dict[str, Any]], tool_rows: Mapping[str, Tool]) -> list[str]:
    """A file cannot change a version, nor a code tool's metadata (its contract sets that)."""
    problems = []
    for tool_id, wanted in sorted(metadata.items()):
        tool = tool_rows[tool_id]
        current = _current_metadata(tool)
        if wanted.get("version", current["version"]) != current["version"]:
            problems.append(f"tools: {tool_id!r}: version is {current['version']!r}; a file cannot change it")
        if tool.source != Tool.Source.MCP:
            problems += [
                f"tools: {tool_id!r}: {key} is {current[key]!r} in the tool's code; change it there, not in the file"
                for key, value in sorted(wanted.items())
                if key != "version" and value != current[key]
            ]
    return problems


def _apply_metadata(metadata: Mapping[str, dict[str, Any]], tool_rows: Mapping[str, Tool]) -> None:
    """An MCP tool takes the file's metadata (checked by `_metadata_conflicts` first)."""
    for tool_id, wanted in sorted(metadata.items()):
        tool = tool_rows[tool_id]
        if tool.source != Tool.Source.MCP:
            continue
        merged = {**_current_metadata(tool), **{key: value for key, value in wanted.items() if key != "version"}}
        tool_metadata_set(
            tool_id=tool_id,
            consequence_level=merged["consequence_level"],
            requires_confirmation=merged["requires_confirmation"],
            tags=merged["tags"],
        )


def _pin_problems(pins: Mapping[str, str], switches: Mapping[str, bool], tool_rows: Mapping[str, Tool]) -> list[str]:
    """Pinned definitions: a hash must be the tool's current one; an MCP tool is enabled only by its hash."""
    problems = []
    for tool_id, enabled in sorted(switches.items()):
        tool = tool_rows[tool_id]
        pinned = pins.get(tool_id)
        if pinned is not None and pinned != tool.schema_hash:
            problems.append(f"tools: {tool_id!r}: schema_hash differs from the tool's current definition")
        elif enabled and tool.source == Tool.Source.MCP and pinned is None:
            problems.append(f"tools: {tool_id!r} comes from an MCP server; enabling it requires its schema_hash")
    return problems


def _approve_pinned(switches: Mapping[str, bool], pins: Mapping[str, str], tool_rows: Mapping[str, Tool]) -> None:
    """Enabling an upstream tool whose live definition is not approved yet (new or drifted) approves
    exactly the definition the file pins, so a reviewed policy file in git is an approval."""
    for tool_id, enabled in sorted(switches.items()):
        if enabled and tool_rows[tool_id].source == Tool.Source.MCP:
            try:
                approved = mcp_tool_approve(tool_id=tool_id, via="policy import", only_if_unapproved=True)
            except AppError as error:
                raise PolicyFileError([f"tools: {error}"]) from None
            if approved.tool.schema_hash != pins[tool_id]:
                raise PolicyFileError(
                    [
                        f"tools: {tool_id!r}: the new definition's hints ask for a stricter effect "
                        f"({approved.tool.effect}); export again and review that"
                    ]
                )
            tool_rows[tool_id].is_enabled = approved.tool.is_enabled


def _validate_policies(policies: Any, *, known_tools: set[str], problems: list[str]) -> list[_PolicyRow]:
    if not isinstance(policies, list):
        problems.append('"policies" must be a list of policy objects')
        return []
    tenants = set(Tenant.objects.values_list("slug", flat=True))
    accounts = set(ServiceAccount.objects.values_list("tenant__slug", "name"))
    server_prefixes = mcp_server_tool_id_prefixes()
    rows = []
    seen: set[str] = set()
    for position, entry in enumerate(policies):
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not _is_slug(name):
            problems.append(
                f"policies[{position}]: an object whose name is a slug of at most {MAX_NAME_LENGTH} characters"
            )
            continue
        if name in seen:
            problems.append(f"policy {name!r}: the name appears more than once in the file")
        seen.add(name)
        row = _validate_policy(
            name,
            entry,
            known_tools=known_tools,
            server_prefixes=server_prefixes,
            tenants=tenants,
            accounts=accounts,
            problems=problems,
        )
        if row is not None:
            rows.append(row)
    return rows


def _validate_policy(
    name: str,
    entry: dict[str, Any],
    *,
    known_tools: set[str],
    server_prefixes: list[str],
    tenants: set[str],
    accounts: set[tuple[str, str]],
    problems: list[str],
) -> _PolicyRow | None:
    """The checked row, or None after adding this policy's problems (each one names it)."""
    where = f"policy {name!r}"
    found_before = len(problems)
    problems += [f"{where}: unknown key {key!r}" for key in sorted(set(entry) - POLICY_KEYS)]

    tenant = entry.get("tenant")
    account = entry.get("service_account")
    if tenant is not None and (not isinstance(tenant, str) or tenant not in tenants):
        problems.append(f"{where}: unknown tenant {tenant!r}")
    if account is not None:
        if tenant is None:
            problems.append(f"{where}: service_account {account!r} needs a tenant")
        elif not isinstance(account, str) or (tenant, account) not in accounts:
            problems.append(f"{where}: unknown service account {account!r} in tenant {tenant!r}")

    allowed = _string_list(entry.get("allowed_tools", []), f"{where}: allowed_tools", problems)
    problems += [
        f"{where}: {_unknown_tool(tool_id, known_tools)}"
        for tool_id in allowed
        if not is_pattern(tool_id) and tool_id not in known_tools
    ]
    problems += [
        f"{where}: allowed_tools: {problem}"
        for pattern in allowed
        if is_pattern(pattern)
        and (problem := pattern_problem(pattern, known_ids=known_tools, server_prefixes=server_prefixes)) is not None
    ]
    features = {
        name: sorted(set(_string_list(entry.get(name, []), f"{where}: {name}", problems))) for name in FEATURE_FIELDS
    }
    problems += [
        f"{where}: {name}: {problem}"
        for name, entries in features.items()
        for entry_name in entries
        if (problem := feature_entry_problem(name, entry_name)) is not None
    ]
    effects = _string_list(
        entry.get("require_approval_for_effects", []), f"{where}: require_approval_for_effects", problems
    )
    problems += [
        f"{where}: unknown effect {effect!r} (use {', '.join(sorted(VALID_EFFECTS))})"
        for effect in effects
        if effect not in VALID_EFFECTS
    ]

    approval = _validate_approval(entry, where=where, known_tools=known_tools, problems=problems)
    budgets = {budget: entry.get(budget) for budget in BUDGET_FIELDS}
    problems += [
        f"{where}: {budget} must be a positive integer or null"
        for budget, value in budgets.items()
        if not (value is None or (type(value) is int and 1 <= value <= MAX_BUDGET))
    ]
    active = entry.get("active", True)
    if not isinstance(active, bool):
        problems.append(f"{where}: active must be true or false")
    if len(problems) > found_before:
        return None
    return _PolicyRow(
        name=name,
        tenant=tenant,
        service_account=account,
        allowed_tools=sorted(set(allowed)),
        features=features,
        require_approval_for_effects=sorted(set(effects)),
        approval=approval,
        budgets=budgets,
        active=active,
    )


def _validate_approval(
    entry: dict[str, Any], *, where: str, known_tools: set[str], problems: list[str]
) -> dict[str, Any]:
    """The policy's approval settings beyond the effects, normalised (absent keys: the defaults)."""
    level = entry.get("require_approval_at_or_above")
    if level is not None and level not in VALID_LEVELS:
        problems.append(f"{where}: require_approval_at_or_above must be null or one of {', '.join(VALID_LEVELS)}")
    tools = _string_list(entry.get("require_approval_for_tools", []), f"{where}: require_approval_for_tools", problems)
    problems += [
        f"{where}: require_approval_for_tools names {_unknown_tool(tool_id, known_tools)}"
        for tool_id in tools
        if tool_id not in known_tools
    ]
    approver = entry.get("approver", Approver.OPERATOR.value)
    if approver not in POLICY_APPROVERS:
        problems.append(f"{where}: approver must be one of {', '.join(POLICY_APPROVERS)}")
    ttl = entry.get("approval_ttl_s", DEFAULT_APPROVAL_TTL_S)
    if not (type(ttl) is int and MIN_APPROVAL_TTL_S <= ttl <= MAX_APPROVAL_TTL_S):
        problems.append(
            f"{where}: approval_ttl_s must be whole seconds from {MIN_APPROVAL_TTL_S} to {MAX_APPROVAL_TTL_S}"
        )
    return {
        "require_approval_at_or_above": level,
        "require_approval_for_tools": sorted(set(tools)),
        "approver": approver,
        "approval_ttl_s": ttl,
    }


def _unknown_tool(tool_id: str, known_tools: set[str]) -> str:
    closest = closest_tool_id(tool_id, sorted(known_tools))
    return f"unknown tool id {tool_id!r}" + (f" (did you mean {closest!r}?)" if closest else "")


def _is_slug(name: str) -> bool:
    try:
        validate_slug(name)
    except ValidationError:
        return False
    return len(name) <= MAX_NAME_LENGTH


def _string_list(value: Any, where: str, problems: list[str]) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        problems.append(f"{where} must be a list of strings")
        return []
    return value


def _check_scopes(
    rows: list[_PolicyRow], *, existing: Mapping[str, ToolPolicy], prune: bool, problems: list[str]
) -> None:
    """At most one active policy per scope in the state the import would leave behind."""
    final = {row.name: (row.scope, row.active) for row in rows}
    if not prune:
        for name, policy in existing.items():
            if name not in final:
                scope = (
                    policy.tenant.slug if policy.tenant else None,
                    policy.service_account.name if policy.service_account else None,
                )
                final[name] = (scope, policy.is_active)
    holders: dict[tuple[str | None, str | None], list[str]] = {}
    for name, (scope, active) in sorted(final.items()):
        if active:
            holders.setdefault(scope, []).append(name)
    for (tenant, account), names in sorted(holders.items(), key=lambda item: item[1]):
        if len(names) > 1:
            label = f"service account {tenant}/{account}" if account else f"tenant {tenant}" if tenant else "global"
            problems.append(f"policies {', '.join(map(repr, names))}: more than one active policy for {label}")
