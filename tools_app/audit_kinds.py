"""Audit trails kept above tools_app, exported and pruned by `manage.py audit` with the invocations.

The MCP gateway's reads of upstream resources and prompts (`McpFeatureRead`) are audit rows
too, but tools_app never imports the gateway: the gateway installs its trail here when it is
ready, the way tool sources install their answers in `tools_app.sources`. An installed kind
is exported with `audit export --kind NAME` and pruned by every `audit prune` and retention
run, under the same cutoff as the invocations.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

Rows = Callable[..., Iterator[dict[str, Any]]]  # (since=, until=, tenant_slug=) → rows oldest first
Prune = Callable[..., tuple[int, int]]  # (cutoff=, batch_size=) → (rows deleted, batches)


@dataclass(frozen=True, slots=True)
class AuditKind:
    """One installed trail: its export name, its columns in order, its rows and its pruning."""

    name: str
    noun: str  # how the prune report names its rows ("feature reads")
    fields: tuple[str, ...]
    rows: Rows
    prune: Prune


_installed: dict[str, AuditKind] = {}


def install_audit_kind(kind: AuditKind) -> None:
    """Called by the trail's app at startup; installing the same name again replaces it."""
    _installed[kind.name] = kind


def audit_kinds() -> dict[str, AuditKind]:
    """The installed trails by export name, in installation order."""
    return dict(_installed)
