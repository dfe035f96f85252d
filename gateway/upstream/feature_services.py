"""Writes of upstream resources, resource templates and prompts: reconciling a listing, approval, the switch.

The same rules as for tools (services.py): a listing is checked whole before
anything is written; a new entry arrives pending and off; a live definition that
no longer matches the approved one is quarantined (off, `drifted`) until an
operator approves it again; every review decision goes to the change log.
Discovery calls `features_reconcile` inside its own transaction and row lock.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from changes_app.services import change_record
from core.errors import AppError
from gateway.upstream.definitions import DefinitionRefused, DiscoveryBounds, safe_label
from gateway.upstream.features import (
    PROMPT,
    RESOURCE,
    TEMPLATE,
    canonical_feature,
    check_feature,
    feature_hash,
    feature_ident,
    feature_key,
    prompt_name_for,
    resource_uri_for,
    template_name_for,
    template_problem,
)
from gateway.upstream.models import McpFeature, McpServer
from policies_app.governance import governance_bump

logger = logging.getLogger(__name__)

PENDING, APPROVED, DRIFTED, REMOVED = "pending", "approved", "drifted", "removed"


@dataclass
class FeatureReport:
    """What one reconcile changed, by Toolgate name."""

    new: list[str] = field(default_factory=list)
    drifted: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    # Upstream URI templates Toolgate cannot match reads against (RFC 6570 features the SDK's
    # UriTemplate does not parse): not stored, not served; named here and in the log.
    skipped: list[str] = field(default_factory=list)


def feature_name_for(kind: str, slug: str, key: str) -> str:
    if kind == TEMPLATE:
        return template_name_for(slug, key)
    return resource_uri_for(slug, key) if kind == RESOURCE else prompt_name_for(slug, key)


# --- discovery -------------------------------------------------------------------------------


def features_reconcile(
    *,
    server: McpServer,
    resources: Sequence[Mapping[str, Any]],
    prompts: Sequence[Mapping[str, Any]],
    bounds: DiscoveryBounds,
    templates: Sequence[Mapping[str, Any]] = (),
) -> FeatureReport:
    """Check the listings whole, then write: new → pending and off, changed → drifted, gone → removed.

    Runs inside the discovery's transaction; a refused listing raises DefinitionRefused and
    nothing is written. Servers with a per-tenant `provider` are not listed for features
    (their reads would need a tenant's connection): their entries are left as they are.
    """
    report = FeatureReport()
    listed: dict[tuple[str, str], dict[str, Any]] = {}
    for kind, entries in ((RESOURCE, resources), (PROMPT, prompts), (TEMPLATE, templates)):
        names: dict[str, str] = {}
        for raw in entries:
            check_feature(kind, raw, bounds)
            key = feature_key(kind, raw)
            problem = template_problem(key) if kind == TEMPLATE else None
            if problem is not None:
                logger.warning(
                    "mcp server %s: resource template %s not served: %s", server.slug, safe_label(key), problem
                )
                report.skipped.append(key)
                continue
            if (kind, key) in listed:
                raise DefinitionRefused(f"the server lists the {kind} {safe_label(key)} twice")
            name = feature_name_for(kind, server.slug, key)
            if name in names:
                raise DefinitionRefused(
                    f"{kind}s {safe_label(names[name])} and {safe_label(key)} both map to the name {name}"
                )
            names[name] = key
            listed[(kind, key)] = canonical_feature(kind, raw)
    now = timezone.now()
    existing = {
        (row.kind, row.upstream_key): row for row in McpFeature.objects.select_for_update().filter(server=server)
    }
    for (kind, key), definition in listed.items():
        row = existing.get((kind, key))
        if row is None:
            row = McpFeature.objects.create(
                server=server,
                kind=kind,
                upstream_key=key,
                name=feature_name_for(kind, server.slug, key),
                ident=feature_ident(kind, server.slug, key),
                status=PENDING,
                is_enabled=False,
                live_definition=definition,
                live_hash=feature_hash(kind, definition),
                first_seen_at=now,
                last_seen_at=now,
            )
            report.new.append(row.name)
            continue
        _update(row, definition, now, report)
    for (_kind, key), row in existing.items():
        if (row.kind, key) not in listed and row.status != REMOVED:
            before = _snapshot(row)
            row.status, row.removed_at, row.is_enabled = REMOVED, now, False
            row.save(update_fields=["status", "removed_at", "is_enabled"])
            change_record(action="feature.remove", obj=row, before=before, after=_snapshot(row))
            report.removed.append(row.name)
    return report


def _update(row: McpFeature, definition: dict[str, Any], now: Any, report: FeatureReport) -> None:
    before = _snapshot(row)
    live_hash = feature_hash(row.kind, definition)
    changed = live_hash != row.live_hash or row.status == REMOVED
    row.live_definition, row.live_hash, row.last_seen_at, row.removed_at = definition, live_hash, now, None
    quarantined = False
    if row.approved_hash and live_hash != row.approved_hash:
        if row.status != DRIFTED:
            row.enabled_before_quarantine = row.is_enabled
            row.status, row.drifted_at, row.is_enabled = DRIFTED, now, False
            quarantined = True
            report.drifted.append(row.name)
    elif row.approved_hash:
        if row.status == DRIFTED and row.enabled_before_quarantine:
            row.is_enabled = True  # the upstream went back to exactly what was approved
        row.status, row.enabled_before_quarantine = APPROVED, False
    else:
        row.status, row.is_enabled = PENDING, False
    if not changed and not quarantined:
        report.unchanged.append(row.name)
    row.save()
    if quarantined:  # the switch went off without an operator: say who did it
        change_record(action="feature.quarantine", obj=row, before=before, after=_snapshot(row))


def _snapshot(row: McpFeature) -> dict[str, Any]:
    return {
        "status": row.status,
        "approved_hash": row.approved_hash,
        "approved_via": row.approved_via,
        "is_enabled": row.is_enabled,
    }


# --- review ----------------------------------------------------------------------------------


def _actor(user: AbstractBaseUser | None) -> Any:
    return user if user is not None and user.is_authenticated else None


@transaction.atomic
def mcp_features_approve(
    *,
    names: Iterable[str],
    enable: bool = False,
    user: AbstractBaseUser | None = None,
    via: str = "admin",
    expected_live_hashes: Mapping[str, str] | None = None,
) -> list[McpFeature]:
    """Pin each entry's live definition as the approved one (all or nothing); `enable` switches them on.

    `expected_live_hashes` (name → the live hash a reviewer was shown) refuses an entry
    whose definition moved while it was reviewed. A drifted entry that was on before its
    quarantine goes back on; a new one stays off unless `enable`.
    """
    wanted = sorted(set(names))
    rows = {row.name: row for row in McpFeature.objects.select_for_update().filter(name__in=wanted)}
    problems = [f"no MCP resource or prompt {name!r}" for name in wanted if name not in rows]
    for name, row in rows.items():
        if row.status == REMOVED:
            problems.append(f"{name} was removed upstream; there is no live definition to approve")
        expected = (expected_live_hashes or {}).get(name)
        if expected is not None and expected != row.live_hash:
            problems.append(f"{name}: the live definition changed while it was being reviewed; review it again")
    if problems:
        raise AppError("nothing was approved: " + "; ".join(problems))
    now = timezone.now()
    for name in wanted:
        row = rows[name]
        before = _snapshot(row)
        restore = row.status == DRIFTED and row.enabled_before_quarantine
        row.approved_definition, row.approved_hash = row.live_definition, row.live_hash
        row.approved_at, row.approved_by, row.approved_via = now, _actor(user), via[:150]
        row.status, row.drifted_at, row.enabled_before_quarantine = APPROVED, None, False
        row.is_enabled = row.is_enabled or restore or enable
        row.save()
        change_record(action="feature.approve_definition", obj=row, before=before, after=_snapshot(row))
    governance_bump()
    return [rows[name] for name in wanted]


@transaction.atomic
def mcp_features_set_enabled(*, names: Iterable[str], enabled: bool) -> list[str]:
    """Flip the operator's switch of these entries; only an approved definition may be switched on."""
    rows = list(McpFeature.objects.select_for_update().filter(name__in=sorted(set(names))).order_by("name"))
    if enabled:
        problems = [
            f"{row.name} is {row.get_status_display().lower()}; approve it first"
            for row in rows
            if row.status != APPROVED
        ]
        if problems:
            raise AppError("nothing was switched: " + "; ".join(problems))
    changed = []
    for row in rows:
        if row.is_enabled == enabled:
            continue
        before = _snapshot(row)
        row.is_enabled = enabled
        row.save(update_fields=["is_enabled"])
        change_record(
            action="feature.enable" if enabled else "feature.disable", obj=row, before=before, after=_snapshot(row)
        )
        changed.append(row.name)
    if changed:
        governance_bump()
    return changed
