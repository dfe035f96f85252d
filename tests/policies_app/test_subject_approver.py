"""The person a call is made for as an approver: who decides which call, and who may not."""

from __future__ import annotations

import pytest

from core.errors import AppError
from policies_app.models import ApprovalRequest, Approver
from policies_app.services import approval_decide_as_subject, approver_for_call, delegation_create
from tests.factories import MembershipFactory, TenantFactory, ToolPolicyFactory, UserFactory, service_account_with_key
from tests.support.api import api_client, enable_tools

pytestmark = pytest.mark.django_db

TIME = "core__get_current_time"


@pytest.mark.parametrize(
    ("policy_approver", "requires_confirmation", "subject_id", "decides"),
    [
        (Approver.OPERATOR, True, "user:7", Approver.SUBJECT),  # the tool asks: its person confirms
        (Approver.TENANT_OWNER, True, "user:7", Approver.SUBJECT),
        (Approver.SUBJECT, False, "user:7", Approver.SUBJECT),  # the policy asks the person
        (Approver.SUBJECT, False, None, Approver.OPERATOR),  # no person: operators decide
        (Approver.SUBJECT, True, None, Approver.OPERATOR),
        (Approver.OPERATOR, True, None, Approver.OPERATOR),  # a call for no one keeps today's rule
        (Approver.TENANT_OWNER, False, "user:7", Approver.TENANT_OWNER),  # others' approval stays theirs
        (Approver.OPERATOR, False, "user:7", Approver.OPERATOR),
    ],
)
def test_who_decides_a_call(policy_approver, requires_confirmation, subject_id, decides):
    assert (
        approver_for_call(
            policy_approver=policy_approver, requires_confirmation=requires_confirmation, subject_id=subject_id
        )
        == decides
    )


@pytest.fixture
def alices_pending_call():
    enable_tools(TIME)
    tenant = TenantFactory(slug="acme")
    account, key = service_account_with_key(tenant, name="desktop")
    ToolPolicyFactory(
        service_account=account,
        tenant=tenant,
        allowed_tools=[TIME],
        require_approval_for_tools=[TIME],
        approver=Approver.SUBJECT,
    )
    alice = MembershipFactory(tenant=tenant, user=UserFactory(username="alice"), role="member").user
    bob = MembershipFactory(tenant=tenant, user=UserFactory(username="bob"), role="owner").user
    _d, token = delegation_create(tenant=tenant, user=alice, service_account=account)
    response = api_client(key).post(
        "/api/v1/tools/exec",
        {"tool_id": TIME, "args": {}, "tool_call_id": "for-alice"},
        format="json",
        HTTP_X_TOOLGATE_SUBJECT=token,
    )
    return response, alice, bob


def test_over_rest_the_call_waits_for_its_own_person(alices_pending_call):
    response, alice, _bob = alices_pending_call

    assert response.status_code == 202
    body = response.json()
    assert body["error_code"] == "approval_required"
    assert body["safe_message"].startswith("the person this call is made for must confirm this call")
    approval = ApprovalRequest.objects.get()
    assert (approval.approver, approval.subject_id) == (Approver.SUBJECT, f"user:{alice.pk}")


def test_only_the_person_decides_and_only_their_own_confirmation(alices_pending_call):
    _response, alice, bob = alices_pending_call
    approval = ApprovalRequest.objects.get()

    with pytest.raises(AppError, match="only the person this call is made for may confirm it"):
        approval_decide_as_subject(approval=approval, user=bob, approve=True)  # an owner, but not the person
    approval.refresh_from_db()
    assert approval.status == "pending"

    assert approval_decide_as_subject(approval=approval, user=alice, approve=False) is True
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by, approval.reason) == ("denied", alice, "the person declined")
    assert approval_decide_as_subject(approval=approval, user=alice, approve=True) is False  # decided already


def test_the_person_cannot_decide_a_request_others_approve(alices_pending_call):
    _response, alice, _bob = alices_pending_call
    approval = ApprovalRequest.objects.get()
    ApprovalRequest.objects.filter(pk=approval.pk).update(approver=Approver.TENANT_OWNER)
    approval.refresh_from_db()

    with pytest.raises(AppError):
        approval_decide_as_subject(approval=approval, user=alice, approve=True)
    approval.refresh_from_db()
    assert approval.status == "pending"
