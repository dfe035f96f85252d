"""A person signs an MCP client in with a real browser and runs a connection tool with no `_meta` at all.

The SDK's OAuth client drives the sign-in; Chromium (Playwright) logs in and
answers the consent page, where the tenant's GitHub connection granted to the
account is offered, ticked. The client then calls `github__get_user` naming
nothing: the loopback GitHub sees the connection's token once, and the audit
row names the connection and why it was chosen.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from mcp import Client
from mcp.shared.auth import AuthorizationCodeResult
from playwright.sync_api import expect

from config.runtime import runtime
from tests.e2e.test_signin_browser import SDK_TIMEOUT_S, SdkClient, sign_in_in_the_browser
from tests.factories import ConnectionFactory, GrantFactory
from tests.support.api import enable_tools
from tests.support.loopback import LoopbackServer, json_answer
from tests.support.signin import TIME, WAIT, signin_tenant
from tools_app.models import ToolInvocation

GET_USER = "github__get_user"
TOKEN = "ghp_browserChosen0123456789abcdefAB"
USER = {"login": "octocat", "id": 583231, "name": "The Octocat", "html_url": "https://github.com/octocat"}


@pytest.fixture
def github(settings) -> Iterator[LoopbackServer]:
    with LoopbackServer() as server:
        settings.TOOLGATE_GITHUB_API_URL = server.url
        runtime.cache_clear()
        yield server
    runtime.cache_clear()


@pytest.fixture
def callback() -> Iterator[LoopbackServer]:
    with LoopbackServer() as server:
        server.handle("GET", "/callback", lambda _request: json_answer(200, {"signed_in": True}))
        yield server


def test_a_person_signed_in_in_a_browser_runs_a_connection_tool_without_meta(browsing, github, callback):
    tenant, ada, account, _key = signin_tenant()
    enable_tools(GET_USER)
    policy = tenant.policies.get()
    policy.allowed_tools = [*policy.allowed_tools, GET_USER]
    policy.save()
    connection = ConnectionFactory(tenant=tenant, credentials={"api_key": TOKEN}, label="octo org")
    GrantFactory(service_account=account, connections=[connection])
    github.route("GET", "/user", json=USER)
    sdk = SdkClient(f"{browsing.base_url}/mcp", f"{callback.url}/callback")

    async def scenario(client: Client) -> Any:
        return await client.call_tool(GET_USER, {})

    thread, outcome = sdk.start(scenario)
    authorization_url = sdk.authorization_urls.get(timeout=SDK_TIMEOUT_S)
    sign_in_in_the_browser(browsing, authorization_url, tools_to_keep=[TIME, WAIT, GET_USER])
    landed = parse_qs(urlsplit(browsing.page.url).query)
    sdk.callbacks.put(AuthorizationCodeResult(code=landed["code"][0], state=landed["state"][0]))
    thread.join(SDK_TIMEOUT_S)
    assert "error" not in outcome, repr(outcome.get("error"))
    called = outcome["result"]

    assert called.is_error is False, called.content
    assert called.structured_content == USER
    [request] = github.requests
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    row = ToolInvocation.objects.get(tool_id=GET_USER)
    assert (row.ok, row.subject_id, row.connection_id, row.connection_choice) == (
        True,
        f"user:{ada.pk}",
        str(connection.pk),
        "only_declared",
    )

    # the delegations page shows the choice and lets ada change it
    browsing.visit("/delegations/", "choice-01-delegations")
    browsing.page.get_by_role("link", name="Connections (1)").click()
    expect(browsing.page.get_by_label("octo org the tenant's …" + connection.short_id)).to_be_checked()
    browsing.screenshot("choice-02-connections")
    assert browsing.csp_violations() == []
