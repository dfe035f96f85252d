"""Delegations in a real browser: a person delegates in the tenant UI, and a service's consent redirect.

The "service" is a loopback HTTP server: the consent redirect lands on its
registered callback, and the test plays the service's part (the code exchange
with its API key and PKCE verifier) over the REST API of the same live server.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from urllib.parse import urlencode

import pytest
from playwright.sync_api import expect

from policies_app.models import Delegation
from policies_app.services import service_account_set_redirect_uris
from tests.factories import (
    PASSWORD,
    MembershipFactory,
    TenantFactory,
    ToolPolicyFactory,
    UserFactory,
    service_account_with_key,
)
from tests.support.api import api_client, enable_tools
from tests.support.loopback import LoopbackServer, json_answer
from tools_app.models import ToolInvocation

TIME = "core__get_current_time"


@pytest.fixture
def acme():
    tenant = TenantFactory(slug="acme", name="Acme Corp")
    MembershipFactory(user=UserFactory(username="ada"), tenant=tenant, role="member")
    enable_tools(TIME)
    ToolPolicyFactory(tenant=tenant, allowed_tools=[TIME])
    account, key = service_account_with_key(tenant, name="assistant")
    return tenant, account, key


@pytest.fixture
def service():
    """The service's web server: its consent callback just says thanks."""
    with LoopbackServer() as server:
        server.handle("GET", "/callback", lambda _request: json_answer(200, {"thanks": True}))
        yield server


def log_in(browsing, next_path: str) -> None:
    page = browsing.page
    browsing.visit(next_path, "delegation-01-login")
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()


def callbacks(service: LoopbackServer) -> list:
    """What reached the service's callback (the browser may also ask it for a favicon)."""
    return [request for request in service.requests if request.path == "/callback"]


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def test_a_person_delegates_in_the_ui_and_the_service_acts_for_them(browsing, acme):
    _tenant, account, key = acme
    page = browsing.page
    log_in(browsing, "/delegations/")
    expect(page.get_by_role("heading", name="No delegations yet")).to_be_visible()

    page.get_by_role("link", name="Delegate to a service account").first.click()
    page.get_by_label("Service account").select_option(label="assistant")
    page.get_by_label(TIME).check()
    browsing.screenshot("delegation-02-form")
    page.get_by_role("button", name="Delegate").click()

    expect(page.get_by_role("heading", name="“assistant” may now act for you")).to_be_visible()
    token = page.get_by_label("Subject token").input_value()
    assert re.fullmatch(r"tgs_[0-9a-f]{12}_[A-Za-z0-9_-]{43}", token)
    browsing.screenshot("delegation-03-token-once")
    delegation = Delegation.objects.get(service_account=account)
    assert token not in (delegation.token_digest, delegation.token_prefix)

    # the service uses it
    response = api_client(key).post(
        "/api/v1/tools/exec",
        {"tool_id": TIME, "args": {}, "tool_call_id": "for-ada"},
        format="json",
        HTTP_X_TOOLGATE_SUBJECT=token,
    )
    assert response.status_code == 200
    assert ToolInvocation.objects.get(tool_call_id="for-ada").subject_id == f"user:{delegation.user_id}"

    # the list shows it, then the person revokes it
    page.get_by_role("link", name="I have handed over the token").click()
    row = page.get_by_role("row", name=re.compile("assistant"))
    expect(row.get_by_text("Active")).to_be_visible()
    assert token not in page.content()
    row.get_by_role("link", name="Revoke…").click()
    page.get_by_role("button", name="Revoke delegation").click()
    expect(page.get_by_text("Delegation to “assistant” revoked.")).to_be_visible()
    browsing.screenshot("delegation-04-revoked")
    refused = api_client(key).post(
        "/api/v1/tools/exec", {"tool_id": TIME, "args": {}}, format="json", HTTP_X_TOOLGATE_SUBJECT=token
    )
    assert refused.json()["error_code"] == "authz_denied"

    # the activity page names the person and filters by them (the call that ran and the one refused)
    browsing.visit(f"/activity/?person=user:{delegation.user_id}", "delegation-05-activity")
    expect(page.get_by_role("link", name="ada")).to_have_count(2)
    expect(page.get_by_label("On behalf of")).to_have_value(f"user:{delegation.user_id}")
    assert browsing.csp_violations() == []


def test_the_consent_redirect_end_to_end(browsing, acme, service):
    _tenant, account, key = acme
    callback = f"{service.url}/callback"
    service_account_set_redirect_uris(account=account, uris=[callback])
    verifier, challenge = pkce()
    state = secrets.token_urlsafe(16)
    query = {
        "response_type": "code",
        "client_id": str(account.pk),
        "redirect_uri": callback,
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "scope": TIME,
    }
    page = browsing.page

    # an unregistered redirect URI is refused with a page, never followed
    log_in(browsing, "/delegations/consent?" + urlencode({**query, "redirect_uri": f"{service.url}/evil"}))
    expect(page.get_by_role("heading", name="This request cannot be answered")).to_be_visible()
    expect(page.get_by_text("This redirect URI is not registered")).to_be_visible()
    browsing.screenshot("consent-01-unregistered")
    assert callbacks(service) == []

    # a forged state (the form altered to answer a request this person never saw) is refused
    browsing.visit("/delegations/consent?" + urlencode(query), "consent-02-ask")
    expect(page.get_by_role("heading", name="Let “assistant” act on your behalf?")).to_be_visible()
    page.locator("input[name=state]").evaluate("(input) => { input.value = 'forged-state-0123'; }")
    page.get_by_role("button", name="Allow").click()
    expect(page.get_by_text("This consent request is unknown or was already answered")).to_be_visible()
    assert callbacks(service) == []
    assert not Delegation.objects.exists()

    # the real request, approved
    browsing.visit("/delegations/consent?" + urlencode(query), "consent-03-ask-again")
    page.get_by_role("button", name="Allow").click()
    expect(page).to_have_url(re.compile(re.escape(callback) + r"\?code="))
    (arrived,) = callbacks(service)
    params = arrived.query_params()
    assert params["state"] == [state]
    code = params["code"][0]

    # the service exchanges the code: the verifier and the redirect_uri must match
    exchange = api_client(key)
    wrong = exchange.post(
        "/api/v1/delegations/token",
        {"code": code, "code_verifier": pkce()[0], "redirect_uri": callback},
        format="json",
    )
    assert (wrong.status_code, wrong.json()["error_code"]) == (422, "validation")
    # (a wrong verifier spends the code: start over)
    browsing.visit("/delegations/consent?" + urlencode(query), "consent-04-ask-third")
    page.get_by_role("button", name="Allow").click()
    code = callbacks(service)[-1].query_params()["code"][0]
    issued = exchange.post(
        "/api/v1/delegations/token", {"code": code, "code_verifier": verifier, "redirect_uri": callback}, format="json"
    )
    assert issued.status_code == 200, issued.content
    token = issued.json()["subject_token"]
    assert issued.json()["tools"] == [TIME]
    ok = exchange.post(
        "/api/v1/tools/exec", {"tool_id": TIME, "args": {}}, format="json", HTTP_X_TOOLGATE_SUBJECT=token
    )
    assert ok.status_code == 200

    # a reused code is refused, and revokes what it issued (the code leaked)
    reused = exchange.post(
        "/api/v1/delegations/token", {"code": code, "code_verifier": verifier, "redirect_uri": callback}, format="json"
    )
    assert reused.status_code == 422
    assert token not in reused.content.decode()
    after = exchange.post(
        "/api/v1/tools/exec", {"tool_id": TIME, "args": {}}, format="json", HTTP_X_TOOLGATE_SUBJECT=token
    )
    assert after.json()["error_code"] == "authz_denied"

    # the person sees the consent-made delegation, revoked
    browsing.visit("/delegations/", "consent-05-list")
    expect(page.get_by_text("Approved through a service's consent redirect").first).to_be_visible()
    assert browsing.csp_violations() == []
