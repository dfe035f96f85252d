"""A signed-in person's calls that name no connection: the one they declared on the consent page is used.

End to end: the official SDK's OAuth client signs ada in through the portal's
plain HTML forms (the consent page offers the connections granted to the
account, ticked), then calls `github__get_user` over /mcp with no `_meta` at
all; the loopback GitHub sees exactly one request with the chosen connection's
token, and the audit row names the connection and why it was chosen. With two
connections declared, or none, the call is refused before any credential is
touched, saying how to choose or where to connect one. The same rule holds for
REST exec with a subject token, and the person can change the declaration on
the delegations page (recorded in the change log).
"""

from __future__ import annotations

import asyncio

import pytest
from django.test import Client as WebClient
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from changes_app.models import Change
from connections_app.services import delegation_connections_set
from core.errors import AppError
from policies_app.models import Delegation
from policies_app.services import delegation_create
from tests.factories import ConnectionFactory, GrantFactory, MembershipFactory, UserFactory
from tests.signin.test_signin_sdk import MemoryStorage, PlainBrowser, provider
from tests.support.api import api_client, enable_tools
from tests.support.signin import TIME, WAIT, mcp, signed_in, signin_tenant
from tools_app.models import ToolInvocation

GET_USER = "github__get_user"
USER = {"login": "octocat", "id": 583231, "name": "The Octocat", "html_url": "https://github.com/octocat"}
TOKEN = "ghp_chosenConnection0123456789abcdef"
OTHER_TOKEN = "ghp_otherConnection0123456789abcdefg"


@pytest.fixture
def acme(github):
    """ada of acme, whose account `assistant` may run github__get_user; a tenant github connection granted to it."""
    tenant, ada, account, key = signin_tenant()
    enable_tools(GET_USER)
    policy = tenant.policies.get()
    policy.allowed_tools = [*policy.allowed_tools, GET_USER]
    policy.save()
    connection = ConnectionFactory(tenant=tenant, credentials={"api_key": TOKEN}, label="octo org")
    GrantFactory(service_account=account, connections=[connection])
    github.route("GET", "/user", json=USER)
    return tenant, ada, account, key, connection


@pytest.mark.django_db(transaction=True)
def test_a_signed_in_person_runs_a_connection_tool_with_no_meta_at_all(live_server, acme, github):
    _tenant, ada, account, _key, connection = acme
    browser = PlainBrowser("ada")

    async def run():
        async with (
            create_mcp_http_client(auth=provider(live_server.url, browser, MemoryStorage())) as http,
            Client(streamable_http_client(f"{live_server.url}/mcp", http_client=http), mode="legacy") as client,
        ):
            return await client.call_tool(GET_USER, {})

    called = asyncio.run(run())

    assert called.is_error is False, called.content
    assert called.structured_content == USER
    consent_page = next(page for page in browser.pages if "tg_tool" in page)
    assert f'name="tg_connection" value="{connection.pk}" checked' in consent_page
    delegation = Delegation.objects.get(user=ada, service_account=account, revoked_at__isnull=True)
    assert delegation.connection_ids == [str(connection.pk)]
    [request] = github.requests
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    row = ToolInvocation.objects.get(tool_id=GET_USER)
    assert (row.ok, row.executed, row.subject_id) == (True, True, f"user:{ada.pk}")
    assert (row.connection_id, row.connection_choice) == (str(connection.pk), "only_declared")
    assert row.grant_id == str(connection.grants.get().pk)


def _signed_in_declaring(ada, connection_ids):
    """ada signs a client in through the consent form, ticking exactly these connections; her access token."""
    _client_id, tokens = signed_in(
        ada, tools=[TIME, WAIT, GET_USER], form_extra={"tg_connection": [str(pk) for pk in connection_ids]}
    )
    return tokens["access_token"]


@pytest.mark.django_db
def test_two_declared_connections_refuse_and_say_how_to_choose(settings, acme, github):
    settings.ALLOWED_HOSTS = ["localhost", "testserver"]
    tenant, ada, account, _key, connection = acme
    other = ConnectionFactory(tenant=tenant, credentials={"api_key": OTHER_TOKEN}, label="second")
    grant = GrantFactory(service_account=account, connections=[other])
    token = _signed_in_declaring(ada, [connection.pk, other.pk])

    answer = mcp(token, "tools/call", {"name": GET_USER, "arguments": {}}).json()["result"]

    assert answer["isError"] is True
    text = answer["content"][0]["text"]
    assert text.startswith("validation: connection_id: 2 github connections may be used for this call, so it must name")
    assert f"{other.pk} (grant {grant.pk})" in text
    delegation = Delegation.objects.get(user=ada, revoked_at__isnull=True)
    assert text.endswith(f"or keep only one for this client at /delegations/{delegation.pk}/connections/")
    assert github.requests == []
    assert ToolInvocation.objects.get(tool_id=GET_USER).executed is False

    # naming one (with its grant, as the message says) runs it with that one
    named = mcp(
        token,
        "tools/call",
        {
            "name": GET_USER,
            "arguments": {},
            "_meta": {"toolgate/connection_id": str(other.pk), "toolgate/grant_id": str(grant.pk)},
        },
    ).json()["result"]
    assert named["isError"] is False
    assert [request.headers["authorization"] for request in github.requests] == [f"Bearer {OTHER_TOKEN}"]
    assert ToolInvocation.objects.get(tool_id=GET_USER, ok=True).connection_choice == "named"


@pytest.mark.django_db
def test_no_declared_connection_refuses_with_connection_required_naming_the_provider(settings, acme, github):
    settings.ALLOWED_HOSTS = ["localhost", "testserver"]
    _tenant, ada, _account, _key, _connection = acme
    token = _signed_in_declaring(ada, [])

    answer = mcp(token, "tools/call", {"name": GET_USER, "arguments": {}}).json()["result"]

    assert answer["isError"] is True
    assert answer["_meta"]["toolgate/error_code"] == "connection_required"
    # a client that did not declare URL elicitation reads the connect page in the text (its own test:
    # tests/connections_app/test_connect_elicitation.py)
    page = answer["_meta"]["toolgate/page_url"]
    assert page.startswith("http://localhost/calls/connect/")
    assert answer["content"][0]["text"] == (
        f"connection_required: {GET_USER} needs a github account. Connect one on the page that opens; this "
        f"client may then use it, and the call runs when your client tries again. Open {page}"
    )
    assert github.requests == []


@pytest.mark.django_db
def test_rest_exec_with_a_subject_token_chooses_personal_before_tenant(acme, github):
    tenant, ada, account, key, connection = acme
    mine = ConnectionFactory(tenant=tenant, credentials={"api_key": OTHER_TOKEN}, owner=ada, label="ada's")
    GrantFactory(service_account=account, connections=[mine])
    delegation, subject = delegation_create(tenant=tenant, user=ada, service_account=account)
    web = WebClient()
    web.force_login(ada)

    # the person declares both on the delegations page; the change log remembers it
    page = web.get(f"/delegations/{delegation.pk}/connections/")
    assert page.status_code == 200
    saved = web.post(f"/delegations/{delegation.pk}/connections/", {"tg_connection": [connection.pk, mine.pk]})
    assert saved.status_code == 302
    change = Change.objects.get(action="delegation.connections_set")
    assert change.after["connection_ids"] == sorted([str(connection.pk), str(mine.pk)])

    response = api_client(key).post(
        "/api/v1/tools/exec",
        {"tool_id": GET_USER, "args": {}, "tool_call_id": "rest-1"},
        format="json",
        HTTP_X_TOOLGATE_SUBJECT=subject,
    )

    assert response.status_code == 200, response.content
    assert [request.headers["authorization"] for request in github.requests] == [f"Bearer {OTHER_TOKEN}"]
    row = ToolInvocation.objects.get(tool_call_id="rest-1")
    assert (row.connection_id, row.connection_choice) == (str(mine.pk), "personal_first")

    # undeclared again: refused with 409 and the provider, nothing sent
    web.post(f"/delegations/{delegation.pk}/connections/", {})
    refused = api_client(key).post(
        "/api/v1/tools/exec",
        {"tool_id": GET_USER, "args": {}, "tool_call_id": "rest-2"},
        format="json",
        HTTP_X_TOOLGATE_SUBJECT=subject,
    )
    assert refused.status_code == 409
    assert (refused.json()["error_code"], refused.json()["provider"]) == ("connection_required", "github")
    assert len(github.requests) == 1


@pytest.mark.django_db
def test_another_persons_delegation_page_is_not_found_and_foreign_ids_are_refused(acme):
    tenant, ada, account, _key, connection = acme
    bob = MembershipFactory(tenant=tenant, user=UserFactory(username="bob"), role="owner").user
    delegation, _ = delegation_create(tenant=tenant, user=ada, service_account=account)
    theirs = ConnectionFactory(tenant=tenant, owner=bob)
    web = WebClient()
    web.force_login(bob)
    assert web.get(f"/delegations/{delegation.pk}/connections/").status_code == 404

    with pytest.raises(AppError):
        delegation_connections_set(delegation=delegation, connection_ids=[theirs.pk])
    assert Delegation.objects.get(pk=delegation.pk).connection_ids == []
    delegation_connections_set(delegation=delegation, connection_ids=[connection.pk])
    assert Delegation.objects.get(pk=delegation.pk).connection_ids == [str(connection.pk)]
