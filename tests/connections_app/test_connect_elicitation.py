"""A person's call that needs an account they have not connected: URL elicitation to the connect page, then one run.

The official SDK client in both eras calls `github__get_user` for alice (her
subject token beside the account's key, or her own sign-in); nothing of hers is
granted or declared, so the call is refused `connection_required` and answered
with -32042 (2025-11-25) or an InputRequiredResult (2026-07-28) naming
`/calls/connect/<id>/`. Alice opens it in her own browser session (CSRF over the
live socket), types a key or goes through the OAuth flow; the page grants the
new connection to the account and declares it on her delegation. The client's
retry then runs the call once, against a loopback GitHub, with that connection.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import ElicitResult

from changes_app.models import Change
from connections_app.models import Connection, ExecutionGrant
from connections_app.services import connection_credentials_open
from policies_app.models import Delegation
from policies_app.services import delegation_create
from tests.factories import MembershipFactory, TenantFactory, ToolPolicyFactory, UserFactory, service_account_with_key
from tests.signin.test_signin_sdk import MemoryStorage, PlainBrowser, provider
from tests.support.api import enable_tools
from tests.support.fake_oauth import FakeOAuthProvider
from tests.support.mcp_person import as_person, elicitation_required
from tests.support.portal import Browser
from tests.support.signin import signin_tenant
from tools_app.models import ToolInvocation

pytestmark = pytest.mark.django_db(transaction=True)

GET_USER = "github__get_user"
USER = {"login": "octocat", "id": 583231, "name": "The Octocat", "html_url": "https://github.com/octocat"}
KEY = "ghp_typedOnTheConnectPage0123456789abc"
SDK_MODES = ("legacy", "2026-07-28")
CONNECT_URL = re.compile(r"^http://[^/]+/calls/connect/([0-9a-f-]{36})/$")
T = TypeVar("T")


@pytest.fixture
def world(live_server, github):
    """acme's `desktop` may run github__get_user; alice and bob delegated to it; no connection anywhere."""
    enable_tools(GET_USER)
    tenant = TenantFactory(slug="acme")
    account, key = service_account_with_key(tenant, name="desktop")
    ToolPolicyFactory(tenant=tenant, allowed_tools=[GET_USER], require_approval_for_effects=[])
    alice = MembershipFactory(tenant=tenant, user=UserFactory(username="alice"), role="member").user
    bob = MembershipFactory(tenant=tenant, user=UserFactory(username="bob"), role="member").user
    delegation, alice_token = delegation_create(tenant=tenant, user=alice, service_account=account)
    _d, bob_token = delegation_create(tenant=tenant, user=bob, service_account=account)
    github.route("GET", "/user", json=USER)
    return {
        "url": live_server.url,
        "key": key,
        "account": account,
        "alice": alice,
        "bob": bob,
        "delegation": delegation,
        "alice_token": alice_token,
        "bob_token": bob_token,
    }


def mcp(
    world: dict[str, Any],
    mode: str,
    fn: Callable[[Client], Awaitable[T]],
    *,
    on_page: Callable[[str], str] | None = None,
) -> T:
    return as_person(world["url"], world["key"], world["alice_token"], mode, fn, on_page=on_page)


def call(client: Client) -> Awaitable[Any]:
    return client.call_tool(GET_USER, {})


def call_expecting_elicitation(client: Client) -> Awaitable[Any]:
    return elicitation_required(client, GET_USER)


def csrf_of(page: httpx.Response) -> str:
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert found is not None, "the form carries a CSRF token"
    return found.group(1)


def types_a_key(world: dict[str, Any], user_key: str = "alice") -> Callable[[str], str]:
    """What alice does with the URL: open it in her browser, type an API key, press Connect."""
    browser = Browser(world["url"], world[user_key])  # signed in before the client runs (no ORM inside its loop)

    def act(url: str) -> str:
        page = browser.open(url)
        assert page.status_code == 200, page.text
        assert 'id="connect-provider">github<' in page.text
        saved = browser.post(url, data={"csrfmiddlewaretoken": csrf_of(page), "api_key": KEY, "label": "mine"})
        assert saved.status_code == 302, saved.text
        assert saved.headers["location"] == urlsplit(url).path  # back to the page itself, nowhere else
        done = browser.open(url)
        assert "You can return to your client" in done.text
        return "accept"

    return act


def executions() -> int:
    return ToolInvocation.objects.filter(tool_id=GET_USER, executed=True).count()


def text_of(result: Any) -> str:
    return result.content[0].text


def assert_connected_and_ran_once(world: dict[str, Any], github: Any, *, token: str) -> None:
    """One personal connection, granted and declared by alice (in the change log), used by exactly one run."""
    connection = Connection.objects.get()
    assert (connection.provider, connection.owner, connection.created_by) == ("github", world["alice"], world["alice"])
    grant = ExecutionGrant.objects.get()
    assert grant.service_account == world["account"]
    assert list(grant.connections.all()) == [connection]
    delegation = Delegation.objects.get(pk=world["delegation"].pk)
    assert delegation.connection_ids == [str(connection.pk)]
    actions = sorted(Change.objects.filter(actor_label="alice").values_list("action", flat=True))
    assert actions == ["connection.create", "delegation.connections_set", "grant.create"]
    assert [request.headers["authorization"] for request in github.requests] == [f"Bearer {token}"]
    assert executions() == 1
    refused, ran = ToolInvocation.objects.filter(tool_id=GET_USER).order_by("started_at", "id")
    assert (refused.error_code, refused.executed, refused.connection_id) == ("connection_required", False, "")
    assert (ran.ok, ran.executed, ran.subject_id) == (True, True, f"user:{world['alice'].pk}")
    assert (ran.connection_id, ran.grant_id, ran.connection_choice) == (
        str(connection.pk),
        str(grant.pk),
        "only_declared",
    )


@pytest.mark.parametrize("mode", SDK_MODES)
def test_a_person_connects_a_key_on_the_page_and_the_retry_runs_the_call_once(world, github, mode):
    # when
    if mode == "legacy":
        data = mcp(world, mode, call_expecting_elicitation, on_page=lambda url: "accept")
        (elicitation,) = data["elicitations"]
        assert elicitation["mode"] == "url"
        ask_id = CONNECT_URL.match(elicitation["url"]).group(1)
        assert elicitation["elicitationId"] == ask_id
        assert elicitation["message"] == (
            f"{GET_USER} needs a github account. Connect one on the page that opens; this client may then use it, "
            "and the call runs when your client tries again."
        )
        assert executions() == 0
        assert github.requests == []
        types_a_key(world)(elicitation["url"])
        result = mcp(world, mode, call, on_page=lambda url: "accept")
    else:
        pages: list[str] = []
        act = types_a_key(world)

        def person(url: str) -> str:
            pages.append(url)
            return act(url)

        result = mcp(world, mode, call, on_page=person)
        assert len(pages) == 1
        assert CONNECT_URL.match(pages[0])

    # then
    assert result.is_error is False, text_of(result)
    assert result.structured_content == USER
    assert_connected_and_ran_once(world, github, token=KEY)
    # the next call needs nobody: the declared connection is simply used
    assert mcp(world, mode, call).is_error is False
    assert executions() == 2


@pytest.mark.parametrize("mode", SDK_MODES)
def test_a_person_connects_through_oauth_and_the_retry_runs_with_the_new_token(world, github, mode):
    with FakeOAuthProvider() as oauth:
        oauth.register("github", scopes=("read:user",))
        browser = Browser(world["url"], world["alice"])

        def through_oauth(url: str) -> str:
            page = browser.open(url)
            assert 'id="connect-oauth"' in page.text
            start = browser.open(f"{urlsplit(url).path}oauth/")
            assert start.status_code == 302
            assert start.headers["location"].startswith(oauth.authorize_url)
            answer = httpx.get(start.headers["location"], follow_redirects=False)  # the provider approves
            callback = browser.open(answer.headers["location"])
            assert callback.status_code == 302
            assert callback.headers["location"] == urlsplit(url).path
            assert "You can return to your client" in browser.open(url).text
            return "accept"

        if mode == "legacy":
            data = mcp(world, mode, call_expecting_elicitation, on_page=lambda url: "accept")
            through_oauth(data["elicitations"][0]["url"])
            result = mcp(world, mode, call, on_page=lambda url: "accept")
        else:
            result = mcp(world, mode, call, on_page=through_oauth)

        assert result.is_error is False, text_of(result)
        connection = Connection.objects.get()
        assert connection.credential_type == "oauth2"
        access_token = connection_credentials_open(connection)["access_token"]
        assert oauth.is_live_access_token(access_token)
        assert_connected_and_ran_once(world, github, token=access_token)


@pytest.mark.parametrize("mode", SDK_MODES)
def test_a_client_without_url_elicitation_gets_the_page_in_the_text(world, github, mode):
    result = mcp(world, mode, call)  # no elicitation callback: nothing declared

    assert result.is_error is True
    url = result.meta["toolgate/page_url"]
    assert CONNECT_URL.match(url)
    assert result.meta["toolgate/error_code"] == "connection_required"
    assert "toolgate/approval_id" not in result.meta
    assert text_of(result) == (
        f"connection_required: {GET_USER} needs a github account. Connect one on the page that opens; this client "
        f"may then use it, and the call runs when your client tries again. Open {url}"
    )
    # the model repeats the call before the person acted: still the same page, said to wait
    again = mcp(world, mode, call)
    assert again.meta["toolgate/page_url"] == url
    assert text_of(again).startswith(f"connection_required: {GET_USER} still waits for you to connect a github")
    assert executions() == 0
    # the person follows the link; the client's next identical call runs it
    types_a_key(world)(url)
    assert mcp(world, mode, call).is_error is False
    assert executions() == 1
    assert [request.headers["authorization"] for request in github.requests] == [f"Bearer {KEY}"]
    codes = list(ToolInvocation.objects.order_by("started_at", "id").values_list("error_code", "executed"))
    assert codes == [("connection_required", False), ("connection_required", False), ("", True)]


def test_a_retry_before_the_person_connected_says_it_waits_instead_of_asking_again(world, github):
    asked: list[str] = []

    def nobody_acts(url: str) -> str:
        asked.append(url)
        return "accept"

    result = mcp(world, "2026-07-28", call, on_page=nobody_acts)

    assert len(asked) == 1  # one question, no rounds of it
    assert result.is_error is True
    assert result.meta["toolgate/page_url"] == asked[0]
    assert text_of(result).startswith(f"connection_required: {GET_USER} still waits for you to connect a github")
    assert executions() == 0
    assert Connection.objects.count() == 0


def test_the_page_opened_by_another_person_is_not_found_and_connects_nothing(world, github):
    mcp(world, "2026-07-28", call)
    (row,) = ToolInvocation.objects.filter(tool_id=GET_USER)
    url = mcp(world, "2026-07-28", call).meta["toolgate/page_url"]
    path = urlsplit(url).path

    bob = Browser(world["url"], world["bob"])
    assert bob.open(url).status_code == 404
    assert bob.open(f"{path}oauth/").status_code == 404
    assert bob.post(url, data={"api_key": KEY}).status_code in (403, 404)  # no CSRF token, and not his
    alice_page = Browser(world["url"], world["alice"]).open(url)
    csrf = csrf_of(alice_page)
    assert bob.post(url, data={"csrfmiddlewaretoken": csrf, "api_key": KEY}).status_code in (403, 404)
    anonymous = httpx.get(url)
    assert anonymous.status_code == 302
    assert anonymous.headers["location"] == f"/accounts/login/?next={path}"
    assert httpx.get(f"{world['url']}/calls/connect/00000000-0000-4000-8000-000000000000/").status_code == 302
    assert (
        Browser(world["url"], world["alice"]).open("/calls/connect/00000000-0000-4000-8000-000000000000/").status_code
        == 404
    )
    assert alice_page.status_code == 200
    assert "frame-ancestors 'none'" in alice_page.headers["content-security-policy"]
    assert KEY not in alice_page.text
    assert Connection.objects.count() == 0
    assert ExecutionGrant.objects.count() == 0
    assert Delegation.objects.get(pk=world["delegation"].pk).connection_ids == []
    assert executions() == 0
    assert row.error_code == "connection_required"


@pytest.mark.parametrize("mode", SDK_MODES)
def test_a_signed_in_person_connects_and_runs_a_connection_tool_with_no_meta(live_server, github, mode):
    """The SDK's OAuthClientProvider signs ada in (no key, no subject token, no _meta); she connects on the page."""
    tenant, ada, account, _key = signin_tenant()
    enable_tools(GET_USER)
    policy = tenant.policies.get()
    policy.allowed_tools = [*policy.allowed_tools, GET_USER]
    policy.save()
    github.route("GET", "/user", json=USER)
    portal = Browser(live_server.url, ada)
    world = {"url": live_server.url, "alice": ada}
    act = types_a_key(world)
    pages: list[str] = []

    def person(url: str) -> str:
        pages.append(url)
        return act(url)

    async def elicited(context: Any, params: Any) -> ElicitResult:
        return ElicitResult(action=person(params.url))

    async def run() -> Any:
        async with (
            create_mcp_http_client(auth=provider(live_server.url, PlainBrowser("ada"), MemoryStorage())) as http,
            Client(
                streamable_http_client(f"{live_server.url}/mcp", http_client=http),
                mode=mode,
                elicitation_callback=elicited,
            ) as client,
        ):
            if mode == "legacy":
                data = await call_expecting_elicitation(client)
                person(data["elicitations"][0]["url"])
            return await client.call_tool(GET_USER, {})

    result = asyncio.run(run())

    assert result.is_error is False, text_of(result)
    assert len(pages) == 1
    assert portal.open(pages[0]).status_code == 200
    connection = Connection.objects.get()
    delegation = Delegation.objects.get(user=ada, service_account=account, revoked_at__isnull=True)
    assert delegation.connection_ids == [str(connection.pk)]
    assert [request.headers["authorization"] for request in github.requests] == [f"Bearer {KEY}"]
    assert executions() == 1
    assert ToolInvocation.objects.get(executed=True).connection_choice == "only_declared"
