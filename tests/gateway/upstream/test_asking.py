"""An upstream tool asking the client mid-call (elicitation, sampling), through Toolgate, governed.

The upstream is the SDK's MCPServer (2026-07-28, stateless) whose tools ask through resolvers
(`Elicit`, `Sample`); the client is the SDK's `Client` in 2026-07-28 mode with real callbacks,
against /mcp on a live server. What is checked: a question reaches the client's callback only for
a tool an operator allowed to ask, and the answer reaches the upstream; sampling is refused unless
the caller's policy allows it, then capped per call; each round is an audit row; a forged or
replayed requestState, or answers to questions never asked, run nothing; hidden characters in a
question are written out; a 2025-era client gets a clean tool error, not a hang.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Annotated, Any

import httpx
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import Elicit, Resolve, Sample
from mcp.shared._httpx_utils import create_mcp_http_client
from pydantic import BaseModel

from changes_app.models import Change
from core.errors import AppError
from gateway.input_rounds import answer_await, question_open
from gateway.upstream.models import McpTool
from gateway.upstream.services import (
    mcp_server_discover,
    mcp_server_register,
    mcp_tool_allow_asking,
    mcp_tool_approve,
)
from policies_app.models import ToolPolicy
from policy_files.policy_io import policy_export, policy_import
from runner.asking import AskUnanswered
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.mcp_upstream import McpUpstream
from tools_app.models import ToolInvocation
from tools_app.services import tool_set_enabled

pytestmark = pytest.mark.django_db(transaction=True)

ORDER = "mcp__shop__order"
SUMMARISE = "mcp__shop__summarise"
MODERN = "2026-07-28"


class Choice(BaseModel):
    confirm: bool


async def ask_confirm(item: str) -> Elicit[Choice]:
    return Elicit(f"Order {item}?\u200b", Choice)  # a zero-width space: upstream text is untrusted


async def order(item: str, choice: Annotated[Choice, Resolve(ask_confirm)]) -> str:
    """Order an item once the person confirms."""
    return f"ordered {item}" if choice.confirm else f"kept {item}"


async def ask_model(text: str) -> Sample:
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=f"Summarise: {text}"))
    return Sample([message], max_tokens=50)


async def summarise(text: str, sampled: Annotated[types.CreateMessageResult, Resolve(ask_model)]) -> str:
    """Summarise a text with the client's model."""
    content = sampled.content
    return f"summary: {content.text if isinstance(content, types.TextContent) else '?'}"


@pytest.fixture
def upstream(settings) -> Iterator[McpUpstream]:
    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = True
    with McpUpstream(legacy=False) as server:
        server.server.add_tool(order, structured_output=False)
        server.server.add_tool(summarise, structured_output=False)
        yield server


@pytest.fixture
def shop(upstream):
    tenant = TenantFactory(slug="acme")
    _account, key = service_account_with_key(tenant, name="agent")
    policy = ToolPolicyFactory(tenant=tenant, allowed_tools=["mcp__shop__*"])
    server, _ = mcp_server_register(slug="shop", url=upstream.url)
    mcp_server_discover(server_id=server.pk)
    for tool_id in (ORDER, SUMMARISE):
        mcp_tool_approve(tool_id=tool_id, via="test")
    tool_set_enabled(tool_ids=[ORDER, SUMMARISE], enabled=True)
    return key, policy


class Person:
    """The client's side: what its callbacks were asked, and what they answer."""

    def __init__(self, *, confirm: bool = True) -> None:
        self.confirm = confirm
        self.questions: list[types.ElicitRequestParams] = []
        self.samples: list[types.CreateMessageRequestParams] = []

    async def elicit(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.questions.append(params)
        return types.ElicitResult(action="accept", content={"confirm": self.confirm})

    async def sample(self, context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        self.samples.append(params)
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="short"), model="test-model"
        )


def run_client(url: str, key: str, person: Person, scenario: Callable[[Client], Awaitable[Any]], *, mode: str = MODERN):
    async def run() -> Any:
        async with (
            create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as http,
            Client(
                streamable_http_client(f"{url}/mcp", http_client=http),
                mode=mode,
                elicitation_callback=person.elicit,
                sampling_callback=person.sample,
            ) as client,
        ):
            return await scenario(client)

    return asyncio.run(run())


def text_of(result: types.CallToolResult) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, types.TextContent))


def outcomes(tool_id: str) -> list[str]:
    return [row.error_code or "ok" for row in ToolInvocation.objects.filter(tool_id=tool_id).order_by("started_at")]


def test_an_allowed_tools_question_reaches_the_person_and_the_answer_reaches_the_upstream(live_server, shop):
    # given: the operator allowed the order tool to ask the person
    key, _policy = shop
    mcp_tool_allow_asking(tool_id=ORDER, elicitation=True, sampling=False)
    person = Person()

    # when
    result = run_client(live_server.url, key, person, lambda c: c.call_tool(ORDER, {"item": "socks"}))

    # then: the question came once, with its hidden character written out, and the answer decided
    assert not result.is_error, text_of(result)
    assert text_of(result) == "ordered socks"
    assert [question.message for question in person.questions] == ["Order socks?[U+200B]"]
    # and each round is an audit row: the question, then the answer
    assert outcomes(ORDER) == ["input_required", "ok"]


def test_an_explicit_tool_call_id_names_the_first_round_and_later_rounds_derive_theirs(live_server, shop):
    key, _policy = shop
    mcp_tool_allow_asking(tool_id=ORDER, elicitation=True, sampling=False)
    meta = {"toolgate/tool_call_id": "order-1"}

    result = run_client(live_server.url, key, Person(), lambda c: c.call_tool(ORDER, {"item": "socks"}, meta=meta))

    assert text_of(result) == "ordered socks"
    rows = ToolInvocation.objects.filter(tool_id=ORDER).order_by("started_at")
    assert [(row.tool_call_id, row.error_code or "ok") for row in rows] == [
        ("order-1", "input_required"),
        ("order-1-r1", "ok"),
    ]


def test_a_tool_not_allowed_to_ask_never_reaches_the_callback_and_fails_cleanly(live_server, shop, upstream):
    # given: approved and on, but never allowed to ask
    key, _policy = shop
    person = Person()

    # when
    result = run_client(live_server.url, key, person, lambda c: c.call_tool(ORDER, {"item": "socks"}))

    # then: the upstream was told the client cannot answer; nobody was asked
    assert result.is_error
    assert person.questions == []
    assert outcomes(ORDER) == ["execution"]


def test_approving_a_new_definition_withdraws_the_allowance(shop):
    # given: allowed to ask for the definition in force
    mcp_tool_allow_asking(tool_id=ORDER, elicitation=True, sampling=True)
    tool = McpTool.objects.get(tool_id=ORDER)
    assert tool.asks_allowed == (True, True)

    # when: another definition is approved (here: the same row with a new approved hash)
    McpTool.objects.filter(pk=tool.pk).update(approved_hash="0" * 64)

    # then
    assert McpTool.objects.get(pk=tool.pk).asks_allowed == (False, False)
    assert Change.objects.filter(action="tool.allow_asking").count() == 1


def test_sampling_is_refused_by_default_and_passes_when_the_policy_allows_it(live_server, shop):
    key, policy = shop
    mcp_tool_allow_asking(tool_id=SUMMARISE, elicitation=False, sampling=True)
    person = Person()

    # when: the caller's policy passes no sampling
    refused = run_client(live_server.url, key, person, lambda c: c.call_tool(SUMMARISE, {"text": "long"}))

    # then: refused before the client's model was asked
    assert refused.is_error
    assert "allows no sampling" in text_of(refused)
    assert person.samples == []
    assert outcomes(SUMMARISE) == ["policy_denied"]

    # when: the policy passes one sampling request per call
    policy.max_samples_per_call = 1
    policy.save()
    result = run_client(live_server.url, key, person, lambda c: c.call_tool(SUMMARISE, {"text": "long"}))

    # then
    assert text_of(result) == "summary: short"
    assert [sample.messages[0].content.text for sample in person.samples] == ["Summarise: long"]
    assert outcomes(SUMMARISE) == ["policy_denied", "input_required", "ok"]


def test_a_forged_or_replayed_state_and_unasked_answers_run_nothing(live_server, shop, upstream):
    key, _policy = shop
    mcp_tool_allow_asking(tool_id=ORDER, elicitation=True, sampling=False)
    answer = {"ask": {"action": "accept", "content": {"confirm": True}}}

    async def scenario(client: Client) -> tuple[Any, ...]:
        async def retry(item: str, answers: Any, state: str) -> Any:
            return await client.session.call_tool(
                ORDER, {"item": item}, input_responses=answers, request_state=state, allow_input_required=True
            )

        first = await client.session.call_tool(ORDER, {"item": "socks"}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        (asked,) = first.input_requests
        forged = await retry("socks", answer, "Zm9yZ2Vk")
        wrong_keys = await retry("socks", answer, first.request_state)
        right = {asked: types.ElicitResult(action="accept", content={"confirm": True})}
        other_args = await retry("boots", right, first.request_state)
        calls_before = upstream.calls("order")
        done = await retry("socks", right, first.request_state)
        replayed = await retry("socks", right, first.request_state)
        return forged, wrong_keys, other_args, calls_before, done, replayed

    forged, wrong_keys, other_args, calls_before, done, replayed = run_client(live_server.url, key, Person(), scenario)

    assert forged.is_error
    assert "requestState" in text_of(forged)
    assert wrong_keys.is_error
    assert "inputResponses" in text_of(wrong_keys)
    assert other_args.is_error  # another call's arguments: the state does not open for it
    assert text_of(done) == "ordered socks"
    assert upstream.calls("order") == calls_before + 1
    assert replayed.is_error  # single use
    assert "requestState" in text_of(replayed)
    assert upstream.calls("order") == calls_before + 1


def test_a_2025_era_client_is_asked_on_the_calls_stream_and_its_answer_reaches_the_upstream(live_server, shop):
    # given: a handshake-era client (no InputRequiredResult): it declared forms and sampling at initialize
    key, policy = shop
    mcp_tool_allow_asking(tool_id=ORDER, elicitation=True, sampling=True)
    mcp_tool_allow_asking(tool_id=SUMMARISE, elicitation=False, sampling=True)
    policy.max_samples_per_call = 1
    policy.save()
    person = Person(confirm=False)

    # when
    async def scenario(client: Client) -> tuple[types.CallToolResult, types.CallToolResult]:
        return await client.call_tool(ORDER, {"item": "socks"}), await client.call_tool(SUMMARISE, {"text": "long"})

    ordered, summary = run_client(live_server.url, key, person, scenario, mode="legacy")

    # then: the questions came as requests on each call's stream, and their answers decided
    assert text_of(ordered) == "kept socks"
    assert text_of(summary) == "summary: short"
    assert [question.message for question in person.questions] == ["Order socks?[U+200B]"]
    assert len(person.samples) == 1
    assert outcomes(ORDER) == ["input_required", "ok"]
    assert outcomes(SUMMARISE) == ["input_required", "ok"]


def test_an_answer_for_a_question_never_asked_or_asked_of_another_caller_is_refused(live_server, shop):
    key, _policy = shop
    tenant_key = service_account_with_key(TenantFactory(slug="other"), name="intruder")[1]
    question_id = question_open(caller_key="someone-else")
    answer = {"jsonrpc": "2.0", "id": question_id, "result": {"action": "accept", "content": {"confirm": True}}}
    unknown = {**answer, "id": "toolgate-q-never-asked"}

    for caller, message in ((key, answer), (tenant_key, answer), (key, unknown)):
        response = httpx.post(
            f"{live_server.url}/mcp",
            json=message,
            headers={"Authorization": f"Bearer {caller}", "Accept": "application/json, text/event-stream"},
        )
        assert response.status_code == 400
        assert response.json()["error"]["code"] == -32600

    with pytest.raises(AskUnanswered, match="did not answer"):
        answer_await(question_id, gone=lambda: False, wait_s=0.2)


@pytest.fixture
def legacy_shop(settings) -> Iterator[str]:
    """A handshake-era upstream whose order tool asks on the call's own stream (allowed to ask); the key."""
    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = True
    tenant = TenantFactory(slug="acme")
    _account, key = service_account_with_key(tenant, name="agent")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["mcp__shop__*"])
    with McpUpstream(legacy=True, json_response=False) as legacy:
        legacy.server.add_tool(order, structured_output=False)
        server, _ = mcp_server_register(slug="shop", url=legacy.url)
        mcp_server_discover(server_id=server.pk)
        mcp_tool_approve(tool_id=ORDER, via="test")
        tool_set_enabled(tool_ids=[ORDER], enabled=True)
        mcp_tool_allow_asking(tool_id=ORDER, elicitation=True, sampling=False)
        yield key


def test_a_2025_era_client_answers_a_2025_era_upstream_asking_mid_call(live_server, legacy_shop):
    person = Person()

    result = run_client(
        live_server.url, legacy_shop, person, lambda c: c.call_tool(ORDER, {"item": "socks"}), mode="legacy"
    )

    # one call, one row; the question went through Toolgate while the upstream waited on its stream
    assert text_of(result) == "ordered socks"
    assert [question.message for question in person.questions] == ["Order socks?[U+200B]"]
    assert outcomes(ORDER) == ["ok"]


def test_only_an_approved_definition_can_be_allowed_to_ask(upstream):
    server, _ = mcp_server_register(slug="shop", url=upstream.url)
    mcp_server_discover(server_id=server.pk)

    with pytest.raises(AppError, match="approve its definition first"):
        mcp_tool_allow_asking(tool_id=ORDER, elicitation=True, sampling=False)

    assert McpTool.objects.get(tool_id=ORDER).asks_allowed == (False, False)
    assert not Change.objects.filter(action="tool.allow_asking").exists()


def test_the_policy_file_carries_the_sampling_cap_only_when_set(shop):
    _key, policy = shop
    assert "max_samples_per_call" not in policy_export()["policies"][0]

    policy.max_samples_per_call = 2
    policy.save()
    document = policy_export()
    assert document["policies"][0]["max_samples_per_call"] == 2

    ToolPolicy.objects.filter(pk=policy.pk).update(max_samples_per_call=None)
    policy_import(document=document)
    assert ToolPolicy.objects.get(pk=policy.pk).max_samples_per_call == 2
