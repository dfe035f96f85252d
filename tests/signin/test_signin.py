"""MCP clients that sign in (docs/api.md): discovery, registration, authorize + consent, tokens, revocation.

Driven through Django's test client (the browser and the SDK's OAuth client run
in tests/e2e/test_signin_browser.py against a live server). The client's part
(PKCE, the code exchange, refresh) is played by hand here, so each refusal
can be provoked exactly.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from changes_app.models import Change
from policies_app.models import Delegation, TenantMembership
from policies_app.services import delegation_revoke, service_account_revoke
from signin.documents import MAX_DOCUMENT_BYTES, is_metadata_document_url
from signin.models import SigninClient, SigninCode, SigninGrant, SigninToken
from signin.services import signin_grant_list
from signin.views import REGISTRATIONS_PER_HOUR
from tests.factories import MembershipFactory, TenantFactory, UserFactory, service_account_with_key
from tests.support.loopback import LoopbackServer
from tests.support.signin import (
    BASE,
    REDIRECT,
    RESOURCE,
    TIME,
    WAIT,
    authorize_query,
    code_from,
    consent,
    exchange,
    mcp,
    pkce,
    refresh,
    register,
    registered_client_id,
    signed_in,
    signin_tenant,
    tool_names,
    web,
)
from tools_app.models import ToolInvocation
from tools_app.toolsets import toolset_save

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_rate_limits():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def acme():
    """A tenant with one tools:exec service account whose policy allows two tools, and a member, ada."""
    return signin_tenant()


@pytest.fixture(autouse=True)
def _hosts(settings):
    settings.ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]


# --- discovery ---------------------------------------------------------------------------------------


def test_the_protected_resource_and_authorization_server_metadata():
    resource = web().get("/.well-known/oauth-protected-resource/mcp")
    server = web().get("/.well-known/oauth-authorization-server")

    assert resource.status_code == server.status_code == 200
    assert resource.json() == {
        "resource": RESOURCE,
        "authorization_servers": [BASE],
        "scopes_supported": ["mcp"],
        "bearer_methods_supported": ["header"],
        "resource_name": "Toolgate MCP",
    }
    document = server.json()
    assert document["issuer"] == BASE
    assert document["authorization_endpoint"] == f"{BASE}/oauth/authorize"
    assert document["token_endpoint"] == f"{BASE}/oauth/token"
    assert document["registration_endpoint"] == f"{BASE}/oauth/register"
    assert document["revocation_endpoint"] == f"{BASE}/oauth/revoke"
    assert document["response_types_supported"] == ["code"]
    assert set(document["grant_types_supported"]) == {"authorization_code", "refresh_token"}
    assert document["code_challenge_methods_supported"] == ["S256"]
    assert "none" in document["token_endpoint_auth_methods_supported"]
    assert document["client_id_metadata_document_supported"] is True


def test_mcp_without_a_credential_points_at_the_metadata():
    response = web().post("/mcp", json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}), "application/json")

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == (
        f'Bearer resource_metadata="{BASE}/.well-known/oauth-protected-resource/mcp"'
    )


# --- registration --------------------------------------------------------------------------------------


def test_registration_answers_a_public_client_and_records_it():
    response = register(token_endpoint_auth_method="client_secret_post", client_name="<b>Desk</b>")

    assert response.status_code == 201
    body = response.json()
    assert body["client_id"].startswith("tgc_")
    assert "client_secret" not in body
    assert body["token_endpoint_auth_method"] == "none"
    assert body["redirect_uris"] == [REDIRECT]
    assert set(body["grant_types"]) == {"authorization_code", "refresh_token"}
    row = SigninClient.objects.get(client_id=body["client_id"])
    assert (row.kind, row.client_name, row.redirect_uris) == ("registered", "<b>Desk</b>", [REDIRECT])
    assert row.registered_from == "127.0.0.1"
    assert Change.objects.filter(action="signin_client.register", object_id=str(row.pk)).exists()


@pytest.mark.parametrize(
    "redirect_uris",
    [
        ["http://example.com/callback"],  # http off loopback
        ["http://127.0.0.1/callback"],  # loopback without a port
        ["https://example.com/cb#frag"],
        ["javascript:alert(1)"],
        [],
        "https://example.com/cb",
    ],
)
def test_registration_refuses_redirect_uris_outside_the_rules(redirect_uris):
    response = register(redirect_uris=redirect_uris)

    assert response.status_code == 400
    assert response.json()["error"] in {"invalid_redirect_uri", "invalid_client_metadata"}
    assert set(response.json()) <= {"error", "error_description"}
    assert SigninClient.objects.count() == 0


def test_registration_of_https_and_localhost_redirects():
    uris = ["https://client.example/cb", "http://localhost:5173/cb", "http://127.0.0.1:8976/oauth/callback"]

    assert register(redirect_uris=uris).status_code == 201


def test_registration_is_rate_limited_per_address():
    answers = [register().status_code for _ in range(REGISTRATIONS_PER_HOUR + 2)]

    assert answers[:REGISTRATIONS_PER_HOUR] == [201] * REGISTRATIONS_PER_HOUR
    assert answers[REGISTRATIONS_PER_HOUR:] == [429, 429]
    assert SigninClient.objects.count() == REGISTRATIONS_PER_HOUR
    refused = register()
    assert refused.json()["error"] == "invalid_request"
    assert refused["Retry-After"] == "3600"


def test_registration_refuses_a_body_that_is_not_metadata():
    response = web().post("/oauth/register", b"not json", content_type="application/json")

    assert response.status_code == 400
    assert response.json()["error"] in {"invalid_client_metadata", "invalid_request"}


# --- the whole flow ------------------------------------------------------------------------------------


def test_a_person_signs_a_client_in_and_its_calls_run_on_their_behalf(acme):
    _tenant, ada, account, _key = acme

    client_id, tokens = signed_in(ada, tools=[TIME])

    assert tokens["token_type"].lower() == "bearer"
    assert 0 < tokens["expires_in"] <= 3600
    assert tokens["access_token"].startswith("tga_")
    assert tokens["refresh_token"].startswith("tgr_")
    delegation = Delegation.objects.get(user=ada, service_account=account, revoked_at__isnull=True)
    assert delegation.tools == [TIME]
    grant = SigninGrant.objects.get(delegation=delegation)
    assert (grant.client.client_id, grant.resource, grant.redirect_uri) == (client_id, RESOURCE, REDIRECT)

    assert tool_names(tokens["access_token"]) == [TIME]  # narrowed to what ada delegated
    call = mcp(tokens["access_token"], "tools/call", {"name": TIME, "arguments": {"timezone": "UTC"}})
    assert call.json()["result"]["isError"] is False
    row = ToolInvocation.objects.get(tool_id=TIME)
    assert (row.subject_id, str(row.service_account_id), row.ok) == (f"user:{ada.pk}", str(account.pk), True)
    grant.refresh_from_db()
    assert grant.last_used_at is not None
    assert Change.objects.filter(action="signin_grant.create", object_id=str(grant.pk)).exists()


def test_all_tools_left_checked_delegates_whatever_the_policy_allows(acme):
    _tenant, ada, account, _key = acme

    _client_id, tokens = signed_in(ada)

    assert Delegation.objects.get(user=ada, service_account=account).tools == []
    assert tool_names(tokens["access_token"]) == [TIME, WAIT]


def test_a_second_sign_in_with_the_same_tools_reuses_the_delegation(acme):
    _tenant, ada, account, _key = acme
    signed_in(ada)
    signed_in(ada)

    assert Delegation.objects.filter(user=ada, service_account=account).count() == 1
    assert SigninGrant.objects.filter(revoked_at__isnull=True).count() == 2


def test_the_consent_page_names_client_redirect_host_tenant_account_and_tools_escaped(acme):
    _tenant, ada, _account, _key = acme
    client_id = register(client_name="<script>alert(1)</script>").json()["client_id"]
    browser = web()
    browser.force_login(ada)
    _verifier, challenge = pkce()

    page = browser.get(f"/oauth/authorize?{urlencode(authorize_query(client_id, challenge))}")

    html = page.content.decode()
    assert page.status_code == 200
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    for text in ("127.0.0.1:33418", "Acme Corp", "assistant", TIME, WAIT, "Allow", "Deny"):
        assert text in html


def test_deny_redirects_with_access_denied_and_grants_nothing(acme):
    _tenant, ada, _account, _key = acme
    client_id = registered_client_id()
    browser = web()
    browser.force_login(ada)
    _verifier, challenge = pkce()

    response = consent(browser, client_id, challenge, {"tg_decision": "deny"})

    params = parse_qs(urlsplit(response["Location"]).query)
    assert params["error"] == ["access_denied"]
    assert params["state"] == ["state-123456"]
    assert Delegation.objects.count() == SigninCode.objects.count() == 0


def test_login_comes_first(acme):
    client_id = registered_client_id()
    _verifier, challenge = pkce()
    url = f"/oauth/authorize?{urlencode(authorize_query(client_id, challenge))}"

    response = web().get(url)

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


# --- refusals at the authorization endpoint -------------------------------------------------------------------


def test_an_unregistered_redirect_uri_is_never_redirected_to(acme):
    _tenant, ada, _account, _key = acme
    client_id = registered_client_id()
    browser = web()
    browser.force_login(ada)
    _verifier, challenge = pkce()

    for redirect_uri in ("https://evil.example/cb", "http://127.0.0.1:33419/callback"):
        query = authorize_query(client_id, challenge, redirect_uri=redirect_uri)
        for response in (
            browser.get(f"/oauth/authorize?{urlencode(query)}"),
            browser.post(f"/oauth/authorize?{urlencode(query)}", {"tg_decision": "allow"}),
        ):
            assert response.status_code == 400
            assert "Location" not in response
    assert SigninCode.objects.count() == 0


def test_an_unknown_client_gets_an_error_page(acme):
    _tenant, ada, _account, _key = acme
    browser = web()
    browser.force_login(ada)
    _verifier, challenge = pkce()

    response = browser.get(f"/oauth/authorize?{urlencode(authorize_query('tgc_unknown', challenge))}")

    assert response.status_code == 400
    assert "Location" not in response


@pytest.mark.parametrize(
    "overrides",
    [
        {"code_challenge_method": "plain"},
        {"code_challenge_method": ""},
        {"code_challenge": ""},
    ],
)
def test_pkce_s256_is_required(acme, overrides):
    _tenant, ada, _account, _key = acme
    client_id = registered_client_id()
    browser = web()
    browser.force_login(ada)
    _verifier, challenge = pkce()
    query = {k: v for k, v in authorize_query(client_id, challenge, **overrides).items() if v}

    response = browser.get(f"/oauth/authorize?{urlencode(query)}")

    assert response.status_code == 302  # the redirect URI is registered: the error goes back to the client
    assert parse_qs(urlsplit(response["Location"]).query)["error"] == ["invalid_request"]
    assert SigninCode.objects.count() == 0


def test_a_resource_other_than_mcp_is_refused(acme):
    _tenant, ada, _account, _key = acme
    client_id = registered_client_id()
    browser = web()
    browser.force_login(ada)
    _verifier, challenge = pkce()

    query = authorize_query(client_id, challenge, resource="https://other.example/mcp")
    response = browser.get(f"/oauth/authorize?{urlencode(query)}")

    assert parse_qs(urlsplit(response["Location"]).query)["error"] == ["invalid_target"]


def test_a_person_in_no_tenant_gets_a_clear_page_never_a_code():
    loner = UserFactory(username="loner")
    client_id = registered_client_id()
    browser = web()
    browser.force_login(loner)
    _verifier, challenge = pkce()

    for method in (browser.get, browser.post):
        response = method(f"/oauth/authorize?{urlencode(authorize_query(client_id, challenge))}")
        assert response.status_code == 403
        assert "Location" not in response
        assert "not a member of any tenant" in response.content.decode()
    assert SigninCode.objects.count() == 0


def test_a_tenant_without_a_tools_exec_account_gets_a_clear_page(acme):
    other = TenantFactory(slug="ops")
    bob = UserFactory(username="bob")
    MembershipFactory(user=bob, tenant=other)
    service_account_with_key(other, name="admin-bot", scopes=("connections:manage",))
    client_id = registered_client_id()
    browser = web()
    browser.force_login(bob)
    _verifier, challenge = pkce()

    response = browser.get(f"/oauth/authorize?{urlencode(authorize_query(client_id, challenge))}")

    assert response.status_code == 403
    assert "Location" not in response
    assert "tools:exec" in response.content.decode()


def test_another_tenants_person_cannot_pick_this_tenants_account(acme):
    _tenant, _ada, account, _key = acme
    other = TenantFactory(slug="globex")
    eve = UserFactory(username="eve")
    MembershipFactory(user=eve, tenant=other)
    service_account_with_key(other, name="theirs")
    client_id = registered_client_id()
    browser = web()
    browser.force_login(eve)
    _verifier, challenge = pkce()
    url = f"/oauth/authorize?{urlencode(authorize_query(client_id, challenge))}"

    assert "assistant" not in browser.get(url).content.decode()
    response = browser.post(url, {"tg_decision": "allow", "tg_account": str(account.pk), "tg_tool": [TIME]})

    assert response.status_code == 400
    assert "Location" not in response
    assert not Delegation.objects.filter(service_account=account).exists()


# --- refusals at the token endpoint ---------------------------------------------------------------------------


def _code_for(user) -> tuple[str, str, str]:
    client_id = registered_client_id()
    browser = web()
    browser.force_login(user)
    verifier, challenge = pkce()
    return client_id, code_from(consent(browser, client_id, challenge)), verifier


def test_a_wrong_verifier_is_invalid_grant_and_spends_the_code(acme):
    _tenant, ada, _account, _key = acme
    client_id, code, verifier = _code_for(ada)

    wrong = exchange(client_id, code, pkce()[0])
    right_too_late = exchange(client_id, code, verifier)

    assert (wrong.status_code, wrong.json()["error"]) == (400, "invalid_grant")
    assert (right_too_late.status_code, right_too_late.json()["error"]) == (400, "invalid_grant")
    assert SigninToken.objects.count() == 0


def test_a_reused_code_revokes_what_it_issued(acme):
    _tenant, ada, _account, _key = acme
    client_id, code, verifier = _code_for(ada)
    tokens = exchange(client_id, code, verifier).json()
    assert tool_names(tokens["access_token"]) == [TIME, WAIT]

    again = exchange(client_id, code, verifier)

    assert (again.status_code, again.json()["error"]) == (400, "invalid_grant")
    assert mcp(tokens["access_token"], "tools/list").status_code == 401
    assert refresh(client_id, tokens["refresh_token"]).json()["error"] == "invalid_grant"
    assert SigninGrant.objects.get().revoke_reason == "code_reused"


def test_the_code_is_bound_to_its_client_and_redirect_uri(acme):
    _tenant, ada, _account, _key = acme
    _client_id, code, verifier = _code_for(ada)
    other_client = registered_client_id()

    assert exchange(other_client, code, verifier).json()["error"] == "invalid_grant"
    client_id2, code2, verifier2 = _code_for(ada)
    response = exchange(client_id2, code2, verifier2, redirect_uri="http://127.0.0.1:1/other")
    assert response.json()["error"] == "invalid_grant"


def test_token_endpoint_errors_are_rfc6749_bodies(acme):
    _tenant, ada, _account, _key = acme
    client_id, code, verifier = _code_for(ada)

    unknown_grant = web().post("/oauth/token", {"grant_type": "password", "client_id": client_id})
    unknown_client = exchange("tgc_nobody", code, verifier)
    no_code = web().post("/oauth/token", {"grant_type": "authorization_code", "client_id": client_id})
    other_resource = exchange(client_id, code, verifier, resource="https://elsewhere.example/mcp")

    assert unknown_grant.json()["error"] == "unsupported_grant_type"
    assert unknown_client.json()["error"] == "invalid_client"
    assert no_code.json()["error"] == "invalid_request"
    assert other_resource.json()["error"] == "invalid_target"
    for response in (unknown_grant, unknown_client, no_code, other_resource):
        assert 400 <= response.status_code < 500
        assert set(response.json()) <= {"error", "error_description", "error_uri"}
        assert response["Cache-Control"] == "no-store"


# --- the resource server -------------------------------------------------------------------------------------


def test_a_token_is_refused_at_another_resource(acme):
    _tenant, ada, _account, _key = acme
    _client_id, tokens = signed_in(ada)

    elsewhere = mcp(tokens["access_token"], "tools/list", host="127.0.0.1")
    rest = Client(HTTP_AUTHORIZATION=f"Bearer {tokens['access_token']}").get("/api/v1/tools")

    assert elsewhere.status_code == 401
    assert 'error="invalid_token"' in elsewhere["WWW-Authenticate"]
    assert rest.status_code == 401


def test_a_client_signed_in_at_mcp_also_uses_the_toolset_endpoints(acme):
    """A whole-catalog token reaches at least what a toolset does: accepted at `/mcp/t/<name>`, narrowed.

    The toolset's 401 names its own metadata, so a client that connects there signs in for it alone
    (test_signin_toolsets.py)."""
    tenant, ada, _account, _key = acme
    _client_id, tokens = signed_in(ada)
    toolset_save(tenant_id=tenant.pk, name="clock", tool_ids=[WAIT])
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}

    with_token = Client(HTTP_AUTHORIZATION=f"Bearer {tokens['access_token']}", HTTP_HOST="localhost").post(
        "/mcp/t/clock", json.dumps(listing), content_type="application/json"
    )
    without = web().post("/mcp/t/clock", json.dumps(listing), "application/json")

    assert with_token.status_code == 200, with_token.content
    assert [tool["name"] for tool in with_token.json()["result"]["tools"]] == [WAIT]
    assert without.status_code == 401
    assert without["WWW-Authenticate"] == (
        f'Bearer resource_metadata="{BASE}/.well-known/oauth-protected-resource/mcp/t/clock"'
    )


def test_an_expired_access_token_is_refused(acme):
    _tenant, ada, _account, _key = acme
    _client_id, tokens = signed_in(ada)
    SigninToken.objects.update(access_expires_at=timezone.now() - timedelta(seconds=1))

    response = mcp(tokens["access_token"], "tools/list")

    assert response.status_code == 401
    assert 'error="invalid_token"' in response["WWW-Authenticate"]


def test_revoking_the_delegation_or_the_account_ends_the_token(acme):
    tenant, ada, account, _key = acme
    _client_id, tokens = signed_in(ada)
    assert mcp(tokens["access_token"], "tools/list").status_code == 200

    delegation_revoke(delegation=Delegation.objects.get(user=ada))

    assert mcp(tokens["access_token"], "tools/list").status_code == 401
    assert not signin_grant_list(tenant_id=tenant.pk).exists()  # no longer listed as signed in
    _client_id, tokens = signed_in(ada)
    service_account_revoke(account=account)
    assert mcp(tokens["access_token"], "tools/list").status_code == 401


def test_a_person_removed_from_the_tenant_is_refused(acme):
    _tenant, ada, _account, _key = acme
    _client_id, tokens = signed_in(ada)
    TenantMembership.objects.filter(user=ada).delete()

    listed = mcp(tokens["access_token"], "tools/list")
    called = mcp(tokens["access_token"], "tools/call", {"name": TIME, "arguments": {}})

    assert listed.status_code == called.status_code == 401
    assert not ToolInvocation.objects.exists()


# --- refresh rotation and reuse --------------------------------------------------------------------------------


def test_refresh_rotates_and_a_reused_refresh_token_revokes_the_family(acme):
    _tenant, ada, _account, _key = acme
    client_id, first = signed_in(ada)

    second = refresh(client_id, first["refresh_token"], resource=RESOURCE)
    assert second.status_code == 200, second.content
    second = second.json()
    assert second["refresh_token"] != first["refresh_token"]
    assert mcp(first["access_token"], "tools/list").status_code == 401  # the old pair ended with its rotation
    assert mcp(second["access_token"], "tools/list").status_code == 200

    reused = refresh(client_id, first["refresh_token"])

    assert (reused.status_code, reused.json()["error"]) == (400, "invalid_grant")
    assert mcp(second["access_token"], "tools/list").status_code == 401
    assert refresh(client_id, second["refresh_token"]).json()["error"] == "invalid_grant"
    grant = SigninGrant.objects.get()
    assert grant.revoke_reason == "refresh_token_reused"
    assert Change.objects.filter(action="signin_grant.revoke.refresh_token_reused", object_id=str(grant.pk)).exists()


def test_a_refresh_token_of_another_client_is_invalid_grant(acme):
    _tenant, ada, _account, _key = acme
    _client_id, tokens = signed_in(ada)
    other_client = registered_client_id()

    assert refresh(other_client, tokens["refresh_token"]).json()["error"] == "invalid_grant"


# --- RFC 7009 revocation --------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["access_token", "refresh_token"])
@pytest.mark.parametrize("with_client_id", [True, False])
def test_rfc7009_revocation_ends_the_grant(acme, which, with_client_id):
    _tenant, ada, _account, _key = acme
    client_id, tokens = signed_in(ada)
    data = {"token": tokens[which], "token_type_hint": which}
    if with_client_id:
        data["client_id"] = client_id

    response = web().post("/oauth/revoke", data)

    assert response.status_code == 200
    assert mcp(tokens["access_token"], "tools/list").status_code == 401
    assert refresh(client_id, tokens["refresh_token"]).json()["error"] == "invalid_grant"
    assert SigninGrant.objects.get().revoke_reason == "rfc7009_revocation"


def test_rfc7009_revocation_of_an_unknown_token_is_200():
    client_id = registered_client_id()

    assert web().post("/oauth/revoke", {"token": "nope", "client_id": client_id}).status_code == 200
    assert web().post("/oauth/revoke", {"token": "tga_000000000000_" + "x" * 43}).status_code == 200


def test_another_client_cannot_revoke_a_token(acme):
    _tenant, ada, _account, _key = acme
    _client_id, tokens = signed_in(ada)
    other_client = registered_client_id()

    response = web().post("/oauth/revoke", {"token": tokens["access_token"], "client_id": other_client})

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_grant"
    assert mcp(tokens["access_token"], "tools/list").status_code == 200


# --- people stay in control ----------------------------------------------------------------------------------


def test_the_delegations_page_lists_and_revokes_signed_in_clients(acme):
    _tenant, ada, _account, _key = acme
    _client_id, tokens = signed_in(ada)
    mcp(tokens["access_token"], "tools/list")
    browser = web()
    browser.force_login(ada)

    page = browser.get("/delegations/").content.decode()
    grant = SigninGrant.objects.get()

    assert "Claude-ish Desktop" in page
    assert "127.0.0.1:33418" in page
    assert "assistant" in page
    confirm = browser.get(f"/delegations/signed-in/{grant.pk}/revoke/")
    assert confirm.status_code == 200
    done = browser.post(f"/delegations/signed-in/{grant.pk}/revoke/")
    assert done.status_code == 302
    assert mcp(tokens["access_token"], "tools/list").status_code == 401
    after = browser.get("/delegations/").content.decode()
    assert "is signed out" in after
    assert f"/delegations/signed-in/{grant.pk}/revoke/" not in after
    grant.refresh_from_db()
    assert grant.revoke_reason == "revoked_by_person"


def test_owners_see_their_tenants_clients_members_only_their_own(acme):
    tenant, ada, _account, _key = acme
    bob = UserFactory(username="bob")
    MembershipFactory(user=bob, tenant=tenant, role="member")
    owner = UserFactory(username="olga")
    MembershipFactory(user=owner, tenant=tenant, role="owner")
    signed_in(ada)
    grant = SigninGrant.objects.get()

    as_bob, as_owner = web(), web()
    as_bob.force_login(bob)
    as_owner.force_login(owner)

    assert "Claude-ish Desktop" not in as_bob.get("/delegations/").content.decode()
    assert as_bob.get(f"/delegations/signed-in/{grant.pk}/revoke/").status_code == 404
    assert "Claude-ish Desktop" in as_owner.get("/delegations/").content.decode()
    assert as_owner.post(f"/delegations/signed-in/{grant.pk}/revoke/").status_code == 302


def test_admin_lists_registrations_and_revoking_a_client_ends_its_tokens(acme, admin_client):
    _tenant, ada, _account, _key = acme
    client_id, tokens = signed_in(ada)
    row = SigninClient.objects.get(client_id=client_id)

    listing = admin_client.get("/admin/signin/signinclient/")
    assert listing.status_code == 200
    assert "Claude-ish Desktop" in listing.content.decode()
    assert admin_client.get(f"/admin/signin/signinclient/{row.pk}/change/").status_code == 200
    response = admin_client.post(
        "/admin/signin/signinclient/", {"action": "revoke_selected", "_selected_action": [str(row.pk)]}
    )

    assert response.status_code == 302
    assert mcp(tokens["access_token"], "tools/list").status_code == 401
    assert SigninGrant.objects.get().revoke_reason == "client_revoked"


def test_admin_can_delete_a_registration(acme, admin_client):
    _tenant, ada, _account, _key = acme
    client_id, tokens = signed_in(ada)
    row = SigninClient.objects.get(client_id=client_id)

    response = admin_client.post(f"/admin/signin/signinclient/{row.pk}/delete/", {"post": "yes"})

    assert response.status_code == 302
    assert not SigninClient.objects.exists()
    assert not SigninToken.objects.exists()
    assert mcp(tokens["access_token"], "tools/list").status_code == 401


def test_no_code_or_token_is_stored_in_clear(acme):
    _tenant, ada, _account, _key = acme
    client_id, code, verifier = _code_for(ada)
    tokens = exchange(client_id, code, verifier).json()

    stored = json.dumps(
        [list(SigninCode.objects.values()), list(SigninToken.objects.values()), list(SigninGrant.objects.values())],
        default=str,
    )
    changes = json.dumps(list(Change.objects.values()), default=str)
    for secret in (code, verifier, tokens["access_token"], tokens["refresh_token"]):
        assert secret not in stored
        assert secret not in changes
        assert not secret.startswith(("tga_", "tgr_")) or secret.split("_", 2)[2] not in stored


# --- Client ID Metadata Documents -----------------------------------------------------------------------------


@pytest.fixture
def document_host(settings):
    """A client's web server on loopback publishing its metadata document (loopback allowed, as upstream tests do)."""
    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = True
    with LoopbackServer() as server:
        yield server


def publish(server: LoopbackServer, **overrides: Any) -> str:
    url = f"{server.url}/oauth/client.json"
    document = {"client_id": url, "client_name": "Docs Client", "redirect_uris": [REDIRECT], **overrides}
    server.route("GET", "/oauth/client.json", json=document)
    return url


def test_a_metadata_document_client_signs_in_and_its_document_is_cached(acme, document_host):
    _tenant, ada, _account, _key = acme
    client_id = publish(document_host)
    browser = web()
    browser.force_login(ada)
    verifier, challenge = pkce()

    code = code_from(consent(browser, client_id, challenge))
    tokens = exchange(client_id, code, verifier)

    assert tokens.status_code == 200, tokens.content
    row = SigninClient.objects.get(client_id=client_id)
    assert (row.kind, row.client_name, row.redirect_uris) == ("metadata_document", "Docs Client", [REDIRECT])
    # consent page, its answer and the exchange all looked the client up: one fetch, then the cached row
    assert [request.path for request in document_host.requests] == ["/oauth/client.json"]
    assert tool_names(tokens.json()["access_token"]) == [TIME, WAIT]


def test_a_stale_document_is_fetched_again(acme, document_host):
    _tenant, ada, _account, _key = acme
    client_id = publish(document_host)
    browser = web()
    browser.force_login(ada)
    _verifier, challenge = pkce()
    assert browser.get(f"/oauth/authorize?{urlencode(authorize_query(client_id, challenge))}").status_code == 200
    SigninClient.objects.update(metadata_fetched_at=timezone.now() - timedelta(hours=2))
    publish(document_host, client_name="Renamed Client")

    page = browser.get(f"/oauth/authorize?{urlencode(authorize_query(client_id, challenge))}")

    assert "Renamed Client" in page.content.decode()
    assert len(document_host.requests) == 2


@pytest.mark.parametrize(
    "problem",
    [
        {"client_id": "https://someone-else.example/client.json"},
        {"redirect_uris": ["http://example.com/cb"]},
        {"redirect_uris": "not a list"},
    ],
)
def test_a_document_that_is_not_its_own_or_breaks_the_rules_leaves_the_client_unknown(acme, document_host, problem):
    _tenant, ada, _account, _key = acme
    client_id = publish(document_host, **problem)
    browser = web()
    browser.force_login(ada)
    _verifier, challenge = pkce()

    response = browser.get(f"/oauth/authorize?{urlencode(authorize_query(client_id, challenge))}")

    assert response.status_code == 400
    assert "Location" not in response
    assert not SigninClient.objects.exists()


def test_a_document_too_large_is_refused(acme, document_host):
    _tenant, ada, _account, _key = acme
    client_id = publish(document_host, padding="x" * (MAX_DOCUMENT_BYTES + 1))
    browser = web()
    browser.force_login(ada)
    _verifier, challenge = pkce()

    response = browser.get(f"/oauth/authorize?{urlencode(authorize_query(client_id, challenge))}")

    assert response.status_code == 400
    assert not SigninClient.objects.exists()


def test_the_address_guard_refuses_a_loopback_document_without_connecting(acme, settings):
    _tenant, ada, _account, _key = acme
    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = False
    with LoopbackServer() as server:
        client_id = f"https://127.0.0.1:{urlsplit(server.url).port}/oauth/client.json"
        browser = web()
        browser.force_login(ada)
        _verifier, challenge = pkce()

        response = browser.get(f"/oauth/authorize?{urlencode(authorize_query(client_id, challenge))}")

        assert response.status_code == 400
        assert server.requests == []
    assert not SigninClient.objects.exists()


def test_a_plain_http_document_url_is_not_a_client_id_outside_loopback_installs(acme, settings):
    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = False

    assert not is_metadata_document_url("http://client.example/oauth/client.json")
    assert not is_metadata_document_url("https://client.example/")
    assert is_metadata_document_url("https://client.example/oauth/client.json")


@pytest.mark.parametrize(
    "body",
    [
        [1, 2],
        "text",
        {"redirect_uris": [REDIRECT], "response_types": "code"},
        {"redirect_uris": [REDIRECT], "client_name": 7},
        {"redirect_uris": [REDIRECT + "\u0000"]},
        {"redirect_uris": [REDIRECT], "client_uri": "https://x.example/\u0000", "client_name": "a\u0000b"},
    ],
)
def test_registration_refuses_what_is_not_client_metadata_without_a_500(body):
    response = web().post("/oauth/register", json.dumps(body), content_type="application/json")

    assert response.status_code in (201, 400)
    if response.status_code == 201:  # the NUL-bearing optional fields are dropped, never stored
        row = SigninClient.objects.get()
        assert (row.client_uri, row.client_name) == ("", "ab")
    else:
        assert response.json()["error"] in {"invalid_client_metadata", "invalid_redirect_uri"}


def test_a_client_id_with_a_nul_is_unknown_not_a_500(acme):
    _tenant, ada, _account, _key = acme
    browser = web()
    browser.force_login(ada)
    _verifier, challenge = pkce()

    query = urlencode(authorize_query("tgc_\u0000x", challenge))
    page = browser.get(f"/oauth/authorize?{query}")
    token = web().post("/oauth/token", {"grant_type": "refresh_token", "client_id": "a\u0000", "refresh_token": "x"})

    assert page.status_code == 400
    assert token.json()["error"] == "invalid_client"


def test_the_consent_page_holds_one_form_to_post_and_it_works_without_javascript(acme):
    """A client that fills in the page's one POST form as a browser would (checked boxes, the Allow button)."""
    _tenant, ada, _account, _key = acme
    client_id = registered_client_id()
    browser = web()
    browser.force_login(ada)
    verifier, challenge = pkce()
    url = f"/oauth/authorize?{urlencode(authorize_query(client_id, challenge))}"
    html = browser.get(url).content.decode()

    forms = re.findall(r'<form method="post"[^>]*action="([^"]*)"[^>]*>(.*?)</form>', html, re.S)
    assert len(forms) == 1
    action, body = forms[0]
    fields: dict[str, list[str]] = {}
    for attributes in re.findall(r"<input([^>]*)>", body):
        name = re.search(r'name="([^"]+)"', attributes)
        value = re.search(r'value="([^"]*)"', attributes)
        if name and ('type="checkbox"' not in attributes or "checked" in attributes):
            fields.setdefault(name.group(1), []).append(value.group(1) if value else "")
    fields["tg_decision"] = ["allow"]
    answer = browser.post(action.replace("&amp;", "&"), fields)

    assert exchange(client_id, code_from(answer), verifier).status_code == 200


def test_browser_based_clients_may_call_the_public_endpoints_across_origins():
    origin = {"HTTP_ORIGIN": "http://localhost:6274"}  # the MCP Inspector's page
    preflight = web(**origin).options(
        "/oauth/register", HTTP_ACCESS_CONTROL_REQUEST_METHOD="POST", HTTP_ACCESS_CONTROL_REQUEST_HEADERS="content-type"
    )
    metadata = web(**origin).get("/.well-known/oauth-authorization-server")
    registered = register(web(**origin))

    assert preflight.status_code == 204
    assert "Content-Type" in preflight["Access-Control-Allow-Headers"]
    for response in (preflight, metadata, registered):
        assert response["Access-Control-Allow-Origin"] == "*"
    assert "Access-Control-Allow-Origin" not in web(**origin).get("/oauth/authorize")


def test_the_api_key_path_never_looks_for_an_access_token(acme):
    _tenant, _ada, _account, key = acme
    message = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})

    with CaptureQueriesContext(connection) as captured:
        assert web(HTTP_AUTHORIZATION=f"Bearer {key}").post("/mcp", message, "application/json").status_code == 200
        wrong = key[:-4] + "abcd"
        assert web(HTTP_AUTHORIZATION=f"Bearer {wrong}").post("/mcp", message, "application/json").status_code == 401

    assert captured.captured_queries  # the key check did run
    assert not [query for query in captured.captured_queries if "signin" in query["sql"]]


def test_a_signed_in_client_acts_for_its_person_whatever_subject_it_sends(acme):
    _tenant, ada, _account, _key = acme
    _client_id, tokens = signed_in(ada, tools=[TIME])

    call = mcp(
        tokens["access_token"],
        "tools/call",
        {"name": TIME, "arguments": {}, "_meta": {"toolgate/subject": "tgs_forged000000_" + "x" * 43}},
    )

    assert call.json()["result"]["isError"] is False
    assert ToolInvocation.objects.get().subject_id == f"user:{ada.pk}"
