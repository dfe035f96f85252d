"""Signing in at a toolset (`/mcp/t/<name>`): its own protected resource, consent and token audience.

Driven through Django's test client, the client's part played by hand so each
refusal can be provoked exactly (tests/signin/test_signin_sdk.py runs
the SDK's OAuth client against a live server for the same flow).
"""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from django.core.cache import cache
from django.test import Client

from policies_app.governance import governance_bump
from policies_app.models import Delegation, ToolPolicy
from signin.models import SigninCode, SigninGrant, SigninToken
from tests.factories import MembershipFactory, TenantFactory, UserFactory, service_account_with_key
from tests.support.api import enable_tools
from tests.support.signin import (
    BASE,
    REDIRECT,
    RESOURCE,
    TIME,
    WAIT,
    authorize_query,
    code_from,
    exchange,
    pkce,
    refresh,
    registered_client_id,
    signed_in,
    signin_tenant,
    web,
)
from tools_app.models import Toolset
from tools_app.toolsets import toolset_delete, toolset_save

pytestmark = pytest.mark.django_db

GET_USER = "github__get_user"
CREATE_ISSUE = "github__create_issue"
CLOCK = f"{BASE}/mcp/t/clock"
LISTING = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})


@pytest.fixture(autouse=True)
def _fresh(settings):
    settings.ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def acme():
    """acme's policy allows TIME, WAIT and GET_USER; its toolset `clock` lists TIME, WAIT and CREATE_ISSUE."""
    tenant, ada, account, key = signin_tenant()
    enable_tools(TIME, WAIT, GET_USER)
    ToolPolicy.objects.filter(tenant=tenant).update(allowed_tools=[TIME, WAIT, GET_USER])
    governance_bump()
    toolset_save(tenant_id=tenant.pk, name="clock", description="Time <b>only</b>", tool_ids=[TIME, WAIT, CREATE_ISSUE])
    toolset_save(tenant_id=tenant.pk, name="github", tool_ids=[GET_USER])
    return tenant, ada, account, key


def post_mcp(path: str, token: str | None = None) -> object:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return Client(HTTP_HOST="localhost", **headers).post(path, LISTING, content_type="application/json")


def listed(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [tool["name"] for tool in response.json()["result"]["tools"]]


def consent_url(client_id: str, challenge: str, resource: str = CLOCK, **overrides: str) -> str:
    return f"/oauth/authorize?{urlencode(authorize_query(client_id, challenge, resource=resource, **overrides))}"


def toolset_signed_in(user, tools: list[str] | None = None, resource: str = CLOCK) -> tuple[str, dict]:
    """Registration, consent at `resource` (Allow with `tools`, default all shown), exchange with that resource."""
    client_id = registered_client_id()
    browser = web()
    browser.force_login(user)
    verifier, challenge = pkce()
    url = consent_url(client_id, challenge, resource)
    page = browser.get(url)
    assert page.status_code == 200, page.content.decode()
    shown = re.findall(r'name="tg_tool" value="([^"]+)"', page.content.decode())
    answer = browser.post(url, {"tg_decision": "allow", "tg_tool": tools or shown})
    response = exchange(client_id, code_from(answer), verifier, resource=resource)
    assert response.status_code == 200, response.content
    return client_id, response.json()


# --- discovery --------------------------------------------------------------------------------------------------


def test_a_toolset_endpoint_names_its_own_metadata_and_the_document_names_the_toolset(acme):
    challenge = post_mcp("/mcp/t/clock")
    bad_token = post_mcp("/mcp/t/clock", token="tga_nothing0000_" + "x" * 43)
    document = web().get("/.well-known/oauth-protected-resource/mcp/t/clock")

    assert challenge.status_code == bad_token.status_code == 401
    metadata_url = f"{BASE}/.well-known/oauth-protected-resource/mcp/t/clock"
    assert challenge["WWW-Authenticate"] == f'Bearer resource_metadata="{metadata_url}"'
    assert bad_token["WWW-Authenticate"] == f'Bearer error="invalid_token", resource_metadata="{metadata_url}"'
    assert document.status_code == 200
    assert document.json() == {
        "resource": CLOCK,
        "authorization_servers": [BASE],
        "scopes_supported": ["mcp"],
        "bearer_methods_supported": ["header"],
        "resource_name": "Toolgate MCP, toolset clock",
    }
    assert document["Access-Control-Allow-Origin"] == "*"
    # /mcp's own challenge and document are unchanged
    assert (
        post_mcp("/mcp")["WWW-Authenticate"]
        == f'Bearer resource_metadata="{BASE}/.well-known/oauth-protected-resource/mcp"'
    )
    assert web().get("/.well-known/oauth-protected-resource/mcp").json()["resource"] == RESOURCE


def test_the_public_document_never_tells_whether_a_toolset_exists(acme):
    other = TenantFactory(slug="globex")
    toolset_save(tenant_id=other.pk, name="secret", tool_ids=[TIME])

    known = web().get("/.well-known/oauth-protected-resource/mcp/t/clock").json()
    theirs = web().get("/.well-known/oauth-protected-resource/mcp/t/secret").json()
    nowhere = web().get("/.well-known/oauth-protected-resource/mcp/t/nosuch").json()

    for document, name in ((known, "clock"), (theirs, "secret"), (nowhere, "nosuch")):
        assert document["resource"] == f"{BASE}/mcp/t/{name}"
        assert document["resource_name"] == f"Toolgate MCP, toolset {name}"
        assert set(document) == set(known)


@pytest.mark.parametrize("name", ["Clock", "a.b", "-x", "x" * 65, "%22q"])
def test_a_malformed_toolset_name_has_no_document(name):
    response = web().get(f"/.well-known/oauth-protected-resource/mcp/t/{name}")

    assert response.status_code == 404
    assert response.json()["error"] == "invalid_target"
    assert set(response.json()) == {"error", "error_description"}


def test_the_challenge_of_an_odd_path_is_percent_encoded_never_a_raw_quote(acme):
    response = post_mcp("/mcp/t/a%22b%0d%0aX:y")

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == (
        f'Bearer resource_metadata="{BASE}/.well-known/oauth-protected-resource/mcp/t/a%22b%0D%0AX:y"'
    )


# --- consent ----------------------------------------------------------------------------------------------------


def test_the_consent_page_for_a_toolset_lists_only_its_allowed_tools_and_names_it(acme):
    _tenant, ada, _account, _key = acme
    browser = web()
    browser.force_login(ada)
    _verifier, challenge = pkce()
    client_id = registered_client_id()

    toolset_page = browser.get(consent_url(client_id, challenge)).content.decode()
    whole_page = browser.get(consent_url(client_id, challenge, resource=RESOURCE)).content.decode()

    boxes = re.findall(r'name="tg_tool" value="([^"]+)" checked', toolset_page)
    assert boxes == [TIME, WAIT]  # the toolset ∩ the policy: CREATE_ISSUE is not allowed, GET_USER not in it
    assert re.findall(r"<legend>(.*?) <span", toolset_page) == ["Toolgate: core"]
    assert "Tools of the toolset clock it may call for you" in toolset_page
    assert "It connected to the toolset <strong>clock</strong>" in toolset_page
    assert "<dt>Toolset</dt><dd><code>clock</code>" in toolset_page
    assert "Time &lt;b&gt;only&lt;/b&gt;" in toolset_page
    # the whole catalog's page is as before
    assert re.findall(r'name="tg_tool" value="([^"]+)" checked', whole_page) == [TIME, WAIT, GET_USER]
    assert "toolset" not in whole_page.lower()


def test_allowing_a_toolset_delegates_its_tools_by_name_and_binds_the_tokens_to_it(acme):
    _tenant, ada, account, _key = acme

    client_id, tokens = toolset_signed_in(ada)

    delegation = Delegation.objects.get(user=ada, service_account=account, revoked_at__isnull=True)
    assert delegation.tools == [TIME, WAIT]  # named, never [] ("whatever the policy allows")
    grant = SigninGrant.objects.get(delegation=delegation)
    assert (grant.client.client_id, grant.resource) == (client_id, CLOCK)
    assert SigninCode.objects.get(grant=grant).resource == CLOCK
    assert listed(post_mcp("/mcp/t/clock", tokens["access_token"])) == [TIME, WAIT]


def test_fewer_tools_still_narrows_within_the_toolset(acme):
    _tenant, ada, account, _key = acme

    _client_id, tokens = toolset_signed_in(ada, tools=[WAIT, GET_USER])  # GET_USER is not on the page: dropped

    assert Delegation.objects.get(user=ada, service_account=account, revoked_at__isnull=True).tools == [WAIT]
    assert listed(post_mcp("/mcp/t/clock", tokens["access_token"])) == [WAIT]


def test_an_unknown_or_another_tenants_toolset_gets_the_same_clear_page_and_no_code(acme):
    _tenant, ada, _account, _key = acme
    toolset_save(tenant_id=TenantFactory(slug="globex").pk, name="secret", tool_ids=[TIME])
    browser = web()
    browser.force_login(ada)
    client_id = registered_client_id()
    _verifier, challenge = pkce()

    pages = {}
    for name in ("secret", "nosuch"):
        url = consent_url(client_id, challenge, resource=f"{BASE}/mcp/t/{name}")
        shown = browser.get(url)
        answered = browser.post(url, {"tg_decision": "allow", "tg_tool": [TIME]})
        for response in (shown, answered):
            assert response.status_code == 400
            assert "Location" not in response
        page = re.sub(r'name="csrfmiddlewaretoken" value="[^"]+"', "", shown.content.decode())
        pages[name] = page.replace(name, "NAME")

    assert "This client asked for a toolset you cannot use" in pages["nosuch"]
    assert "none of your tenants has a toolset of that name" in pages["nosuch"]
    assert pages["secret"] == pages["nosuch"]  # nothing tells the other tenant's toolset apart
    assert SigninCode.objects.count() == Delegation.objects.count() == 0


def test_a_global_toolset_can_be_signed_in_to(acme):
    _tenant, ada, _account, _key = acme
    toolset_save(tenant_id=None, name="everyone", tool_ids=[WAIT])

    _client_id, tokens = toolset_signed_in(ada, resource=f"{BASE}/mcp/t/everyone")

    assert listed(post_mcp("/mcp/t/everyone", tokens["access_token"])) == [WAIT]


def test_only_tenants_with_the_toolset_are_offered_and_the_answer_is_checked_again(acme):
    _tenant, ada, account, _key = acme
    globex = TenantFactory(slug="globex", name="Globex")
    MembershipFactory(user=ada, tenant=globex, role="member")
    theirs, _key = service_account_with_key(globex, name="globex-bot")
    browser = web()
    browser.force_login(ada)
    client_id = registered_client_id()
    _verifier, challenge = pkce()
    url = consent_url(client_id, challenge)

    page = browser.get(url).content.decode()
    picked_other = browser.post(url, {"tg_decision": "allow", "tg_account": str(theirs.pk), "tg_tool": [TIME]})

    assert "globex-bot" not in page  # globex has no toolset `clock`
    assert "Globex" not in page
    assert str(account.pk) in page
    assert picked_other.status_code == 400
    assert "Choose one of the service accounts listed." in picked_other.content.decode()
    assert SigninCode.objects.count() == Delegation.objects.count() == 0


def test_a_toolset_deleted_between_showing_and_answer_grants_nothing(acme):
    _tenant, ada, _account, _key = acme
    browser = web()
    browser.force_login(ada)
    client_id = registered_client_id()
    _verifier, challenge = pkce()
    url = consent_url(client_id, challenge)
    assert browser.get(url).status_code == 200

    toolset_delete(toolset=Toolset.objects.get(name="clock"))
    answered = browser.post(url, {"tg_decision": "allow", "tg_tool": [TIME, WAIT]})

    assert answered.status_code == 400
    assert "Location" not in answered
    assert SigninCode.objects.count() == Delegation.objects.count() == 0


def test_a_toolset_the_policy_allows_nothing_of_delegates_nothing(acme):
    tenant, ada, _account, _key = acme
    toolset_save(tenant_id=tenant.pk, name="issues", tool_ids=[CREATE_ISSUE])
    browser = web()
    browser.force_login(ada)
    _verifier, challenge = pkce()
    url = consent_url(registered_client_id(), challenge, resource=f"{BASE}/mcp/t/issues")

    page = browser.get(url).content.decode()
    answered = browser.post(url, {"tg_decision": "allow"})

    assert "Its policy allows none of this toolset's tools at the moment." in page
    assert answered.status_code == 400
    assert "No tool of this toolset can be delegated." in answered.content.decode()
    assert SigninCode.objects.count() == Delegation.objects.count() == 0


@pytest.mark.parametrize(
    "resource",
    [
        f"{BASE}/mcp/t/Clock",
        f"{BASE}/mcp/t/clock/",
        f"{BASE}/mcp/t/clock?mode=search",
        f"{BASE}/mcp/t/clock#x",
        f"{BASE}/mcp/t/",
        f"{BASE}/mcp/",
        f"{BASE}/mcpx",
        f"{BASE}/mcp/t/clock\n",
        f"{BASE}/mcp/t/{'a' * 600}",
        "http://127.0.0.1/mcp/t/clock",  # another host's resource
        "https://evil.example/mcp/t/clock",
    ],
)
def test_a_malformed_resource_goes_back_to_the_client_as_invalid_target(acme, resource):
    _tenant, ada, _account, _key = acme
    browser = web()
    browser.force_login(ada)
    _verifier, challenge = pkce()

    response = browser.get(consent_url(registered_client_id(), challenge, resource=resource))

    assert response.status_code == 302
    location = urlsplit(response["Location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == REDIRECT
    assert parse_qs(location.query)["error"] == ["invalid_target"]
    assert SigninCode.objects.count() == 0


def test_two_resources_are_refused(acme):
    _tenant, ada, _account, _key = acme
    browser = web()
    browser.force_login(ada)
    _verifier, challenge = pkce()
    query = (
        urlencode(authorize_query(registered_client_id(), challenge, resource=CLOCK))
        + "&"
        + urlencode({"resource": RESOURCE})
    )

    response = browser.get(f"/oauth/authorize?{query}")

    assert parse_qs(urlsplit(response["Location"]).query)["error"] == ["invalid_target"]


# --- the token endpoint -----------------------------------------------------------------------------------------


def _toolset_code(user) -> tuple[str, str, str]:
    client_id = registered_client_id()
    browser = web()
    browser.force_login(user)
    verifier, challenge = pkce()
    url = consent_url(client_id, challenge)
    assert browser.get(url).status_code == 200
    return client_id, code_from(browser.post(url, {"tg_decision": "allow", "tg_tool": [TIME, WAIT]})), verifier


def test_a_code_for_a_toolset_is_never_exchanged_for_a_wider_resource(acme):
    _tenant, ada, _account, _key = acme
    client_id, code, verifier = _toolset_code(ada)

    wider = exchange(client_id, code, verifier, resource=RESOURCE)

    assert wider.status_code == 400
    assert wider.json()["error"] == "invalid_target"
    assert set(wider.json()) == {"error", "error_description"}
    assert wider["Cache-Control"] == "no-store"
    assert SigninToken.objects.count() == SigninGrant.objects.count() == 0
    assert exchange(client_id, code, verifier, resource=CLOCK).json()["error"] == "invalid_grant"  # spent


def test_a_toolset_code_exchanged_without_resource_stays_bound_to_the_toolset(acme):
    _tenant, ada, _account, _key = acme
    client_id, code, verifier = _toolset_code(ada)

    empty = exchange(client_id, code, verifier, resource="")  # an empty resource is not a resource
    without = web().post(
        "/oauth/token",
        {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": REDIRECT,
            "client_id": client_id,
            "code_verifier": verifier,
        },
    )

    assert empty.json()["error"] == "invalid_target"
    assert without.status_code == 200, without.content  # the refused request did not spend the code
    assert SigninGrant.objects.get().resource == CLOCK


def test_refresh_keeps_the_toolset_and_refuses_a_wider_resource_without_rotating(acme):
    _tenant, ada, _account, _key = acme
    client_id, first = toolset_signed_in(ada)

    wider = refresh(client_id, first["refresh_token"], resource=RESOURCE)
    other = refresh(client_id, first["refresh_token"], resource=f"{BASE}/mcp/t/github")

    assert wider.status_code == other.status_code == 400
    assert wider.json()["error"] == other.json()["error"] == "invalid_target"
    assert SigninToken.objects.filter(rotated_at__isnull=False).count() == 0
    same = refresh(client_id, first["refresh_token"], resource=CLOCK)
    assert same.status_code == 200, same.content
    assert listed(post_mcp("/mcp/t/clock", same.json()["access_token"])) == [TIME, WAIT]


# --- the resource server ----------------------------------------------------------------------------------------


def test_a_toolset_token_is_refused_at_mcp_and_at_other_toolsets_with_the_challenge(acme):
    _tenant, ada, _account, _key = acme
    _client_id, tokens = toolset_signed_in(ada)
    token = tokens["access_token"]

    whole = post_mcp("/mcp", token)
    search = post_mcp("/mcp?mode=search", token)
    github = post_mcp("/mcp/t/github", token)
    rest = Client(HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_HOST="localhost").get("/api/v1/tools")

    assert whole.status_code == search.status_code == github.status_code == rest.status_code == 401
    assert whole["WWW-Authenticate"] == (
        f'Bearer error="invalid_token", resource_metadata="{BASE}/.well-known/oauth-protected-resource/mcp"'
    )
    assert github["WWW-Authenticate"] == (
        f'Bearer error="invalid_token", resource_metadata="{BASE}/.well-known/oauth-protected-resource/mcp/t/github"'
    )
    assert "toolgate__call_tool" in listed(post_mcp("/mcp/t/clock?mode=search", token))  # its own toolset, any mode


def test_a_whole_catalog_token_serves_every_toolset_narrowed(acme):
    _tenant, ada, _account, _key = acme
    _client_id, tokens = signed_in(ada, tools=[TIME, WAIT, GET_USER])

    assert listed(post_mcp("/mcp/t/clock", tokens["access_token"])) == [TIME, WAIT]
    assert SigninGrant.objects.get().resource == RESOURCE


def test_a_toolset_token_check_costs_what_a_whole_catalog_one_does(acme, django_assert_max_num_queries):
    tenant, ada, _account, _key = acme
    bob = UserFactory(username="bob")
    MembershipFactory(user=bob, tenant=tenant, role="member")
    _client_id, whole = signed_in(ada, tools=[TIME, WAIT, GET_USER])
    _client_id, narrow = toolset_signed_in(bob)  # another person: one live delegation per person and account
    listed(post_mcp("/mcp", whole["access_token"]))
    listed(post_mcp("/mcp/t/clock", narrow["access_token"]))  # warm: the toolset's scope is cached

    with django_assert_max_num_queries(3) as whole_queries:
        assert listed(post_mcp("/mcp", whole["access_token"])) == [TIME, WAIT, GET_USER]
    with django_assert_max_num_queries(len(whole_queries.captured_queries)) as narrow_queries:
        assert listed(post_mcp("/mcp/t/clock", narrow["access_token"])) == [TIME, WAIT]
    assert not [query for query in narrow_queries.captured_queries if "toolset" in query["sql"].lower()]
