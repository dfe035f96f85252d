"""Approvals: bound to the exact call, decided by an operator, consumed by one run."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from config.runtime import build_runtime
from policies_app.governance import governance_bump, governance_cache
from policies_app.models import ApprovalRequest
from policies_app.services import ApprovalOutcome, ApprovalTerms, ApprovalVerdict, approval_check, approval_decide
from runner.types import ConsequenceLevel, ErrorCode, ToolEffect, ToolInvocationContext
from tests.factories import TenantFactory, ToolPolicyFactory, UserFactory, service_account_with_key
from tools_app.models import Tool, ToolInvocation

pytestmark = pytest.mark.django_db


@pytest.fixture
def setup():
    call_command("sync_tools")
    Tool.objects.filter(pk="core__wait").update(is_enabled=True)
    governance_bump()
    account, _key = service_account_with_key(TenantFactory(slug="acme"))
    ToolPolicyFactory(tenant=account.tenant, allowed_tools=["core__wait"], require_approval_for_effects=["read_only"])
    governance_cache.refresh()
    return build_runtime().runner, account


def _call(runner, account, args=None, call_id="call-1", tenant_id=None):
    ctx = ToolInvocationContext(
        run_id="run", tool_call_id=call_id, tenant_id=tenant_id or str(account.tenant_id), actor_id=str(account.id)
    )
    return runner.exec("core__wait", args or {"ms": 1}, ctx)


def test_approval_flow_runs_exactly_once_after_an_operator_approves(setup):
    runner, account = setup
    operator = UserFactory(username="operator")

    first = _call(runner, account)
    still_pending = _call(runner, account)
    approval = ApprovalRequest.objects.get()
    approval_decide(approval=approval, approve=True, decided_by=operator)
    approved = _call(runner, account)
    repeat = _call(runner, account)

    assert (first.error_code, first.approval_id) == (ErrorCode.APPROVAL_REQUIRED, str(approval.pk))
    assert (still_pending.error_code, still_pending.approval_id) == (ErrorCode.APPROVAL_REQUIRED, str(approval.pk))
    assert (approved.ok, repeat.ok, repeat.value) == (True, True, approved.value)
    assert ToolInvocation.objects.filter(tool_call_id="call-1", executed=True).count() == 1
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by, approval.consumed_at is not None) == ("consumed", operator, True)
    assert ApprovalRequest.objects.count() == 1


def test_denied_approval_answers_policy_denied(setup):
    runner, account = setup
    _call(runner, account)
    approval_decide(approval=ApprovalRequest.objects.get(), approve=False, decided_by=None)

    result = _call(runner, account)

    assert (result.error_code, result.safe_message) == (ErrorCode.POLICY_DENIED, "the approval was denied")
    assert not ToolInvocation.objects.filter(executed=True).exists()


def test_expired_approval_answers_policy_denied_even_if_approved(setup):
    runner, account = setup
    _call(runner, account)
    approval = ApprovalRequest.objects.get()
    approval_decide(approval=approval, approve=True, decided_by=None)
    ApprovalRequest.objects.filter(pk=approval.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    result = _call(runner, account)

    assert (result.error_code, result.safe_message) == (
        ErrorCode.POLICY_DENIED,
        "the approval expired; repeat the call with a new tool_call_id to ask again",
    )


def test_approval_is_bound_to_the_args(setup):
    runner, account = setup
    _call(runner, account, {"ms": 1})
    approval_decide(approval=ApprovalRequest.objects.get(), approve=True, decided_by=None)

    other_args = _call(runner, account, {"ms": 2})

    assert other_args.error_code is ErrorCode.POLICY_DENIED
    assert ApprovalRequest.objects.get().status == "approved"  # not consumed by the other request


def test_expired_pending_request_cannot_be_approved(setup):
    runner, account = setup
    _call(runner, account)
    approval = ApprovalRequest.objects.get()
    ApprovalRequest.objects.filter(pk=approval.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    changed = approval_decide(approval=approval, approve=True, decided_by=None)

    assert changed is False
    assert ApprovalRequest.objects.get().status == "pending"


def test_an_invalid_call_is_refused_before_any_approval_exists(setup):
    runner, account = setup

    invalid_args = _call(runner, account, {"ms": -5})
    unknown_field = _call(runner, account, {"ms": 1, "extra": True}, call_id="call-2")

    assert [r.error_code for r in (invalid_args, unknown_field)] == [ErrorCode.VALIDATION] * 2
    assert ApprovalRequest.objects.count() == 0


def test_an_approved_call_runs_once_and_its_repeats_are_replays(setup):
    runner, account = setup
    _call(runner, account, {"ms": 1})
    approval = ApprovalRequest.objects.get()
    approval_decide(approval=approval, approve=True, decided_by=None)

    ran = _call(runner, account, {"ms": 1})
    again = _call(runner, account, {"ms": 1})

    assert (ran.ok, again.ok, again.value) == (True, True, ran.value)
    assert ToolInvocation.objects.filter(tool_call_id="call-1", executed=True).count() == 1
    assert list(ToolInvocation.objects.order_by("id").values_list("decision", flat=True)) == [
        "require_approval",
        "allow",
        "replayed",
    ]


def test_a_used_approval_still_lets_its_own_call_through_so_a_refusal_further_down_does_not_waste_it(setup):
    # given an approval already used by call-1 whose attempt was then refused past the approval stage
    # (the broker refusing its connection, say): the claim was released, nothing ran
    runner, account = setup
    _call(runner, account)
    approval = ApprovalRequest.objects.get()
    approval_decide(approval=approval, approve=True, decided_by=None)
    ApprovalRequest.objects.filter(pk=approval.pk).update(status="consumed", consumed_at=timezone.now())

    repeat = _call(runner, account)
    other_call = _call(runner, account, call_id="call-2")

    assert repeat.ok is True  # the approval covers call-1, and its claim lets it run only once
    assert other_call.error_code is ErrorCode.APPROVAL_REQUIRED  # another tool_call_id needs its own approval


def test_a_policy_level_threshold_sends_a_call_to_approval_and_the_catalog_still_offers_it(setup):
    runner, account = setup
    ToolPolicyFactory(
        tenant=account.tenant,
        service_account=account,
        allowed_tools=["core__wait"],
        require_approval_for_effects=[],
        require_approval_at_or_above="low",
    )
    governance_cache.refresh()

    result = _call(runner, account, call_id="level-1")

    assert result.error_code is ErrorCode.APPROVAL_REQUIRED
    approval = ApprovalRequest.objects.get(tool_call_id="level-1")
    assert approval.required_because.endswith("at consequence level low or above (this tool: low)")
    assert approval.consequence_level == "low"


def test_a_policy_naming_the_tool_sends_it_to_approval(setup):
    runner, account = setup
    ToolPolicyFactory(
        tenant=account.tenant,
        service_account=account,
        allowed_tools=["core__wait"],
        require_approval_for_effects=[],
        require_approval_for_tools=["core__wait"],
    )
    governance_cache.refresh()

    result = _call(runner, account, call_id="named-1")

    assert result.error_code is ErrorCode.APPROVAL_REQUIRED
    assert ApprovalRequest.objects.get(tool_call_id="named-1").required_because.endswith(
        "requires approval for this tool"
    )


def test_approval_check_answers_a_typed_verdict_and_a_denial_carries_its_reason(setup):
    _runner, account = setup
    terms = ApprovalTerms(
        effect=ToolEffect.READ_ONLY,
        consequence_level=ConsequenceLevel.LOW,
        required_because="read_only effects require approval",
        approver="operator",
        ttl_s=60,
    )
    ask = {
        "tenant_id": account.tenant_id,
        "service_account_id": str(account.pk),
        "tool_id": "core__wait",
        "connection_id": None,
        "tool_call_id": "call-1",
        "terms": terms,
    }

    first = approval_check(**ask, args_sha256="a" * 64)
    other_args = approval_check(**ask, args_sha256="b" * 64)

    assert (first.outcome, first.reason) == (ApprovalOutcome.PENDING, "")
    assert other_args == ApprovalVerdict(
        ApprovalOutcome.DENY, first.approval, "this tool_call_id awaits approval for a different request"
    )
    with pytest.raises(ValueError, match="a denial says why"):
        ApprovalVerdict(ApprovalOutcome.DENY, first.approval)
    with pytest.raises(ValueError, match="a denial says why"):
        ApprovalVerdict(ApprovalOutcome.ALLOW, first.approval, "a reason where none belongs")
