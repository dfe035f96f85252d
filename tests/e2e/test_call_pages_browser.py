"""The page an MCP client sends a person to, in a real browser: sign in, read the exact call, Confirm."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from policies_app.models import ApprovalRequest, Approver
from tests.factories import PASSWORD, MembershipFactory, TenantFactory, UserFactory, service_account_with_key
from tests.support.approvals import pending_approval

ARGS = {"owner": "octo", "repo": "hello", "title": "Release 2.0"}


@pytest.fixture
def alices_call():
    acme = TenantFactory(slug="acme", name="Acme Corp")
    alice = MembershipFactory(user=UserFactory(username="alice"), tenant=acme, role="member").user
    account = service_account_with_key(acme, name="Claude Desktop")[0]
    return pending_approval(account, ARGS, approver=Approver.SUBJECT, subject_id=f"user:{alice.pk}")


def test_a_person_signs_in_reads_the_call_and_confirms_it(browsing, alices_call):
    page = browsing.page
    browsing.visit(f"/calls/{alices_call.pk}/confirm/", "call-confirm-login")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()

    expect(page).to_have_url(f"{browsing.base_url}/calls/{alices_call.pk}/confirm/")
    expect(page.locator("#call-tool")).to_have_text("github__create_issue")
    expect(page.locator("#call-args")).to_contain_text('"title": "Release 2.0"')
    browsing.screenshot("call-confirm")
    page.get_by_role("button", name="Confirm").click()

    expect(page.get_by_text("Confirmed. Return to your client")).to_be_visible()
    expect(page.locator("#call-status")).to_have_text("approved")
    browsing.screenshot("call-confirmed")
    alices_call.refresh_from_db()
    assert (alices_call.status, alices_call.decided_by.username) == (ApprovalRequest.Status.APPROVED, "alice")
    assert browsing.console_errors == []
