"""GET /api/v1/approvals/{id}: a caller follows its own approval request after a 202."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from policies_app.models import ApprovalRequest
from policies_app.services import approval_decide
from tests.factories import TenantFactory, ToolPolicyFactory, UserFactory, service_account_with_key
from tests.support.api import api_client, enable_tools

pytestmark = pytest.mark.django_db


@pytest.fixture
def pending():
    """A 202 for core__wait under a policy that sends read-only calls to an operator."""
    tenant = TenantFactory(slug="acme")
    enable_tools("core__wait")
    account, key = service_account_with_key(tenant, name="agent")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["core__wait"], require_approval_for_effects=["read_only"])
    response = api_client(key).post(
        "/api/v1/tools/exec", {"tool_id": "core__wait", "args": {"ms": 1}, "tool_call_id": "c1"}, format="json"
    )
    assert response.status_code == 202
    return key, response.json()["approval_id"], account


def test_the_caller_sees_its_pending_request_then_the_decision(pending):
    key, approval_id, _account = pending

    before = api_client(key).get(f"/api/v1/approvals/{approval_id}")
    approval_decide(approval=ApprovalRequest.objects.get(), approve=True, decided_by=UserFactory())
    after = api_client(key).get(f"/api/v1/approvals/{approval_id}")

    assert before.status_code == 200
    assert set(before.json()) == {
        "id",
        "status",
        "tool_id",
        "tool_call_id",
        "consequence_level",
        "expires_at",
        "decided_at",
        "reason",
    }
    assert (before.json()["id"], before.json()["status"], before.json()["decided_at"]) == (approval_id, "pending", None)
    assert (after.json()["status"], after.json()["decided_at"] is not None) == ("approved", True)


def test_an_expired_request_says_expired(pending):
    key, approval_id, _account = pending
    ApprovalRequest.objects.update(expires_at=timezone.now() - timedelta(seconds=1))

    assert api_client(key).get(f"/api/v1/approvals/{approval_id}").json()["status"] == "expired"


@pytest.mark.parametrize("who", ["another account of the tenant", "another tenant"])
def test_another_callers_request_is_not_found(pending, who):
    _key, approval_id, account = pending
    tenant = account.tenant if who == "another account of the tenant" else TenantFactory(slug="globex")
    _other, other_key = service_account_with_key(tenant, name="other")

    response = api_client(other_key).get(f"/api/v1/approvals/{approval_id}")

    assert response.status_code == 404
    assert response.json() == {"error_code": "not_found", "safe_message": "no such approval request"}


@pytest.mark.parametrize("approval_id", ["nope", "00000000-0000-0000-0000-000000000000", "%00"])
def test_unknown_or_malformed_ids_are_not_found(pending, approval_id):
    key, _approval_id, _account = pending

    assert api_client(key).get(f"/api/v1/approvals/{approval_id}").status_code == 404
