"""The tenant UI's Approvals page: owners decide when the policy lets them, members only look."""

from __future__ import annotations

import pytest
from django.urls import reverse

from policies_app.models import ApprovalRequest, TenantMembership
from tests.factories import ConnectionFactory, MembershipFactory, TenantFactory, UserFactory, service_account_with_key
from tests.support.approvals import pending_approval
from tests.support.web import member_client

pytestmark = pytest.mark.django_db

CANARY = "canary-tenant-ui-51c2"
ARGS = {"owner": "octo", "repo": "hello", "title": "<script>alert(1)</script>", "body": CANARY}


@pytest.fixture
def acme():
    return TenantFactory(slug="acme", name="Acme Corp")


@pytest.fixture
def account(acme):
    return service_account_with_key(acme, name="agent")[0]


@pytest.fixture
def owner(acme):
    user = UserFactory(username="olivia")
    MembershipFactory(user=user, tenant=acme, role=TenantMembership.Role.OWNER)
    return member_client(acme, user=user)[0]


@pytest.fixture
def member(acme):
    user = UserFactory(username="max")
    MembershipFactory(user=user, tenant=acme, role=TenantMembership.Role.MEMBER)
    return member_client(acme, user=user)[0]


def _detail(approval: ApprovalRequest) -> str:
    return reverse("web:approval-detail", args=[approval.pk])


def test_an_owner_approves_with_a_reason_and_the_args_are_erased(owner, account, acme):
    connection = ConnectionFactory(tenant=acme, label="Work GitHub")
    approval = pending_approval(account, ARGS, approver="tenant_owner", connection_id=str(connection.pk))

    page = owner.get(_detail(approval))
    response = owner.post(_detail(approval), {"decision": "approve", "reason": "expected release"})

    html = page.content.decode()
    assert page.status_code == 200
    assert CANARY in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert(1)" not in html
    assert "Work GitHub (github)" in html
    assert 'id="approve-button"' in html
    assert response.status_code == 302
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by_name, approval.reason) == ("approved", "olivia", "expected release")
    assert approval.args_sealed is None
    after = owner.get(_detail(approval)).content.decode()
    assert CANARY not in after
    assert "Erased when the request was decided." in after


def test_an_owner_denies(owner, account):
    approval = pending_approval(account, ARGS, approver="tenant_owner")

    owner.post(_detail(approval), {"decision": "deny", "reason": ""})

    approval.refresh_from_db()
    assert (approval.status, approval.decided_by_name) == ("denied", "olivia")


def test_a_member_sees_the_request_but_cannot_decide_it(member, account):
    approval = pending_approval(account, ARGS, approver="tenant_owner")

    page = member.get(_detail(approval))
    refused = member.post(_detail(approval), {"decision": "approve"})

    assert page.status_code == 200
    assert 'id="approve-button"' not in page.content.decode()
    assert "Only an owner of this tenant" in page.content.decode()
    assert refused.status_code == 403
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by_name) == ("pending", "")


def test_an_owner_cannot_decide_what_the_policy_leaves_to_operators(owner, account):
    approval = pending_approval(account, ARGS, approver="operator")

    page = owner.get(_detail(approval))
    refused = owner.post(_detail(approval), {"decision": "approve"})

    assert "leaves the decision to Toolgate's operators" in page.content.decode()
    assert refused.status_code == 403
    approval.refresh_from_db()
    assert approval.status == "pending"


@pytest.mark.parametrize(
    "data",
    [{}, {"decision": "maybe"}, {"decision": "approve", "reason": "x" * 501}, {"decision": "approve\x00"}],
    ids=["nothing", "unknown-decision", "reason-too-long", "nul"],
)
def test_bad_input_is_a_form_error_and_changes_nothing(owner, account, data):
    approval = pending_approval(account, ARGS, approver="tenant_owner")

    response = owner.post(_detail(approval), data)

    assert response.status_code == 400
    assert "alert-error" in response.content.decode()
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_another_tenants_approval_is_not_found(owner):
    globex_account = service_account_with_key(TenantFactory(slug="globex"), name="g")[0]
    theirs = pending_approval(globex_account, ARGS, approver="tenant_owner")

    page = owner.get(_detail(theirs))
    post = owner.post(_detail(theirs), {"decision": "approve"})
    listing = owner.get(reverse("web:approval-list"))

    assert (page.status_code, post.status_code) == (404, 404)
    assert str(theirs.pk) not in listing.content.decode()
    theirs.refresh_from_db()
    assert theirs.status == "pending"


def test_the_list_shows_waiting_requests_first_then_the_history(owner, account):
    decided = pending_approval(account, ARGS, tool_call_id="old", approver="tenant_owner")
    owner.post(_detail(decided), {"decision": "deny", "reason": "no"})
    waiting = pending_approval(account, ARGS, tool_call_id="new", approver="tenant_owner")

    html = owner.get(reverse("web:approval-list")).content.decode()

    waiting_section, history_section = html.split('id="approvals-history"')
    assert str(waiting.pk) in waiting_section
    assert str(decided.pk) in history_section
    assert str(decided.pk) not in waiting_section
    assert CANARY not in html
