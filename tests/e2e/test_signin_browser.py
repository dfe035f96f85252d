"""An MCP client that signs a person in, end to end: the official SDK's OAuth client and a real browser.

`mcp.client.auth.OAuthClientProvider` talks to the live server: the 401 with
`resource_metadata`, RFC 9728 and RFC 8414 discovery, RFC 7591 registration,
then its redirect handler hands the authorization URL to Chromium (Playwright),
which logs in through the portal's own login page and answers the consent
page. The browser lands on the client's loopback callback; the callback
handler hands the code back to the SDK, which exchanges it (PKCE S256) and
retries. Then tools/list and tools/call run with the token, on behalf of the
person; an RFC 7009 revocation ends the client's access.

The SDK runs on its own thread and event loop: Playwright's sync API owns the
main thread's loop.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from playwright.sync_api import expect

from policies_app.models import Delegation
from signin.models import SigninClient, SigninGrant
from tests.factories import (
    PASSWORD,
)
from tests.support.loopback import LoopbackServer, json_answer
from tests.support.signin import TIME, WAIT, signin_tenant
from tools_app.models import ToolInvocation

SDK_TIMEOUT_S = 60


class MemoryStorage:
    """The SDK's TokenStorage, in memory (what a desktop client keeps in its keychain)."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class SdkClient:
    """The SDK on a thread of its own; the browser's part comes back through queues."""

    def __init__(self, server_url: str, callback_url: str) -> None:
        self.storage = MemoryStorage()
        self.authorization_urls: queue.Queue[str] = queue.Queue()
        self.callbacks: queue.Queue[AuthorizationCodeResult] = queue.Queue()
        self.provider = OAuthClientProvider(
            server_url=server_url,
            client_metadata=OAuthClientMetadata(
                client_name="Playwright MCP client",
                redirect_uris=[callback_url],
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
                token_endpoint_auth_method="none",
            ),
            storage=self.storage,
            redirect_handler=self._redirect,
            callback_handler=self._callback,
        )
        self.server_url = server_url

    async def _redirect(self, url: str) -> None:
        self.authorization_urls.put(url)

    async def _callback(self) -> AuthorizationCodeResult:
        return await asyncio.to_thread(self.callbacks.get, True, SDK_TIMEOUT_S)

    def start(self, scenario: Callable[[Client], Any]) -> tuple[threading.Thread, dict[str, Any]]:
        """Run `scenario(client)` on a thread; its result (or error) lands in the returned dict."""
        outcome: dict[str, Any] = {}

        async def run() -> None:
            async with (
                create_mcp_http_client(auth=self.provider) as http,
                Client(streamable_http_client(self.server_url, http_client=http), mode="legacy") as client,
            ):
                outcome["result"] = await scenario(client)

        def target() -> None:
            try:
                asyncio.run(run())
            except BaseException as error:
                outcome["error"] = error

        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        return thread, outcome


@pytest.fixture
def acme():
    tenant, ada, account, _key = signin_tenant()
    return tenant, ada, account


@pytest.fixture
def callback():
    """The MCP client's loopback callback page (what a desktop client listens on during sign-in)."""
    with LoopbackServer() as server:
        server.handle("GET", "/callback", lambda _request: json_answer(200, {"signed_in": True}))
        yield server


def sign_in_in_the_browser(browsing, authorization_url: str, tools_to_keep: list[str]) -> None:
    """Log in through the portal, narrow the tools on the consent page, Allow."""
    page = browsing.page
    page.goto(authorization_url)
    browsing.screenshot("signin-01-login")
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Let “Playwright MCP client” use Toolgate for you?")).to_be_visible()
    browsing.screenshot("signin-02-consent")
    for box in page.locator("input[name=tg_tool]").all():
        if box.get_attribute("value") not in tools_to_keep:
            box.uncheck()
    page.get_by_role("button", name="Allow").click()
    page.wait_for_url("**/callback?**")


def test_the_sdk_oauth_client_signs_a_person_in_calls_for_them_and_loses_access_on_revocation(browsing, acme, callback):
    _tenant, ada, account = acme
    server_url = f"{browsing.base_url}/mcp"
    sdk = SdkClient(server_url, f"{callback.url}/callback")

    async def scenario(client: Client) -> tuple[list[str], Any]:
        listed = await client.list_tools()
        called = await client.call_tool(TIME, {"timezone": "UTC"}, meta={"toolgate/tool_call_id": "signed_in_1"})
        return [tool.name for tool in listed.tools], called

    thread, outcome = sdk.start(scenario)
    authorization_url = sdk.authorization_urls.get(timeout=SDK_TIMEOUT_S)
    query = parse_qs(urlsplit(authorization_url).query)
    assert query["code_challenge_method"] == ["S256"]
    assert query["resource"] == [server_url]

    sign_in_in_the_browser(browsing, authorization_url, tools_to_keep=[TIME])

    landed = parse_qs(urlsplit(browsing.page.url).query)
    assert landed["state"] == query["state"]
    sdk.callbacks.put(AuthorizationCodeResult(code=landed["code"][0], state=landed["state"][0]))
    thread.join(SDK_TIMEOUT_S)
    assert "error" not in outcome, repr(outcome.get("error"))
    names, called = outcome["result"]

    assert names == [TIME]  # only what ada kept on the consent page
    assert called.is_error is False
    assert set(called.structured_content) == {"iso", "epoch_ms", "timezone"}
    row = ToolInvocation.objects.get(tool_call_id="signed_in_1")
    assert (row.subject_id, str(row.service_account_id), row.ok) == (f"user:{ada.pk}", str(account.pk), True)
    client = SigninClient.objects.get(client_name="Playwright MCP client")
    assert client.client_id == sdk.storage.client_info.client_id
    grant = SigninGrant.objects.get(client=client)
    assert grant.delegation == Delegation.objects.get(user=ada, service_account=account, revoked_at__isnull=True)
    assert grant.delegation.tools == [TIME]

    # The delegations page shows the signed-in client.
    browsing.visit("/delegations/", "signin-03-delegations")
    expect(browsing.page.get_by_role("cell", name="Playwright MCP client", exact=True)).to_be_visible()

    # RFC 7009: the client signs out; its token stops working at once.
    access_token = sdk.storage.tokens.access_token
    revoked = httpx.post(
        f"{browsing.base_url}/oauth/revoke",
        data={"token": access_token, "client_id": client.client_id, "token_type_hint": "access_token"},
        timeout=10,
    )
    assert revoked.status_code == 200
    after = httpx.post(
        server_url,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        headers={"Authorization": f"Bearer {access_token}", "Accept": "application/json, text/event-stream"},
        timeout=10,
    )
    assert after.status_code == 401
    assert 'error="invalid_token"' in after.headers["WWW-Authenticate"]
    assert browsing.csp_violations() == []


def test_revoking_a_signed_in_client_on_the_delegations_page(browsing, acme, callback):
    _tenant, _ada, _account = acme
    server_url = f"{browsing.base_url}/mcp"
    sdk = SdkClient(server_url, f"{callback.url}/callback")

    async def scenario(client: Client) -> list[str]:
        return [tool.name for tool in (await client.list_tools()).tools]

    thread, outcome = sdk.start(scenario)
    sign_in_in_the_browser(browsing, sdk.authorization_urls.get(timeout=SDK_TIMEOUT_S), tools_to_keep=[TIME, WAIT])
    landed = parse_qs(urlsplit(browsing.page.url).query)
    sdk.callbacks.put(AuthorizationCodeResult(code=landed["code"][0], state=landed["state"][0]))
    thread.join(SDK_TIMEOUT_S)
    assert outcome.get("result") == [TIME, WAIT], repr(outcome.get("error"))

    page = browsing.page
    browsing.visit("/delegations/", "signin-04-delegations")
    page.get_by_role("link", name="Revoke Playwright MCP client").click()
    page.get_by_role("button", name="Revoke signed-in client").click()
    expect(page.get_by_text("“Playwright MCP client” is signed out.")).to_be_visible()
    browsing.screenshot("signin-05-signed-out")

    after = httpx.post(
        server_url,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        headers={"Authorization": f"Bearer {sdk.storage.tokens.access_token}"},
        timeout=10,
    )
    assert after.status_code == 401
    assert SigninGrant.objects.get().revoke_reason == "revoked_by_person"
