"""The connection gate: a connection may be used only if grant ∩ declared holds it.

A request's declared connection ids are intent, not authority; authority comes
from the execution grant. The check runs before the broker touches anything, so
a refused call never decrypts a credential or reaches a provider.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from runner.ports import GrantStore, GrantView
from runner.types import ErrorCode, ToolInvocationContext, ToolSpec

# One message for "no such grant", "another tenant's" and "another caller's":
# the answer must not tell a prober which grant ids exist.
GRANT_REFUSED = (
    "grant_id does not name an active grant of this service account; use the full id of a grant "
    "made to it (GET /api/v1/grants, or the tenant's Grants page)"
)
PERSONAL = (
    "this connection is personal: only a call on behalf of the person it belongs to "
    "(their subject token, X-Toolgate-Subject) may use it"
)
NOT_GRANTED = (
    "this connection is not in the grant, or not among the connection_ids this call declares; "
    "grant it to this service account, or declare it"
)


@dataclass(frozen=True, slots=True)
class GateRefusal:
    code: ErrorCode
    safe_message: str
    path: str | None = None  # set for validation refusals: which request field is wrong


def effective_connection_ids(granted: Iterable[str], declared: Iterable[str]) -> frozenset[str]:
    """The connections this call may use: granted and declared."""
    return frozenset(granted) & frozenset(declared)


def is_well_formed_connection_id(value: str) -> bool:
    try:
        return str(uuid.UUID(value)) == value.lower()
    except ValueError:
        return False


def check_connection(
    ctx: ToolInvocationContext, spec: ToolSpec, grants: GrantStore, *, now: datetime
) -> GateRefusal | None:
    """None when the call may proceed to the broker; otherwise why not."""
    if not spec.requires_connection:
        if ctx.connection_id is not None:
            return GateRefusal(ErrorCode.VALIDATION, "this tool takes no connection", "connection_id")
        return None
    if not ctx.connection_id:
        return GateRefusal(ErrorCode.VALIDATION, "this tool needs a connection_id", "connection_id")
    if not is_well_formed_connection_id(ctx.connection_id):
        return GateRefusal(ErrorCode.VALIDATION, "connection_id is not a valid id", "connection_id")
    if not ctx.grant_id:
        return GateRefusal(ErrorCode.VALIDATION, "grant_id is required with a connection_id", "grant_id")
    grant = grants.get(ctx.grant_id)
    if grant is None or not _belongs_to_caller(grant, ctx):
        return GateRefusal(ErrorCode.POLICY_DENIED, GRANT_REFUSED)
    if grant.revoked:
        return GateRefusal(ErrorCode.POLICY_DENIED, "the grant was revoked; ask the tenant for a new one")
    if grant.expires_at is not None and grant.expires_at <= now:
        return GateRefusal(ErrorCode.POLICY_DENIED, "the grant has expired; ask the tenant for a new one")
    if ctx.connection_id not in effective_connection_ids(grant.connection_ids, ctx.declared_connection_ids):
        return GateRefusal(ErrorCode.POLICY_DENIED, NOT_GRANTED)
    owner = grant.personal.get(ctx.connection_id)
    if owner is not None and owner != ctx.subject_id:
        return GateRefusal(ErrorCode.POLICY_DENIED, PERSONAL)
    return None


def _belongs_to_caller(grant: GrantView, ctx: ToolInvocationContext) -> bool:
    return grant.tenant_id == ctx.tenant_id and grant.actor_id == ctx.actor_id
