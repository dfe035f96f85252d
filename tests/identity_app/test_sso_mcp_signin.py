"""The MCP sign-in flow (an MCP client asks Toolgate to sign a person in) completed through single sign-on.

The authorization server sends an anonymous person to the portal's sign-in
page; the "Sign in with ..." button carries the authorization request along,
so after the provider's login the person lands back on the consent page.
"""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit

import pytest
from django.core.cache import cache

from tests.identity_app.conftest import browser, mapping, sso_login
from tests.support.signin import (
    TIME,
    WAIT,
    authorize_query,
    code_from,
    exchange,
    pkce,
    registered_client_id,
    signin_tenant,
    tool_names,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _clean_cache():
    cache.clear()
    yield
    cache.clear()


def test_an_mcp_client_signs_a_person_in_through_the_company_login(idp, corp):
    # given: acme with its tools, and a provider group that makes people members of acme
    tenant, _, _, _ = signin_tenant()
    mapping("acme-eng", tenant=tenant, tenant_role="member")
    idp.set_accounts({"e-1": {"preferred_username": "eve", "email": "eve@corp.test", "groups": ["acme-eng"]}})
    client_id = registered_client_id()
    verifier, challenge = pkce()
    authorize = f"/oauth/authorize?{urlencode(authorize_query(client_id, challenge))}"
    person = browser()

    # when: the authorization server sends the anonymous person to the portal's sign-in page
    to_login = person.get(authorize)
    assert to_login.status_code == 302
    login_page = urlsplit(to_login["Location"])
    assert login_page.path == "/accounts/login/"
    page = person.get(to_login["Location"])
    assert "An MCP client is asking to sign in as you" in page.content.decode()
    assert "Sign in with Corp IdP" in page.content.decode()

    # and signs in with the provider, the button carrying the authorization request along
    _, back = sso_login(idp, corp, "e-1", "portal", client=person, next_url=page.context["next"])
    assert back.status_code == 302
    assert back["Location"] == authorize

    # then: the consent page, and the MCP client's token works
    consent = person.get(authorize)
    assert consent.status_code == 200
    answer = person.post(authorize, {"tg_decision": "allow", "tg_tool": [TIME, WAIT]})
    token = exchange(client_id, code_from(answer), verifier)
    assert token.status_code == 200, token.content
    assert sorted(tool_names(token.json()["access_token"])) == sorted([TIME, WAIT])
