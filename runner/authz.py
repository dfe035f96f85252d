"""The authorization stage's rules: a call on behalf of a person needs their delegation and permission.

With a subject, `tool.execute` needs both the service account's
policy (the policy stage, before this) and the subject's permission and an
active delegation. Every refusal about the token itself (forged, revoked,
expired, another tenant's or another caller's) answers the same message, so a
prober learns nothing about which tokens exist; the audit row keeps the
category for operators.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from runner.ports import AuthzVerdict, Clock, DelegationStore, DelegationView
from runner.types import UNKNOWN_DELEGATION, ToolInvocationContext, ToolSpec

SUBJECT_REFUSED = (
    "the subject token is not valid for this service account; "
    "the person must delegate to it again (tenant UI: Delegations)"
)
TOOL_NOT_DELEGATED = "the person did not delegate this tool to this service account"


class Reason:
    """The categories an authz_denied audit row records."""

    UNKNOWN_TOKEN = "unknown_token"  # noqa: S105 - a category, not a secret
    OTHER_CALLER = "other_caller"
    REVOKED = "revoked"
    EXPIRED = "expired"
    NOT_MEMBER = "not_member"
    TOOL_NOT_DELEGATED = "tool_not_delegated"


@dataclass(frozen=True, slots=True)
class DelegationAuthorization:
    """The AuthorizationPort over a DelegationStore: subject permission AND an active delegation."""

    delegations: DelegationStore
    clock: Clock

    def check(self, ctx: ToolInvocationContext, spec: ToolSpec) -> AuthzVerdict:
        if ctx.delegation_id is None:
            return AuthzVerdict(allowed=True)
        delegation = None if ctx.delegation_id == UNKNOWN_DELEGATION else self.delegations.get(ctx.delegation_id)
        return authorize(ctx, spec, delegation, now=self.clock.now())


def authorize(
    ctx: ToolInvocationContext, spec: ToolSpec, delegation: DelegationView | None, *, now: datetime
) -> AuthzVerdict:
    """The decision itself, given the delegation the token named (None: it named none)."""
    refusal = subject_refusal(ctx, delegation, now=now)
    if refusal is not None or delegation is None:
        return refusal or _refused(None, Reason.UNKNOWN_TOKEN)
    if delegation.tools is not None and spec.name not in delegation.tools:
        return AuthzVerdict(
            allowed=False,
            subject_id=delegation.subject_id,
            reason=Reason.TOOL_NOT_DELEGATED,
            safe_message=TOOL_NOT_DELEGATED,
        )
    return AuthzVerdict(allowed=True, subject_id=delegation.subject_id, connection_ids=delegation.connection_ids)


def subject_refusal(
    ctx: ToolInvocationContext, delegation: DelegationView | None, *, now: datetime
) -> AuthzVerdict | None:
    """Why the subject token itself cannot be used by this caller now (whatever the tool), or None."""
    if delegation is None:
        return _refused(None, Reason.UNKNOWN_TOKEN)
    if delegation.tenant_id != ctx.tenant_id or delegation.actor_id != ctx.actor_id:
        return _refused(None, Reason.OTHER_CALLER)  # someone else's person: not named in this tenant's audit
    subject = delegation.subject_id
    if delegation.revoked:
        return _refused(subject, Reason.REVOKED)
    if delegation.expires_at is not None and delegation.expires_at <= now:
        return _refused(subject, Reason.EXPIRED)
    if not delegation.subject_is_member:
        return _refused(subject, Reason.NOT_MEMBER)
    return None


def _refused(subject_id: str | None, reason: str) -> AuthzVerdict:
    return AuthzVerdict(allowed=False, subject_id=subject_id, reason=reason, safe_message=SUBJECT_REFUSED)


class NoDelegations:
    """A DelegationStore that knows none: a runner wired without one refuses every subject (fail closed)."""

    def get(self, delegation_id: str) -> DelegationView | None:
        return None
