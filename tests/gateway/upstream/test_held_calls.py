"""A 2025-11-25 upstream that asks mid-call, behind a 2026-07-28 client: the call held across the client's retry.

The upstream is the SDK's MCPServer in the handshake era (sessions, event streams), whose tools
ask on the call's own stream and wait; the client is the SDK's `Client` in 2026-07-28 mode with
real callbacks, through /mcp on live servers. What is checked: the question reaches the client as
a round and its answer reaches the waiting upstream call (called once), from whichever web worker
the retry reaches; sampling is refused unless the caller's policy allows it; a question nobody
answers cancels the upstream call at the end of the wait; a forged, replayed, other caller's or
dead state runs nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.server.mcpserver import Elicit, Resolve
from pytest_django.live_server_helper import LiveServer

from gateway.upstream import held
from gateway.upstream.services import (
    mcp_server_discover,
    mcp_server_register,
    mcp_tool_allow_asking,
    mcp_tool_approve,
)
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.gateway.upstream.test_asking import (
    ORDER,
    SUMMARISE,
    Choice,
    Person,
    ask_confirm,
    order,
    outcomes,
    run_client,
    summarise,
    text_of,
)
from tests.support.mcp_upstream import McpUpstream
from tools_app.services import tool_set_enabled

pytestmark = pytest.mark.django_db(transaction=True)

CONFIRM = {held.HELD_ASK_KEY: types.ElicitResult(action="accept", content={"confirm": True})}
SLOW_ORDER = "mcp__shop__slow_order"
WORDY_ORDER = "mcp__shop__wordy_order"


async def slow_order(item: str, choice: Annotated[Choice, Resolve(ask_confirm)]) -> str:
    """Order an item once the person confirms, then take longer than any caller waits."""
    await asyncio.sleep(30)
    return f"ordered {item}"


async def ask_at_length(item: str) -> Elicit[Choice]:
    return Elicit(f"Order {item}?" + " Really?" * 9000, Choice)  # past the 64 KiB a round may carry


async def wordy_order(item: str, choice: Annotated[Choice, Resolve(ask_at_length)]) -> str:
    """Order an item once the person has read a very long question."""
    return f"ordered {item}"


@pytest.fixture(scope="module")
def legacy_upstream() -> Iterator[McpUpstream]:
    """A handshake-era upstream whose tools ask on the call's own stream and wait for the answer there."""
    with McpUpstream(legacy=True, json_response=False) as upstream:
        upstream.server.add_tool(order, structured_output=False)
        upstream.server.add_tool(summarise, structured_output=False)
        upstream.server.add_tool(slow_order, structured_output=False)
        upstream.server.add_tool(wordy_order, structured_output=False)
        yield upstream


@pytest.fixture(scope="module")
def other_worker(django_db_setup, django_db_blocker) -> Iterator[str]:
    """A second web worker on the same database and cache: the retry of a held call may reach it."""
    with django_db_blocker.unblock():
        server = LiveServer("localhost")
    server._live_server_modified_settings.enable()  # its host is allowed, as pytest-django does for its own
    yield server.url
    server._live_server_modified_settings.disable()
    server.stop()


@pytest.fixture
def shop(settings, legacy_upstream) -> tuple[str, Any]:
    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = True
    legacy_upstream.clear()
    tenant = TenantFactory(slug="acme")
    _account, key = service_account_with_key(tenant, name="agent")
    policy = ToolPolicyFactory(tenant=tenant, allowed_tools=["mcp__shop__*"])
    server, _ = mcp_server_register(slug="shop", url=legacy_upstream.url)
    mcp_server_discover(server_id=server.pk)
    for tool_id in (ORDER, SUMMARISE, SLOW_ORDER, WORDY_ORDER):
        mcp_tool_approve(tool_id=tool_id, via="test")
    tool_set_enabled(tool_ids=[ORDER, SUMMARISE, SLOW_ORDER, WORDY_ORDER], enabled=True)
    for tool_id in (ORDER, SLOW_ORDER, WORDY_ORDER):
        mcp_tool_allow_asking(tool_id=tool_id, elicitation=True, sampling=False)
    mcp_tool_allow_asking(tool_id=SUMMARISE, elicitation=False, sampling=True)
    return key, policy


def rounds(url: str, key: str, scenario: Callable[[Client], Any]) -> Any:
    """A 2026-07-28 client driving its rounds by hand (`allow_input_required`), against `url`."""
    return run_client(url, key, Person(), scenario)


def first_round(tool: str = ORDER) -> Callable[[Client], Any]:
    async def scenario(client: Client) -> Any:
        return await client.session.call_tool(tool, {"item": "socks"}, allow_input_required=True)

    return scenario


def retry(state: str, answers: Any, tool: str = ORDER) -> Callable[[Client], Any]:
    async def scenario(client: Client) -> Any:
        return await client.session.call_tool(
            tool, {"item": "socks"}, input_responses=answers, request_state=state, allow_input_required=True
        )

    return scenario


def cancellations(upstream: McpUpstream) -> int:
    return sum(1 for request in upstream.requests if request.rpc_method == "notifications/cancelled")


def wait_for(condition: Callable[[], bool], *, timeout_s: float = 10) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_the_persons_answer_reaches_the_held_call_and_its_result_reaches_the_client(live_server, shop, legacy_upstream):
    key, _policy = shop
    person = Person()

    result = run_client(live_server.url, key, person, lambda c: c.call_tool(ORDER, {"item": "socks"}))

    # then: the question came once, as a round (hidden character written out), and its answer decided
    assert text_of(result) == "ordered socks"
    assert [question.message for question in person.questions] == ["Order socks?[U+200B]"]
    # the upstream was called once: the answer went to the call that waited, not to a new one
    assert legacy_upstream.calls("order") == 1
    assert outcomes(ORDER) == ["input_required", "ok"]


def test_the_retry_may_reach_another_worker_and_only_the_callers_own_state_opens_once(
    live_server, other_worker, shop, legacy_upstream
):
    key, policy = shop
    other_key = service_account_with_key(policy.tenant, name="other agent")[1]

    # when: one worker answers the first round; the retries go to the other
    first = rounds(live_server.url, key, first_round())
    assert isinstance(first, types.InputRequiredResult)
    assert set(first.input_requests) == {held.HELD_ASK_KEY}  # a key of Toolgate's own, not the upstream's
    answers = {held.HELD_ASK_KEY: types.ElicitResult(action="accept", content={"confirm": False})}
    forged = rounds(other_worker, key, retry("Zm9yZ2Vk", answers))
    other_callers = rounds(other_worker, other_key, retry(first.request_state, answers))
    done = rounds(other_worker, key, retry(first.request_state, answers))
    replayed = rounds(other_worker, key, retry(first.request_state, answers))

    # then: the held call took the answer, and its result came back through the other worker
    assert text_of(done) == "kept socks"
    # a forged, another caller's, or a spent state is refused before the runner: nothing ran
    for refused in (forged, other_callers, replayed):
        assert refused.is_error
        assert "requestState" in text_of(refused)
    assert legacy_upstream.calls("order") == 1
    assert outcomes(ORDER) == ["input_required", "ok"]


def test_sampling_past_the_policys_cap_or_an_oversized_question_is_refused_before_anyone_is_asked(live_server, shop):
    key, policy = shop
    person = Person()

    refused = run_client(live_server.url, key, person, lambda c: c.call_tool(SUMMARISE, {"text": "long"}))
    wordy = run_client(live_server.url, key, person, lambda c: c.call_tool(WORDY_ORDER, {"item": "socks"}))

    assert refused.is_error
    assert "this caller's policy allows no sampling" in text_of(refused)
    assert wordy.is_error
    assert "larger than 64 KiB" in text_of(wordy)
    assert person.samples == []
    assert person.questions == []
    assert outcomes(SUMMARISE) == ["execution"]
    assert outcomes(WORDY_ORDER) == ["execution"]

    policy.max_samples_per_call = 1
    policy.save()
    result = run_client(live_server.url, key, person, lambda c: c.call_tool(SUMMARISE, {"text": "long"}))

    assert text_of(result) == "summary: short"
    assert [sample.messages[0].content.text for sample in person.samples] == ["Summarise: long"]
    assert outcomes(SUMMARISE) == ["execution", "input_required", "ok"]
    assert wait_for(lambda: held.held_calls() == 0)  # the held call let go once it filed its result


def test_a_question_nobody_answers_cancels_the_upstream_call_after_the_wait(
    live_server, shop, legacy_upstream, monkeypatch
):
    # given: a short answer wait (300 s in service)
    key, _policy = shop
    monkeypatch.setattr(held, "ANSWER_WAIT_S", 0.3)

    # when: the client takes the round and never retries
    first = rounds(live_server.url, key, first_round())
    assert isinstance(first, types.InputRequiredResult)

    # then: the upstream is told the call is cancelled, and the worker lets the call go
    assert wait_for(lambda: cancellations(legacy_upstream) == 1)
    assert wait_for(lambda: held.held_calls() == 0)
    # and a late retry finds no held call: refused, nothing runs
    late = rounds(live_server.url, key, retry(first.request_state, CONFIRM))
    assert late.is_error
    assert "requestState" in text_of(late)
    assert legacy_upstream.calls("order") == 1
    assert outcomes(ORDER) == ["input_required"]  # refused before the runner, as any state that opens as nothing


def test_a_retry_cut_at_its_budget_stops_the_held_call_on_the_worker_holding_it(
    live_server, other_worker, shop, legacy_upstream
):
    # given: a round may take 1.5 s, and the upstream works far longer on the answer
    key, policy = shop
    policy.max_runtime_ms = 1500
    policy.save()
    first = rounds(live_server.url, key, first_round(SLOW_ORDER))
    assert isinstance(first, types.InputRequiredResult)

    # when: the retry, on the other worker, runs out of time waiting on the held call
    late = rounds(other_worker, key, retry(first.request_state, CONFIRM, SLOW_ORDER))

    # then: its round is a timeout, and the holder cancelled the upstream call on being told
    assert late.is_error
    assert outcomes(SLOW_ORDER) == ["input_required", "timeout"]
    assert wait_for(lambda: cancellations(legacy_upstream) == 1)
    assert wait_for(lambda: held.held_calls() == 0)
