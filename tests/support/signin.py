"""Playing an MCP client's part in sign-in (docs/api.md) through Django's test client.

Requests go to `http://localhost` (Authlib refuses plain http except on
loopback hosts); tests that use these set ALLOWED_HOSTS to include it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
from html import unescape
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from django.test import Client

from tests.factories import MembershipFactory, TenantFactory, ToolPolicyFactory, UserFactory, service_account_with_key
from tests.support.api import enable_tools

BASE = "http://localhost"  # Authlib refuses plain http except on loopback hosts
RESOURCE = f"{BASE}/mcp"
REDIRECT = "http://127.0.0.1:33418/callback"
TIME = "core__get_current_time"
WAIT = "core__wait"


def signin_tenant():
    """Tenant `acme` with a member, ada, and one tools:exec service account whose policy allows TIME and WAIT.

    Returns (tenant, ada, account, key).
    """
    tenant = TenantFactory(slug="acme", name="Acme Corp")
    ada = UserFactory(username="ada")
    MembershipFactory(user=ada, tenant=tenant, role="member")
    enable_tools(TIME, WAIT)
    ToolPolicyFactory(tenant=tenant, allowed_tools=[TIME, WAIT])
    account, key = service_account_with_key(tenant, name="assistant")
    return tenant, ada, account, key


def web(**headers: str) -> Client:
    return Client(HTTP_HOST="localhost", **headers)


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def register(client: Client | None = None, **metadata: Any):
    body = {"client_name": "Claude-ish Desktop", "redirect_uris": [REDIRECT], **metadata}
    return (client or web()).post("/oauth/register", json.dumps(body), content_type="application/json")


def registered_client_id() -> str:
    response = register()
    assert response.status_code == 201, response.content
    return response.json()["client_id"]


def authorize_query(client_id: str, challenge: str, **overrides: str) -> dict[str, str]:
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "state-123456",
        "resource": RESOURCE,
        "scope": "mcp",
    }
    query.update(overrides)
    return query


def consent(browser: Client, client_id: str, challenge: str, form: dict[str, Any] | None = None, **overrides: str):
    """Show the consent page, then answer it (Allow unless the form says otherwise); the answer's response."""
    url = f"/oauth/authorize?{urlencode(authorize_query(client_id, challenge, **overrides))}"
    shown = browser.get(url)
    assert shown.status_code == 200, shown.content.decode()
    return browser.post(url, form or {"tg_decision": "allow", "tg_tool": [TIME, WAIT]})


def code_from(response) -> str:
    assert response.status_code == 302, response.content.decode()
    location = urlsplit(response["Location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == REDIRECT
    params = parse_qs(location.query)
    assert params["state"] == ["state-123456"]
    return params["code"][0]


def exchange(client_id: str, code: str, verifier: str, **overrides: str):
    data = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": REDIRECT,
        "client_id": client_id,
        "code_verifier": verifier,
        "resource": RESOURCE,
        **overrides,
    }
    return web().post("/oauth/token", data)


def refresh(client_id: str, refresh_token: str, **overrides: str):
    data = {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": client_id, **overrides}
    return web().post("/oauth/token", data)


def signed_in(
    user, client_id: str | None = None, tools: list[str] | None = None, form_extra: dict[str, Any] | None = None
) -> tuple[str, dict[str, Any]]:
    """The whole flow for `user`: registration, consent, exchange; the client id and the token response.

    `form_extra` adds fields to the consent form (`tg_connection`: the connections ticked).
    """
    client_id = client_id or registered_client_id()
    browser = web()
    browser.force_login(user)
    verifier, challenge = pkce()
    form = {"tg_decision": "allow", "tg_tool": tools or [TIME, WAIT], **(form_extra or {})}
    response = exchange(client_id, code_from(consent(browser, client_id, challenge, form)), verifier)
    assert response.status_code == 200, response.content
    return client_id, response.json()


def mcp(token: str, method: str, params: dict[str, Any] | None = None, host: str = "localhost"):
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_HOST=host).post(
        "/mcp", json.dumps(message), content_type="application/json"
    )


def tool_names(token: str) -> list[str]:
    response = mcp(token, "tools/list")
    assert response.status_code == 200, response.content
    return [tool["name"] for tool in response.json()["result"]["tools"]]


def page_form(html: str) -> tuple[str, dict[str, list[str]]]:
    """The page's POST form that is not the logout form: its action and what a browser without scripts submits."""
    for attributes, body in re.findall(r"<form([^>]*method=\"post\"[^>]*)>(.*?)</form>", html, re.S):
        action = unescape(re.search(r'action="([^"]*)"', attributes).group(1))
        if "logout" in action:
            continue
        fields: dict[str, list[str]] = {}
        for tag in re.findall(r"<input([^>]*)>", body):
            name = re.search(r'name="([^"]+)"', tag)
            value = re.search(r'value="([^"]*)"', tag)
            if name and ('type="checkbox"' not in tag or " checked" in tag):
                fields.setdefault(name.group(1), []).append(unescape(value.group(1)) if value else "")
        return action, fields
    raise AssertionError("no form on the page")
