"""Cache invalidation only: a saved or deleted governance row bumps the generation; a cached row is forgotten.

Domain behaviour lives in services; these receivers exist so that an edit made
anywhere (admin forms, list_editable, the shell) still reaches every process's
cache on the next call.
"""

from __future__ import annotations

from django.db import models
from django.db.models.signals import m2m_changed, post_delete, post_save

from policies_app.governance import cached_row_changed, governance_bump
from policies_app.models import (
    ArgumentRule,
    Delegation,
    ResultGuard,
    ServiceAccount,
    Tenant,
    TenantMembership,
    ToolPolicy,
)

# This app's governance rows; the apps above register theirs (tool switches, grants) with `govern`.
# Delegations and memberships decide calls made on a person's behalf (the authorization stage).
GOVERNED_MODELS = (ToolPolicy, ServiceAccount, Tenant, Delegation, TenantMembership, ArgumentRule, ResultGuard)


def _bump(sender: type, **kwargs: object) -> None:
    if kwargs.get("raw") or str(kwargs.get("action", "")).startswith("pre_"):  # fixture loading; m2m's pre_*
        return
    governance_bump()


# Every model `govern` was called for: writes that send no signal (queryset updates) bump by hand for these.
_governed: set[type[models.Model]] = set()


def govern(model: type[models.Model]) -> None:
    """Saving or deleting a row of `model` (or changing a many-to-many through table) bumps the generation."""
    _governed.add(model)
    post_save.connect(_bump, sender=model, dispatch_uid=f"governance-save-{model._meta.label}")
    post_delete.connect(_bump, sender=model, dispatch_uid=f"governance-delete-{model._meta.label}")
    m2m_changed.connect(_bump, sender=model, dispatch_uid=f"governance-m2m-{model._meta.label}")


# Models whose rows are cached one by one (GovernanceCache.get_row), with the kind they are cached under.
_cached_rows: dict[type[models.Model], str] = {}


def _row_changed(sender: type[models.Model], instance: models.Model, **kwargs: object) -> None:
    if not kwargs.get("raw"):
        cached_row_changed(kind=_cached_rows[sender], key=str(instance.pk))


def cache_rows(model: type[models.Model], *, kind: str) -> None:
    """Saving or deleting a row of `model` makes every process forget that row (and nothing else)."""
    _cached_rows[model] = kind
    post_save.connect(_row_changed, sender=model, dispatch_uid=f"cached-row-save-{model._meta.label}")
    post_delete.connect(_row_changed, sender=model, dispatch_uid=f"cached-row-delete-{model._meta.label}")


def row_changed(row: models.Model) -> None:
    """A write that sends no signal (a queryset update) changed `row`: tell the caches that serve it, if any."""
    model = type(row)
    if model in _cached_rows:
        cached_row_changed(kind=_cached_rows[model], key=str(row.pk))
    elif model in _governed:
        governance_bump()


def connect() -> None:
    for model in GOVERNED_MODELS:
        govern(model)
