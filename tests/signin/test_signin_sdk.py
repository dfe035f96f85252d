"""The official SDK's OAuth client against a live Toolgate, with a plain HTTP client as the person's browser.

No JavaScript is needed to sign in: the redirect handler fills in the portal's
own login form and consent form as a browser without scripts would (cookies,
the CSRF token, checked boxes, the Allow button) and follows the redirects up
to the client's callback. Both protocol eras of the SDK then list and call
tools with the token, on behalf of the person; RFC 7009 revocation ends it.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

from signin.models import SigninClient, SigninGrant
from tests.factories import (
    PASSWORD,
    UserFactory,
)
from tests.support.signin import TIME, WAIT, page_form, signin_tenant
from tools_app.models import ToolInvocation
from tools_app.toolsets import toolset_save

pytestmark = pytest.mark.django_db(transaction=True)

CALLBACK = "http://127.0.0.1:45731/callback"  # never contacted: the handler reads the code from the redirect


def _leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


class MemoryStorage:
    def __init__(self) -> None:
        self.tokens: Any = None
        self.client_info: Any = None

    async def get_tokens(self) -> Any:
        return self.tokens

    async def set_tokens(self, tokens: Any) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> Any:
        return self.client_info

    async def set_client_info(self, client_info: Any) -> None:
        self.client_info = client_info


class PlainBrowser:
    """The person's browser without JavaScript: logs in as `username` and answers the consent page with Allow."""

    def __init__(self, username: str) -> None:
        self.username = username
        self.code: AuthorizationCodeResult | None = None
        self.pages: list[str] = []
        self.authorization_urls: list[str] = []

    async def redirect_handler(self, authorization_url: str) -> None:
        self.authorization_urls.append(authorization_url)
        async with httpx.AsyncClient(follow_redirects=False, timeout=10) as http:
            response = await http.get(authorization_url)
            while response.status_code in (301, 302, 303):
                location = urljoin(str(response.url), response.headers["location"])
                if location.startswith(CALLBACK):
                    params = parse_qs(urlsplit(location).query)
                    self.code = AuthorizationCodeResult(code=params["code"][0], state=params["state"][0])
                    return
                response = await http.get(location)
                self.pages.append(response.text)
                if response.status_code == 200:
                    action, fields = page_form(response.text)
                    if "username" in fields:
                        fields.update(username=[self.username], password=[PASSWORD])
                    else:
                        fields["tg_decision"] = ["allow"]
                    response = await http.post(urljoin(str(response.url), action), data=fields)
            raise AssertionError(f"sign-in ended at HTTP {response.status_code}: {response.text[:300]}")

    async def callback_handler(self) -> AuthorizationCodeResult:
        assert self.code is not None
        return self.code


@pytest.fixture
def acme():
    tenant, ada, account, _key = signin_tenant()
    return tenant, ada, account


def provider(url: str, browser: PlainBrowser, storage: MemoryStorage, path: str = "/mcp") -> OAuthClientProvider:
    return OAuthClientProvider(
        server_url=f"{url}{path}",
        client_metadata=OAuthClientMetadata(
            client_name="SDK without a browser",
            redirect_uris=[CALLBACK],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=browser.redirect_handler,
        callback_handler=browser.callback_handler,
    )


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_the_sdk_signs_in_through_plain_html_forms_and_calls_on_behalf_of_the_person(live_server, acme, mode):
    _tenant, ada, account = acme
    browser = PlainBrowser("ada")
    storage = MemoryStorage()

    async def run() -> tuple[list[str], Any]:
        async with (
            create_mcp_http_client(auth=provider(live_server.url, browser, storage)) as http,
            Client(streamable_http_client(f"{live_server.url}/mcp", http_client=http), mode=mode) as client,
        ):
            listed = await client.list_tools()
            called = await client.call_tool(TIME, {"timezone": "UTC"}, meta={"toolgate/tool_call_id": f"sdk_{mode}"})
            return [tool.name for tool in listed.tools], called

    names, called = asyncio.run(run())

    assert names == [TIME, WAIT]
    assert called.is_error is False
    row = ToolInvocation.objects.get(tool_call_id=f"sdk_{mode}")
    assert (row.subject_id, str(row.service_account_id)) == (f"user:{ada.pk}", str(account.pk))
    assert any("Let “SDK without a browser” use Toolgate for you?" in page for page in browser.pages)
    assert storage.tokens.access_token.startswith("tga_")

    # RFC 7009 revocation: the next call is refused and the SDK cannot use the old token
    revoked = httpx.post(
        f"{live_server.url}/oauth/revoke",
        data={"token": storage.tokens.refresh_token, "client_id": storage.client_info.client_id},
        timeout=10,
    )
    assert revoked.status_code == 200
    after = httpx.post(
        f"{live_server.url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        headers={"Authorization": f"Bearer {storage.tokens.access_token}"},
        timeout=10,
    )
    assert after.status_code == 401
    assert SigninGrant.objects.get(client=SigninClient.objects.get()).revoke_reason == "rfc7009_revocation"


def test_the_sdk_refreshes_an_expired_access_token_with_a_rotated_refresh_token(live_server, acme):
    _tenant, _ada, _account = acme
    browser = PlainBrowser("ada")
    storage = MemoryStorage()
    oauth = provider(live_server.url, browser, storage)

    async def session() -> list[str]:
        async with (
            create_mcp_http_client(auth=oauth) as http,
            Client(streamable_http_client(f"{live_server.url}/mcp", http_client=http), mode="legacy") as c,
        ):
            return [tool.name for tool in (await c.list_tools()).tools]

    assert asyncio.run(session()) == [TIME, WAIT]
    first_refresh = storage.tokens.refresh_token
    oauth.context.token_expiry_time = 1.0  # the client believes its access token expired: it refreshes first

    assert asyncio.run(session()) == [TIME, WAIT]
    assert storage.tokens.refresh_token != first_refresh
    assert len(browser.pages) == 2  # login and consent once: the second session needed no person


def test_the_sdk_signs_in_at_a_toolset_for_that_toolset_only(live_server, acme):
    tenant, _ada, _account = acme
    toolset_save(tenant_id=tenant.pk, name="clock", tool_ids=[WAIT])
    browser = PlainBrowser("ada")
    storage = MemoryStorage()
    oauth = provider(live_server.url, browser, storage, path="/mcp/t/clock")
    resource = f"{live_server.url}/mcp/t/clock"

    async def session() -> list[str]:
        async with (
            create_mcp_http_client(auth=oauth) as http,
            Client(streamable_http_client(resource, http_client=http), mode="legacy") as client,
        ):
            return [tool.name for tool in (await client.list_tools()).tools]

    assert asyncio.run(session()) == [WAIT]

    # the SDK read the toolset's own metadata and asked for that resource (RFC 8707)
    assert parse_qs(urlsplit(browser.authorization_urls[0]).query)["resource"] == [resource]
    consent_page = next(page for page in browser.pages if "tg_tool" in page)
    assert re.findall(r'name="tg_tool" value="([^"]+)"', consent_page) == [WAIT]
    assert "It connected to the toolset <strong>clock</strong>" in consent_page
    grant = SigninGrant.objects.get()
    assert (grant.resource, grant.delegation.tools) == (resource, [WAIT])

    # a refresh keeps the toolset: the SDK sends the same resource and gets a rotated pair
    first_refresh = storage.tokens.refresh_token
    oauth.context.token_expiry_time = 1.0
    assert asyncio.run(session()) == [WAIT]
    assert storage.tokens.refresh_token != first_refresh
    assert len(browser.authorization_urls) == 1

    # the toolset's token is refused by the whole catalog, with the challenge that says where to sign in
    whole = httpx.post(
        f"{live_server.url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        headers={"Authorization": f"Bearer {storage.tokens.access_token}"},
        timeout=10,
    )
    assert whole.status_code == 401
    assert whole.headers["WWW-Authenticate"] == (
        f'Bearer error="invalid_token", resource_metadata="{live_server.url}/.well-known/oauth-protected-resource/mcp"'
    )


def test_a_person_in_no_tenant_never_gets_a_code(live_server, acme):
    UserFactory(username="loner")
    browser = PlainBrowser("loner")

    async def run() -> None:
        async with (
            create_mcp_http_client(auth=provider(live_server.url, browser, MemoryStorage())) as http,
            Client(streamable_http_client(f"{live_server.url}/mcp", http_client=http), mode="legacy") as c,
        ):
            await c.list_tools()

    try:
        asyncio.run(run())
    except BaseException as failure:
        leaf = _leaf(failure)
    else:
        pytest.fail("the sign-in went through")

    assert isinstance(leaf, AssertionError)
    assert "sign-in ended at HTTP 403" in str(leaf)
    assert browser.code is None
    assert "not a member of any tenant" in browser.pages[-1]
