"""URL elicitation end to end: the official SDK client in both eras, a live server, a person's browser.

A call made for a person (their subject token beside the service account's key)
that needs them answers -32042 (2025-11-25) or an InputRequiredResult
(2026-07-28) naming a portal page; the person acts there in their own browser
session (CSRF and all, over the live socket); the client's retry runs the call
once. Every test ends with the count of executions and the rows that say who
decided.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import pytest
from django.test import Client as DjangoClient
from django.urls import reverse
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import URL_ELICITATION_REQUIRED, ElicitResult

from changes_app.models import Change
from gateway import elicitation as person
from policies_app.governance import governance_bump
from policies_app.models import ApprovalRequest, Approver, ToolPolicy
from policies_app.services import approval_decide
from policies_app.services import delegation_create as delegation_make
from tests.factories import MembershipFactory, TenantFactory, ToolPolicyFactory, UserFactory, service_account_with_key
from tests.signin.test_signin_sdk import MemoryStorage, PlainBrowser, provider
from tests.support.api import enable_tools
from tests.support.mcp_person import as_person, elicitation_required, leaf
from tests.support.portal import Browser
from tests.support.signin import signin_tenant
from tools_app.models import ToolInvocation

pytestmark = pytest.mark.django_db(transaction=True)

TIME = "core__get_current_time"
SDK_MODES = ("legacy", "2026-07-28")
T = TypeVar("T")


@pytest.fixture
def world(live_server):
    """acme: a service account whose policy asks the person's own confirmation of the time tool; alice and bob."""
    enable_tools(TIME)
    tenant = TenantFactory(slug="acme")
    account, key = service_account_with_key(tenant, name="desktop")
    policy = ToolPolicyFactory(
        service_account=account,
        tenant=tenant,
        allowed_tools=[TIME],
        require_approval_for_tools=[TIME],
        approver=Approver.SUBJECT,
    )
    alice = MembershipFactory(tenant=tenant, user=UserFactory(username="alice"), role="member").user
    bob = MembershipFactory(tenant=tenant, user=UserFactory(username="bob"), role="member").user
    owner = MembershipFactory(tenant=tenant, user=UserFactory(username="olive"), role="owner").user
    _d, alice_token = delegation_make(tenant=tenant, user=alice, service_account=account)
    _d, bob_token = delegation_make(tenant=tenant, user=bob, service_account=account)
    return {
        "url": live_server.url,
        "key": key,
        "policy": policy,
        "alice": alice,
        "bob": bob,
        "owner": owner,
        "alice_token": alice_token,
        "bob_token": bob_token,
    }


def mcp(
    world: dict[str, Any],
    mode: str,
    fn: Callable[[Client], Awaitable[T]],
    *,
    token: str | None = None,
    on_page: Callable[[str], str] | None = None,
) -> T:
    return as_person(world["url"], world["key"], token or world["alice_token"], mode, fn, on_page=on_page)


def call(client: Client) -> Awaitable[Any]:
    return client.call_tool(TIME, {})


def call_expecting_elicitation(client: Client) -> Awaitable[Any]:
    return elicitation_required(client, TIME)


def executions() -> int:
    return ToolInvocation.objects.filter(tool_id=TIME, executed=True).count()


def text_of(result: Any) -> str:
    return result.content[0].text


def only_approval() -> ApprovalRequest:
    (approval,) = ApprovalRequest.objects.all()
    return approval


def confirm_url(world: dict[str, Any], approval: ApprovalRequest) -> str:
    return f"{world['url']}/calls/{approval.pk}/confirm/"


def person_acts(world: dict[str, Any], user_key: str, decision: str) -> Callable[[str], str]:
    """What a person does with the URL their client shows: open it in their browser and press a button."""
    browser = Browser(world["url"], world[user_key])  # signed in before the client runs (no ORM inside its loop)

    def act(url: str) -> str:
        response = browser.press(url, decision)
        assert response.status_code == 302, response.text
        return "accept"

    return act


@pytest.mark.parametrize("mode", SDK_MODES)
def test_a_person_confirms_in_their_browser_and_the_retry_runs_the_call_once(world, mode):
    # when
    if mode == "legacy":
        data = mcp(world, mode, call_expecting_elicitation, on_page=lambda url: "accept")
        (elicitation,) = data["elicitations"]
        assert elicitation["mode"] == "url"
        assert elicitation["elicitationId"] == str(only_approval().pk)
        assert elicitation["url"] == confirm_url(world, only_approval())
        assert executions() == 0
        person_acts(world, "alice", "confirm")(elicitation["url"])
        result = mcp(world, mode, call, on_page=lambda url: "accept")
    else:
        result = mcp(world, mode, call, on_page=person_acts(world, "alice", "confirm"))

    # then
    assert result.is_error is False, text_of(result)
    assert executions() == 1
    approval = only_approval()
    assert (approval.status, approval.approver, approval.decided_by, approval.subject_id) == (
        "consumed",
        Approver.SUBJECT,
        world["alice"],
        f"user:{world['alice'].pk}",
    )
    change = Change.objects.get(action="approval.approved")
    assert (change.actor_kind, change.actor_label) == ("user", "alice")
    row = ToolInvocation.objects.get(tool_id=TIME, executed=True)
    assert row.tool_call_id == approval.tool_call_id
    assert row.subject_id == f"user:{world['alice'].pk}"
    assert row.approved_by == "alice"  # the run names who confirmed it; the waiting rows name no one
    assert set(ToolInvocation.objects.filter(executed=False).values_list("approved_by", flat=True)) == {""}
    operator = DjangoClient()
    operator.force_login(UserFactory(username="ops", is_staff=True, is_superuser=True))
    admin_page = operator.get(reverse("admin:tools_app_toolinvocation_change", args=[row.pk]))
    assert admin_page.status_code == 200
    assert re.search(r"Approved by:?</label>\s*<div class=\"readonly\">alice</div>", admin_page.text)
    # a repeat of the same call asks again: the confirmation was for one run
    again = mcp(world, mode, call)
    assert again.is_error is True
    assert "approval_required" in text_of(again)
    assert executions() == 1


@pytest.mark.parametrize("mode", SDK_MODES)
def test_a_declined_call_answers_that_the_person_declined_and_never_runs(world, mode):
    if mode == "legacy":
        data = mcp(world, mode, call_expecting_elicitation, on_page=lambda url: "accept")
        person_acts(world, "alice", "decline")(data["elicitations"][0]["url"])
        result = mcp(world, mode, call, on_page=lambda url: "accept")
    else:
        result = mcp(world, mode, call, on_page=person_acts(world, "alice", "decline"))

    assert result.is_error is True
    assert text_of(result) == (
        f"The person declined this call of {TIME}; it did not run. Do not repeat it unless they ask again."
    )
    assert result.meta["toolgate/declined"] is True
    assert executions() == 0
    approval = only_approval()
    assert (approval.status, approval.decided_by, approval.reason) == ("denied", world["alice"], "the person declined")
    assert Change.objects.get(action="approval.denied").actor_label == "alice"


@pytest.mark.parametrize("mode", SDK_MODES)
def test_an_approval_by_an_owner_pending_then_decided(world, mode):
    # given a policy that names tenant owners instead
    policy = world["policy"]
    policy.approver = Approver.TENANT_OWNER
    policy.save()
    governance_bump()
    seen: list[str] = []

    def nobody_acts(url: str) -> str:
        seen.append(url)
        return "accept"

    # when the person opens the status page but nobody has decided yet
    if mode == "legacy":
        data = mcp(world, mode, call_expecting_elicitation, on_page=nobody_acts)
        seen.append(data["elicitations"][0]["url"])
        pending = mcp(world, mode, call, on_page=nobody_acts)
    else:
        pending = mcp(world, mode, call, on_page=nobody_acts)

    # then the retry says it still waits and gives the page again (no loop of rounds)
    approval = only_approval()
    status_url = f"{world['url']}/calls/{approval.pk}/"
    assert seen == [status_url]
    assert pending.is_error is True
    assert text_of(pending) == (
        f"approval_required: {TIME} still waits for an owner of your tenant or an operator to approve it; "
        f"the page shows where it stands. Open {status_url}"
    )
    assert pending.meta["toolgate/page_url"] == status_url
    assert executions() == 0
    page = Browser(world["url"], world["alice"]).open(status_url)
    assert page.status_code == 200
    assert "Waiting for a decision" in page.text
    owner_page = Browser(world["url"], world["owner"]).open(status_url)
    assert owner_page.status_code == 200
    assert f"/approvals/{approval.pk}/" in owner_page.text
    assert Browser(world["url"], world["bob"]).open(status_url).status_code == 404

    # when an owner approves it, and the model repeats the call
    approval_decide(approval=approval, approve=True, decided_by=world["owner"])
    done = mcp(world, mode, call, on_page=nobody_acts)

    # then it ran once, recorded as the owner's approval
    assert done.is_error is False, text_of(done)
    assert executions() == 1
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by) == ("consumed", world["owner"])
    assert seen == [status_url]  # the decided call was not elicited again
    assert ToolInvocation.objects.get(tool_id=TIME, executed=True).approved_by == "olive"


@pytest.mark.parametrize("mode", SDK_MODES)
def test_a_client_without_url_elicitation_gets_the_page_in_the_text(world, mode):
    result = mcp(world, mode, call)  # no elicitation callback: nothing declared

    approval = only_approval()
    url = confirm_url(world, approval)
    assert result.is_error is True
    assert text_of(result) == (
        f"approval_required: Confirm or decline {TIME} with these exact arguments on the page that opens. Open {url}"
    )
    assert result.meta["toolgate/error_code"] == "approval_required"
    assert executions() == 0
    # the person follows the link; the client's next identical call runs it
    person_acts(world, "alice", "confirm")(url)
    assert mcp(world, mode, call).is_error is False
    assert executions() == 1


def test_a_page_opened_by_another_person_is_not_found_and_decides_nothing(world):
    mcp(world, "2026-07-28", call)
    approval = only_approval()
    url = confirm_url(world, approval)
    bob = Browser(world["url"], world["bob"])

    assert bob.open(url).status_code == 404
    csrf_page = Browser(world["url"], world["bob"])
    assert csrf_page.post(url, data={"decision": "confirm"}).status_code in (403, 404)
    anonymous = httpx.get(url)
    assert anonymous.status_code == 302
    assert anonymous.headers["location"].startswith("/accounts/login/?next=/calls/")
    approval.refresh_from_db()
    assert approval.status == "pending"
    alice_page = Browser(world["url"], world["alice"]).open(url)
    assert alice_page.status_code == 200
    assert "frame-ancestors 'none'" in alice_page.headers["content-security-policy"]
    assert f'<code id="call-tool">{TIME}</code>' in alice_page.text
    assert executions() == 0


def _first_round(client: Client) -> Awaitable[Any]:
    return client.session.call_tool(TIME, {}, allow_input_required=True)


def _retry_with(state: str) -> Callable[[Client], Awaitable[Any]]:
    def run(client: Client) -> Awaitable[Any]:
        return client.session.call_tool(TIME, {}, request_state=state, allow_input_required=True)

    return run


def test_a_forged_request_state_runs_nothing(world):
    result = mcp(world, "2026-07-28", _retry_with("forged-state"), on_page=lambda url: "accept")

    assert result.is_error is True
    assert person.BAD_STATE_MESSAGE in text_of(result)
    assert executions() == 0
    assert ApprovalRequest.objects.count() == 0


def test_a_replayed_request_state_runs_nothing_more(world):
    first = mcp(world, "2026-07-28", _first_round, on_page=lambda url: "accept")
    assert first.result_type == "input_required"
    assert first.request_state
    person_acts(world, "alice", "confirm")(confirm_url(world, only_approval()))

    ran = mcp(world, "2026-07-28", _retry_with(first.request_state), on_page=lambda url: "accept")
    replayed = mcp(world, "2026-07-28", _retry_with(first.request_state), on_page=lambda url: "accept")

    assert ran.is_error is False
    assert replayed.is_error is True
    assert person.BAD_STATE_MESSAGE in text_of(replayed)
    assert executions() == 1


def test_an_expired_request_state_runs_nothing(world, monkeypatch):
    monkeypatch.setattr(person, "STATE_TTL_S", -1)
    first = mcp(world, "2026-07-28", _first_round, on_page=lambda url: "accept")
    person_acts(world, "alice", "confirm")(confirm_url(world, only_approval()))

    result = mcp(world, "2026-07-28", _retry_with(first.request_state), on_page=lambda url: "accept")

    assert result.is_error is True
    assert person.BAD_STATE_MESSAGE in text_of(result)
    assert executions() == 0
    assert only_approval().status == "approved"  # still usable by the person's own retry


def test_another_persons_request_state_runs_nothing(world):
    first = mcp(world, "2026-07-28", _first_round, on_page=lambda url: "accept")
    person_acts(world, "alice", "confirm")(confirm_url(world, only_approval()))

    as_bob = mcp(
        world, "2026-07-28", _retry_with(first.request_state), token=world["bob_token"], on_page=lambda url: "accept"
    )

    assert as_bob.is_error is True
    assert person.BAD_STATE_MESSAGE in text_of(as_bob)
    assert executions() == 0
    assert only_approval().status == "approved"


@pytest.mark.parametrize("mode", SDK_MODES)
def test_a_signed_in_person_confirms_a_call_their_client_makes(live_server, mode):
    """The SDK's OAuthClientProvider signs ada in (no API key, no subject token); she confirms in her browser."""
    tenant, ada, _account, _key = signin_tenant()
    ToolPolicy.objects.filter(tenant=tenant).update(require_approval_for_tools=[TIME], approver=Approver.SUBJECT)
    governance_bump()
    signin = PlainBrowser("ada")
    portal = Browser(live_server.url, ada)
    pages: list[str] = []

    def confirm(url: str) -> str:
        pages.append(url)
        assert portal.press(url, "confirm").status_code == 302
        return "accept"

    async def elicited(context: Any, params: Any) -> ElicitResult:
        return ElicitResult(action=confirm(params.url))

    async def run() -> Any:
        async with (
            create_mcp_http_client(auth=provider(live_server.url, signin, MemoryStorage())) as http,
            Client(
                streamable_http_client(f"{live_server.url}/mcp", http_client=http),
                mode=mode,
                elicitation_callback=elicited,
            ) as client,
        ):
            if mode == "legacy":
                with pytest.raises(MCPError) as raised:
                    await client.call_tool(TIME, {"timezone": "UTC"})
                error = leaf(raised.value)
                assert isinstance(error, MCPError)
                assert error.error.code == URL_ELICITATION_REQUIRED
                confirm(error.error.data["elicitations"][0]["url"])
            return await client.call_tool(TIME, {"timezone": "UTC"})

    result = asyncio.run(run())

    assert result.is_error is False, text_of(result)
    approval = only_approval()
    assert pages == [f"{live_server.url}/calls/{approval.pk}/confirm/"]
    assert (approval.status, approval.decided_by, approval.subject_id) == ("consumed", ada, f"user:{ada.pk}")
    assert executions() == 1
    assert ToolInvocation.objects.get(executed=True).subject_id == f"user:{ada.pk}"


@pytest.mark.parametrize("mode", SDK_MODES)
def test_a_client_that_repeats_its_tool_call_id_is_asked_once_then_told_it_waits(world, mode):
    asked: list[str] = []

    def nobody_acts(url: str) -> str:
        asked.append(url)
        return "accept"

    async def twice(client: Client) -> Any:
        meta = {"toolgate/tool_call_id": f"desk-{mode}"}
        if mode == "legacy":
            with pytest.raises(MCPError) as raised:
                await client.call_tool(TIME, {}, meta=meta)
            error = leaf(raised.value)
            assert isinstance(error, MCPError)
            assert error.error.code == URL_ELICITATION_REQUIRED
        return await client.call_tool(TIME, {}, meta=meta)

    result = mcp(world, mode, twice, on_page=nobody_acts)

    approval = only_approval()
    assert approval.tool_call_id == f"desk-{mode}"
    assert asked == ([] if mode == "legacy" else [confirm_url(world, approval)])  # one question, no rounds of it
    assert result.is_error is True
    assert text_of(result).startswith(f"approval_required: {TIME} still waits for your confirmation")
    assert executions() == 0
    person_acts(world, "alice", "confirm")(confirm_url(world, approval))
    done = mcp(world, mode, lambda client: client.call_tool(TIME, {}, meta={"toolgate/tool_call_id": f"desk-{mode}"}))
    assert done.is_error is False
    assert executions() == 1
