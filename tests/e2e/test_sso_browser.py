"""Single sign-on in a real browser: both sign-in pages offer the company login, and an MCP client's
sign-in (the official SDK's OAuth client) completes through it.

The identity provider is panva's oidc-provider on loopback (tests/support/oidc.py); its sign-in page is a
one-field form where the browser types the account to sign in as.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from mcp import Client
from mcp.shared.auth import AuthorizationCodeResult
from playwright.sync_api import expect

from identity_app import oidc
from identity_app.models import IdentityProvider, RoleMapping
from identity_app.services import provider_save
from policies_app.models import TenantMembership
from tests.e2e.test_signin_browser import SDK_TIMEOUT_S, SdkClient
from tests.support.loopback import LoopbackServer, json_answer
from tests.support.oidc import OpenIdProvider, signing_key
from tests.support.signin import TIME, WAIT, signin_tenant

SECRET = "browser-test-client-secret-0123"


@pytest.fixture(scope="module")
def browser_idp(live_server, tmp_path_factory) -> Iterator[OpenIdProvider]:
    client = {
        "client_id": "toolgate",
        "client_secret": SECRET,
        "redirect_uris": [f"{live_server.url}/sso/callback"],
        "grant_types": ["authorization_code"],
        "response_types": ["code"],
    }
    provider = OpenIdProvider(tmp_path_factory.mktemp("oidc-e2e"), clients=[client], key=signing_key("e2e-1"))
    provider.start()
    yield provider
    provider.stop()


@pytest.fixture
def corp(browser_idp, settings) -> IdentityProvider:
    settings.TOOLGATE_SSO_ALLOW_PRIVATE_NETWORKS = True  # the provider lives on loopback here
    oidc.caches_clear()
    provider = IdentityProvider(
        slug="corp",
        display_name="Corp IdP",
        issuer=browser_idp.issuer,
        client_id="toolgate",
        scopes=["profile", "groups"],
    )
    return provider_save(provider=provider, client_secret=SECRET)


def sign_in_at_the_provider(browsing, account: str, screenshot: str) -> None:
    page = browsing.page
    page.get_by_role("link", name="Sign in with Corp IdP").click()
    expect(page.get_by_role("heading", name="Test IdP")).to_be_visible()
    browsing.screenshot(screenshot)
    page.get_by_label("Account").fill(account)
    page.get_by_role("button", name="Sign in").click()


def test_both_sign_in_pages_offer_the_company_login_and_it_signs_in(browsing, browser_idp, corp):
    tenant, _, _, _ = signin_tenant()
    RoleMapping.objects.create(group="acme-eng", tenant=tenant, tenant_role="member")
    RoleMapping.objects.create(group="tg-ops", operator_role="viewer")
    browser_idp.set_accounts({"e-1": {"preferred_username": "erin", "groups": ["acme-eng", "tg-ops"]}})
    page = browsing.page

    browsing.visit("/admin/login/", "sso-01-admin-login")
    expect(page.get_by_role("link", name="Sign in with Corp IdP")).to_be_visible()
    expect(page.get_by_label("Password")).to_be_visible()

    browsing.visit("/accounts/login/", "sso-02-portal-login")
    expect(page.get_by_role("link", name="Sign in with Corp IdP")).to_be_visible()
    expect(page.get_by_label("Password")).to_be_visible()

    sign_in_at_the_provider(browsing, "e-1", "sso-03-provider")
    expect(page.get_by_role("heading", name="Connections", exact=True)).to_be_visible()
    browsing.screenshot("sso-04-portal-signed-in")
    assert TenantMembership.objects.get(user__username="erin").tenant == tenant

    browsing.visit("/admin/", "sso-05-admin-signed-in")
    expect(page.get_by_role("heading", name="Operations")).to_be_visible()
    assert browsing.csp_violations() == []


def test_with_local_login_off_the_pages_offer_only_the_company_login(browsing, corp, settings):
    settings.TOOLGATE_LOCAL_LOGIN = False
    page = browsing.page

    for path, name in (("/admin/login/", "sso-06-admin-sso-only"), ("/accounts/login/", "sso-07-portal-sso-only")):
        browsing.visit(path, name)
        expect(page.get_by_role("link", name="Sign in with Corp IdP")).to_be_visible()
        expect(page.locator("input[type=password]")).to_have_count(0)


@pytest.fixture
def mcp_callback():
    with LoopbackServer() as server:
        server.handle("GET", "/callback", lambda _request: json_answer(200, {"signed_in": True}))
        yield server


def test_an_mcp_client_signs_a_person_in_through_the_company_login(browsing, browser_idp, corp, mcp_callback):
    tenant, _, _, _ = signin_tenant()
    RoleMapping.objects.create(group="acme-eng", tenant=tenant, tenant_role="member")
    browser_idp.set_accounts({"f-1": {"preferred_username": "fay", "groups": ["acme-eng"]}})
    server_url = f"{browsing.base_url}/mcp"
    sdk = SdkClient(server_url, f"{mcp_callback.url}/callback")

    async def scenario(client: Client) -> Any:
        return [tool.name for tool in (await client.list_tools()).tools]

    thread, outcome = sdk.start(scenario)
    authorization_url = sdk.authorization_urls.get(timeout=SDK_TIMEOUT_S)
    page = browsing.page
    page.goto(authorization_url)
    expect(page.locator("#signin-request")).to_be_visible()
    browsing.screenshot("sso-08-mcp-signin-login")
    sign_in_at_the_provider(browsing, "f-1", "sso-09-mcp-signin-provider")
    expect(page.get_by_role("heading", name="Let “Playwright MCP client” use Toolgate for you?")).to_be_visible()
    browsing.screenshot("sso-10-mcp-signin-consent")
    page.get_by_role("button", name="Allow").click()
    page.wait_for_url("**/callback?**")

    landed = parse_qs(urlsplit(page.url).query)
    sdk.callbacks.put(AuthorizationCodeResult(code=landed["code"][0], state=landed["state"][0]))
    thread.join(SDK_TIMEOUT_S)
    assert "error" not in outcome, repr(outcome.get("error"))
    assert sorted(outcome["result"]) == sorted([TIME, WAIT])
    # the person's delegations page lists the client they signed in through the company login
    browsing.visit("/delegations/", "sso-11-mcp-delegations")
    expect(page.get_by_role("cell", name="Playwright MCP client", exact=True)).to_be_visible()
    assert browsing.csp_violations() == []
