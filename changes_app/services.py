"""Writing the change log: one call per governance write, inside that write's transaction.

The fields a row may hold are allowlisted here per object type, in one place
that a reviewer can read at a glance: whatever a caller passes, a field not
named below never reaches the table, so a credential column or a key digest
cannot leak into the log by a careless snapshot.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models, transaction
from structlog.contextvars import get_contextvars

from changes_app.context import current_source
from changes_app.models import Change

RECORDED_FIELDS: dict[str, tuple[str, ...]] = {
    "tools_app.tool": ("is_enabled", "effect", "consequence_level", "requires_confirmation", "tags"),
    "tools_app.toolset": ("tenant", "name", "description", "tool_ids", "tags"),
    "gateway.mcpfeature": ("status", "approved_hash", "approved_via", "is_enabled"),
    "gateway.mcptool": (
        "status",
        "approved_hash",
        "approved_via",
        "effect",
        "effect_confirmed",
        "is_enabled",
        "elicitation_allowed",
        "sampling_allowed",
    ),
    "policies_app.toolpolicy": (
        "name",
        "tenant",
        "service_account",
        "is_active",
        "allowed_tools",
        "allowed_resources",
        "allowed_prompts",
        "require_approval_for_effects",
        "require_approval_at_or_above",
        "require_approval_for_tools",
        "approver",
        "approval_ttl_s",
        "max_runtime_ms",
        "max_result_bytes",
        "rate_limit_per_minute",
        "max_concurrency",
        "max_samples_per_call",
    ),
    "policies_app.argumentrule": (
        "name",
        "tenant",
        "service_account",
        "tools",
        "tags",
        "condition",
        "action",
        "message",
        "is_active",
    ),
    "policies_app.resultguard": (
        "name",
        "tenant",
        "service_account",
        "tools",
        "tags",
        "detectors",
        "patterns",
        "action",
        "message",
        "is_active",
    ),
    "policies_app.serviceaccount": ("tenant", "name", "scopes", "revoked_at", "consent_redirect_uris"),
    # Never the token's prefix or digest: when one was issued is all the log needs.
    "policies_app.delegation": (
        "tenant",
        "user",
        "service_account",
        "tools",
        "connection_ids",
        "origin",
        "expires_at",
        "token_issued_at",
        "revoked_at",
    ),
    # MCP clients that sign in: never a code, token, prefix or digest.
    "signin.signinclient": ("client_id", "kind", "client_name", "redirect_uris", "revoked_at"),
    "signin.signingrant": ("client", "delegation", "tenant", "redirect_uri", "revoked_at", "revoke_reason"),
    "connections_app.executiongrant": ("tenant", "service_account", "connections", "expires_at", "revoked_at"),
    "policies_app.approvalrequest": ("status", "decided_by_name", "reason"),
    "connections_app.connection": (
        "owner",
        "provider",
        "credential_type",
        "label",
        "scopes",
        "expires_at",
        "status",
        "revoked_at",
    ),
    # Single sign-on: providers (never the client secret), role mappings, logins and the roles they set.
    "identity_app.identityprovider": (
        "slug",
        "display_name",
        "issuer",
        "client_id",
        "scopes",
        "username_claim",
        "email_claim",
        "groups_claim",
        "tenant",
        "link_by_verified_email",
        "is_enabled",
    ),
    "identity_app.rolemapping": ("provider", "group", "operator_role", "is_staff", "tenant", "tenant_role"),
    "identity_app.login": ("provider", "subject", "username", "audience", "groups", "reason"),
    "identity_app.logout": ("provider", "subject", "sid", "username", "sessions_ended", "via"),
    "identity_app.roles": ("is_staff", "is_superuser", "operator_groups", "tenant_roles"),
    # Key ids are public names, never key material; one triple of counts per kind of sealed row.
    "connections_app.keyring": (
        "primary_key_id",
        *(
            f"{kind}_{count}"
            for kind in (
                "connections",
                "providers",
                "sso_providers",
                "mcp_tokens",
                "mcp_secret_envs",
                "approval_args",
                "webhook_secrets",
            )
            for count in ("rewrapped", "skipped", "failed")
        ),
        "key_ids_in_use",
    ),
}


class ChangeLogError(RuntimeError):
    """A programming error in recording a change (no allowlist, no transaction): never a user's fault."""


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """An object that is not a model row (a key rotation run), or a row named explicitly."""

    type: str
    id: str
    label: str = ""
    tenant_id: int | None = None


def change_snapshot(instance: models.Model) -> dict[str, Any]:
    """The allowlisted fields of a row as JSON values: foreign keys as ids, many-to-many as sorted ids."""
    values: dict[str, Any] = {}
    for name in _allowlist(instance._meta.label_lower):
        field = instance._meta.get_field(name)
        if field.many_to_many:
            values[name] = sorted(str(pk) for pk in getattr(instance, name).values_list("pk", flat=True))
        else:
            values[name] = field.value_from_object(instance)  # type: ignore[union-attr]
    return values


def change_record(
    *,
    action: str,
    obj: models.Model | ObjectRef,
    before: Mapping[str, Any] | None = None,
    after: Mapping[str, Any] | None = None,
    links: Mapping[str, Any] | None = None,
) -> Change | None:
    """Append one entry for a write; returns None when no recorded field changed (nothing to remember).

    `before` is None for a creation and `after` None for a deletion. Must run
    inside the write's transaction, so a write that rolls back leaves no entry
    and a recorded entry always describes a write that happened.
    """
    if not transaction.get_connection().in_atomic_block:
        raise ChangeLogError("change_record must run inside the transaction of the write it records")
    ref = obj if isinstance(obj, ObjectRef) else _ref(obj)
    allowed = _allowlist(ref.type)
    old = _jsonable({key: value for key, value in (before or {}).items() if key in allowed})
    new = _jsonable({key: value for key, value in (after or {}).items() if key in allowed})
    changed = sorted(key for key in allowed if old.get(key) != new.get(key) or (key in old) != (key in new))
    if before is not None and after is not None and not changed:
        return None
    origin, actor = current_source()
    return Change.objects.create(
        action=action,
        origin=origin,
        actor_kind=actor.kind,
        actor_id=actor.id[:150],
        actor_label=actor.label[:200],
        request_id=str(get_contextvars().get("request_id") or "")[:64],
        object_type=ref.type,
        object_id=ref.id[:100],
        object_label=ref.label[:200],
        tenant_id=ref.tenant_id,
        before={key: old[key] for key in changed if key in old},
        after={key: new[key] for key in changed if key in new},
        links=_jsonable(dict(links or {})),
    )


def _ref(instance: models.Model) -> ObjectRef:
    tenant_id = getattr(instance, "tenant_id", None)
    return ObjectRef(
        type=instance._meta.label_lower,
        id=str(instance.pk),
        label=str(instance),
        tenant_id=int(tenant_id) if tenant_id is not None else None,
    )


def _allowlist(object_type: str) -> tuple[str, ...]:
    try:
        return RECORDED_FIELDS[object_type]
    except KeyError:
        raise ChangeLogError(f"no recorded fields for {object_type!r}: add them to RECORDED_FIELDS") from None


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    """Values as they will read back from the JSON column, so before and after compare like for like."""
    return json.loads(json.dumps(values, cls=DjangoJSONEncoder))
