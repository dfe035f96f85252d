"""Approval requests as the pipeline opens them (args sealed for the approver), for UI and admin tests."""

from __future__ import annotations

import hashlib
from typing import Any

from policies_app.approval_args import approval_args_seal
from policies_app.models import ApprovalRequest, ServiceAccount
from policies_app.services import ApprovalTerms, approval_check
from runner.schema import canonical_json
from runner.types import ConsequenceLevel, ToolEffect


def pending_approval(
    account: ServiceAccount,
    args: dict[str, Any],
    *,
    tool_call_id: str = "call-1",
    approver: str = "operator",
    connection_id: str | None = None,
    subject_id: str | None = None,
) -> ApprovalRequest:
    return approval_check(
        tenant_id=account.tenant_id,
        service_account_id=str(account.pk),
        tool_id="github__create_issue",
        connection_id=connection_id,
        args_sha256=hashlib.sha256(canonical_json(args)).hexdigest(),
        tool_call_id=tool_call_id,
        subject_id=subject_id,
        terms=ApprovalTerms(
            effect=ToolEffect.EXTERNAL_SIDE_EFFECT,
            consequence_level=ConsequenceLevel.MEDIUM,
            required_because="the tool requires confirmation of every call",
            approver=approver,
            ttl_s=3600,
        ),
        seal_args=lambda approval_id, tenant_id: approval_args_seal(approval_id, tenant_id, args),
    ).approval
