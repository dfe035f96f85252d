"""The pages an MCP client sends a person to, in a real browser: sign in, read the exact call, Confirm; or connect."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from connections_app.models import Connection
from gateway.elicitation import Principal, connect_ask_create
from policies_app.models import ApprovalRequest, Approver, Delegation
from policies_app.services import delegation_create
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


def test_a_person_signs_in_and_connects_an_account_a_call_needs(browsing):
    acme = TenantFactory(slug="acme", name="Acme Corp")
    alice = MembershipFactory(user=UserFactory(username="alice"), tenant=acme, role="member").user
    account = service_account_with_key(acme, name="Claude Desktop")[0]
    delegation, _token = delegation_create(tenant=acme, user=alice, service_account=account)
    principal = Principal(str(account.pk), f"user:{alice.pk}", str(delegation.pk), acme.pk)
    ask = connect_ask_create(
        principal=principal, provider="github", tool_id="github__get_user", args={}, tool_call_id="c"
    )
    assert ask is not None
    page = browsing.page
    browsing.visit(f"/calls/connect/{ask.ask_id}/", "call-connect-login")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()

    expect(page).to_have_url(f"{browsing.base_url}/calls/connect/{ask.ask_id}/")
    expect(page.locator("#connect-provider")).to_have_text("github")
    expect(page.locator("#call-tool")).to_have_text("github__get_user")
    browsing.screenshot("call-connect")
    page.get_by_label("API key").fill("ghp_typedInTheBrowser0123456789abcdef")
    page.get_by_role("button", name="Connect").click()

    expect(page.locator("#connect-outcome")).to_contain_text("You can return to your client")
    browsing.screenshot("call-connected")
    connection = Connection.objects.get()
    assert (connection.owner, connection.provider) == (alice, "github")
    assert Delegation.objects.get(pk=delegation.pk).connection_ids == [str(connection.pk)]
    assert browsing.console_errors == []
