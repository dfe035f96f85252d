"""Cache invalidation only: any saved or deleted governance row bumps the generation.

Domain behaviour lives in services; these receivers exist so that an edit made
anywhere (admin forms, list_editable, the shell) still reaches every process's
cache on the next call.
"""

from __future__ import annotations

from django.db.models.signals import m2m_changed, post_delete, post_save

from policies_app.governance import governance_bump
from policies_app.models import ExecutionGrant, ServiceAccount, Tenant, ToolPolicy
from tools_app.models import Tool

GOVERNED_MODELS = (Tool, ToolPolicy, ServiceAccount, Tenant, ExecutionGrant)


def _bump(sender: type, **kwargs: object) -> None:
    if kwargs.get("raw") or str(kwargs.get("action", "")).startswith("pre_"):  # fixture loading; m2m's pre_*
        return
    governance_bump()


def connect() -> None:
    for model in GOVERNED_MODELS:
        post_save.connect(_bump, sender=model, dispatch_uid=f"governance-save-{model.__name__}")
        post_delete.connect(_bump, sender=model, dispatch_uid=f"governance-delete-{model.__name__}")
    # A grant's connections are its permission too: adding or removing one is a governance change.
    m2m_changed.connect(_bump, sender=ExecutionGrant.connections.through, dispatch_uid="governance-grant-connections")
