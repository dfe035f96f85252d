"""Approvals in a real browser: a tenant owner reviews a call's args and approves it; a member cannot."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from policies_app.models import ApprovalRequest, TenantMembership
from tests.factories import PASSWORD, MembershipFactory, TenantFactory, UserFactory, service_account_with_key
from tests.support.approvals import pending_approval

CANARY = "canary-browser-3e8b"


@pytest.fixture
def waiting():
    acme = TenantFactory(slug="acme", name="Acme Corp")
    MembershipFactory(user=UserFactory(username="olivia"), tenant=acme, role=TenantMembership.Role.OWNER)
    MembershipFactory(user=UserFactory(username="max"), tenant=acme, role=TenantMembership.Role.MEMBER)
    account = service_account_with_key(acme, name="agent")[0]
    args = {"owner": "octo", "repo": "hello", "title": "Release 2.0", "body": CANARY}
    return pending_approval(account, args, approver="tenant_owner")


def _log_in(browsing, username: str) -> None:
    page = browsing.page
    browsing.visit("/approvals/", f"approvals-login-{username}")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(f"{browsing.base_url}/approvals/")


def test_a_tenant_owner_approves_a_call_in_the_browser(browsing, waiting):
    page = browsing.page
    _log_in(browsing, "olivia")
    expect(page.get_by_role("heading", name="Waiting for a decision")).to_be_visible()
    browsing.screenshot("approvals-01-list")

    page.get_by_role("link", name="Review…").click()
    expect(page).to_have_url(re.compile(rf"/approvals/{waiting.pk}/$"))
    expect(page.locator("#approval-args")).to_contain_text(CANARY)
    browsing.screenshot("approvals-02-detail")
    page.get_by_label("Reason").fill("planned release")
    page.get_by_role("button", name="Approve").click()

    expect(page.get_by_text("Approved: github__create_issue.")).to_be_visible()
    expect(page.locator("#approval-status")).to_have_text("approved")
    expect(page.locator("#approval-args-note")).to_have_text("Erased when the request was decided.")
    assert CANARY not in page.content()
    browsing.screenshot("approvals-03-approved")
    waiting.refresh_from_db()
    assert (waiting.status, waiting.decided_by_name, waiting.reason) == ("approved", "olivia", "planned release")
    assert browsing.csp_violations() == []


def test_a_member_sees_the_request_but_has_no_buttons(browsing, waiting):
    page = browsing.page
    _log_in(browsing, "max")
    expect(page.get_by_role("link", name="Review…")).to_have_count(0)
    expect(page.get_by_role("link", name="Webhook…")).to_have_count(0)
    browsing.screenshot("approvals-04-member-list")
    page.get_by_role("link", name="Details").click()

    expect(page.locator("#approval-cannot-decide")).to_be_visible()
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    browsing.screenshot("approvals-05-member-detail")
    assert ApprovalRequest.objects.get(pk=waiting.pk).status == "pending"
    assert browsing.csp_violations() == []
