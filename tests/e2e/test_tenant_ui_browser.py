"""The tenant UI in a real browser: log in, add a connection, grant it, revoke it, stay inside the tenant.

Every page visited is saved as a full-page screenshot under var/test-artifacts/screenshots/,
and the browser's console must report no Content-Security-Policy violation.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from connections_app.models import Connection, ExecutionGrant
from connections_app.services import connection_credentials_open
from policies_app.models import Tenant
from tests.factories import PASSWORD, ConnectionFactory, MembershipFactory, TenantFactory, UserFactory
from tests.support.web import invocation

SECRET = "ghp_browser-secret-4f1d9a"


@pytest.fixture
def acme_user():
    acme = TenantFactory(slug="acme", name="Acme Corp")
    user = UserFactory(username="ada")
    MembershipFactory(user=user, tenant=acme)
    MembershipFactory(user=user, tenant=TenantFactory(slug="beta", name="Beta Labs"))  # shows the switcher
    now = timezone.now()
    for days_ago, tool_id, ok in [
        (0, "core__get_current_time", True),
        (0, "core__wait", False),
        (2, "core__wait", True),
    ]:
        invocation(acme, tool_id, now - timedelta(days=days_ago), ok=ok, run_id="run-7")
    return user


def test_tenant_manages_a_connection_end_to_end(browsing, acme_user):
    page = browsing.page

    # Log in (the protected page sends us to the login form first).
    browsing.visit("/connections/", "01-login")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/connections/$"))
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(f"{browsing.base_url}/connections/")
    expect(page.get_by_role("heading", name="No connections yet")).to_be_visible()
    browsing.screenshot("02-connections-empty")

    # Add an API-key connection; the list shows it, never its secret.
    page.get_by_role("link", name="Add API key").first.click()
    page.get_by_label("Provider").select_option("github")
    page.get_by_label("Label").fill("release bot")
    page.get_by_label("API key").fill(SECRET)
    page.get_by_label("Scopes").fill("repo, read:user")
    browsing.screenshot("03-add-api-key")
    page.get_by_role("button", name="Save connection").click()
    expect(page.get_by_text("Connection “release bot” added.")).to_be_visible()
    expect(page.get_by_role("link", name="release bot")).to_be_visible()
    assert SECRET not in page.content()
    browsing.screenshot("04-connections")
    connection = Connection.objects.get()
    assert connection_credentials_open(connection) == {"api_key": SECRET}

    # Create a service account: its key is shown once.
    page.get_by_role("link", name="Service accounts").click()
    page.get_by_role("link", name="New service account").first.click()
    page.get_by_label("Name").fill("support-agent")
    browsing.screenshot("05-new-service-account")
    page.get_by_role("button", name="Create service account").click()
    key = page.get_by_label("API key").input_value()
    assert key.startswith("tg_")
    browsing.screenshot("06-service-account-key")

    # Grant the connection to it.
    page.get_by_role("link", name="Grant it connections").click()
    page.get_by_label("Service account").select_option(label="support-agent")
    page.get_by_role("checkbox", name=re.compile(r"release bot")).check()
    browsing.screenshot("07-new-grant")
    page.get_by_role("button", name="Create grant").click()
    expect(page.get_by_text("Grant for “support-agent” created.")).to_be_visible()
    assert key not in page.content()
    browsing.screenshot("08-grants")
    grant = ExecutionGrant.objects.get()
    assert (grant.service_account.name, list(grant.connections.all())) == ("support-agent", [connection])

    # The connection's page shows the grant; revoking goes through a confirmation.
    browsing.visit("/service-accounts/", "09-service-accounts")
    assert key not in page.content()
    page.get_by_role("link", name="Connections").click()
    page.get_by_role("link", name="release bot").click()
    expect(page.get_by_role("cell", name="support-agent")).to_be_visible()
    browsing.screenshot("10-connection-detail")
    page.get_by_role("link", name="Revoke…").click()
    expect(page.get_by_role("heading", name="Revoke connection “release bot”?")).to_be_visible()
    browsing.screenshot("11-revoke-confirm")
    connection.refresh_from_db()
    assert connection.revoked_at is None
    page.get_by_role("button", name="Revoke connection").click()
    expect(page.get_by_text("Connection “release bot” revoked.")).to_be_visible()
    expect(page.locator(".badge-revoked")).to_have_text("Revoked")
    browsing.screenshot("12-connections-revoked")
    connection.refresh_from_db()
    assert (connection.status, connection.revoked_by) == ("revoked", acme_user)

    # Activity and its chart.
    browsing.visit("/activity/", "13-activity")
    expect(page.locator("svg.chart rect.bar")).to_have_count(3)
    page.get_by_label("Outcome").select_option("failed")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("table.data-table tbody tr")).to_have_count(1)
    browsing.screenshot("14-activity-filtered")

    # The change log names every write made above, by ada through the tenant UI, without a secret.
    page.get_by_role("link", name="Change log").click()
    expect(page.get_by_role("heading", name="Change log")).to_be_visible()
    rows = page.locator("table.data-table tbody tr")
    expect(rows).to_have_count(4)
    expect(rows.locator("td:nth-child(2)")).to_have_text(
        ["connection.revoke", "grant.create", "service_account.create", "connection.create"]
    )
    expect(rows.locator("td:nth-child(4)")).to_contain_text(["ada", "ada", "ada", "ada"])
    expect(rows.locator("td:nth-child(5)")).to_contain_text(["Tenant UI", "Tenant UI", "Tenant UI", "Tenant UI"])
    assert SECRET not in page.content()
    assert key not in page.content()
    browsing.screenshot("14b-change-log")

    # Another tenant's connection is not found.
    foreign = ConnectionFactory(tenant=TenantFactory(slug="globex"), label="globex-conn")
    response = browsing.visit(f"/connections/{foreign.pk}/", "15-not-found")
    assert response is not None
    assert response.status == 404
    assert "globex" not in page.content().lower()

    # The header's switcher moves to the user's other tenant, which has nothing yet.
    page.get_by_role("link", name="Back to connections").click()
    page.get_by_label("Tenant").select_option(label="Beta Labs")
    page.get_by_role("button", name="Switch").click()
    expect(page.get_by_role("heading", name="No connections yet")).to_be_visible()
    expect(page.get_by_label("Tenant")).to_have_value(str(Tenant.objects.get(slug="beta").pk))
    browsing.screenshot("16-other-tenant")

    assert browsing.csp_violations() == []
    assert browsing.console_errors == ["Failed to load resource: the server responded with a status of 404 (Not Found)"]


def test_the_console_listener_sees_csp_violations(browsing):
    """Proves the check above can fail: an inline style the CSP forbids is reported to the console."""
    browsing.visit("/accounts/login/", "00-login-direct")

    browsing.page.evaluate("document.body.setAttribute('style', 'background: red')")
    browsing.page.wait_for_timeout(100)

    assert len(browsing.csp_violations()) == 1
    assert "style-src 'self'" in browsing.csp_violations()[0]
