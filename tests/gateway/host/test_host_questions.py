"""The host's held calls, seen from the worker's side of the host: the SDK's client on the host's endpoint.

A 2025-era stdio child (tests/support/stdio_asking_server.py) asks mid-call; the host answers the
2026-07-28 `tools/call` with an InputRequiredResult naming the held call. What is checked: the
state is good once, for the same call only; a held call nobody resumes is answered "decline" to
the child after the hold, its call ends, and its state is forgotten; a 2026-07-28 child's own
InputRequiredResult is handed on as a round of the host's.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from django.test import override_settings
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from gateway.host.questions import HELD_STATE_PREFIX, QUESTION_KEY
from gateway.host.serve import host_config
from gateway.host.spec import ServerConfig, encode_spec
from tests.support.mcp_host import McpHostThread

SCRIPT = Path(__file__).resolve().parents[2] / "support" / "stdio_asking_server.py"
SPEC = encode_spec(
    ServerConfig(slug="ask", command=(sys.executable, str(SCRIPT)), env=(), secrets=(), provider="", credential_env="")
)
YES = types.ElicitResult(action="accept", content={"confirm": True})


def _host(root: Path, **options: Any) -> McpHostThread:
    with override_settings(TOOLGATE_MCP_CHILD_MEMORY_MB=4096):
        config = host_config(sandbox="none", root=root, sweep_s=0.2)
    return McpHostThread(replace(config, **options))


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> Iterator[McpHostThread]:
    with _host(tmp_path_factory.mktemp("mcp_host")) as running:
        yield running


async def _never_asked(context: Any, params: Any) -> types.ElicitResult:
    raise AssertionError("the worker's client answers nothing itself: the rounds are driven by hand")


def on_host(host: McpHostThread, scenario: Callable[[Client], Awaitable[Any]], *, spec: str = SPEC) -> Any:
    """The scenario on a 2026-07-28 client of the host that declares elicitation (as the worker's call_asking does)."""

    async def run() -> Any:
        headers = {"Authorization": f"Bearer {host.token}", "X-Toolgate-Spec": spec}
        async with (
            create_mcp_http_client(headers=headers) as http,
            Client(
                streamable_http_client(f"{host.url}/servers/ask/mcp", http_client=http),
                mode="2026-07-28",
                elicitation_callback=_never_asked,
            ) as client,
        ):
            return await scenario(client)

    return asyncio.run(run())


async def order(client: Client, item: str, *, answers: Any = None, state: str | None = None) -> Any:
    return await client.session.call_tool(
        "order", {"item": item}, input_responses=answers, request_state=state, allow_input_required=True
    )


def test_a_held_calls_state_is_good_once_and_only_for_the_call_that_asked(host):
    async def scenario(client: Client) -> tuple[Any, ...]:
        first = await order(client, "socks")
        assert isinstance(first, types.InputRequiredResult)
        other_arguments = await _refused(order(client, "boots", answers={QUESTION_KEY: YES}, state=first.request_state))
        forged = await _refused(order(client, "socks", answers={QUESTION_KEY: YES}, state=f"{HELD_STATE_PREFIX}x"))
        no_answer = await _refused(order(client, "socks", answers={"other": YES}, state=first.request_state))
        done = await order(client, "socks", answers={QUESTION_KEY: YES}, state=first.request_state)
        replayed = await _refused(order(client, "socks", answers={QUESTION_KEY: YES}, state=first.request_state))
        return first, other_arguments, forged, no_answer, done, replayed

    first, other_arguments, forged, no_answer, done, replayed = on_host(host, scenario)

    (request,) = first.input_requests.values()
    assert isinstance(request, types.ElicitRequest)
    assert request.params.message == "Order socks?"
    assert first.request_state.startswith(HELD_STATE_PREFIX)
    assert "requestState is not valid" in other_arguments
    assert "requestState is not valid" in forged
    assert "do not answer the question" in no_answer  # and the state stays good for a corrected retry
    assert isinstance(done, types.CallToolResult)
    assert [block.text for block in done.content] == ["ordered socks"]
    assert "requestState is not valid" in replayed
    assert [child.busy for child in host.children()] == [0]


def test_a_held_call_nobody_resumes_is_declined_to_the_child_and_forgotten(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="toolgate.mcp_host.stderr")
    with _host(tmp_path / "mcp_host", hold_s=0.3) as short:

        async def scenario(client: Client) -> tuple[Any, str]:
            first = await order(client, "socks")
            assert isinstance(first, types.InputRequiredResult)
            await asyncio.to_thread(short.wait_for, lambda: "order socks answered decline" in caplog.text)
            await asyncio.to_thread(short.wait_for, lambda: [child.busy for child in short.children()] == [0])
            late = await _refused(order(client, "socks", answers={QUESTION_KEY: YES}, state=first.request_state))
            return first, late

        _first, late = on_host(short, scenario)

    assert "requestState is not valid" in late


async def _refused(call: Awaitable[Any]) -> str:
    with pytest.raises(MCPError) as refused:
        await call
    return refused.value.error.message


def test_a_2026_child_asking_with_an_input_required_result_of_its_own_is_handed_on_the_same_way(host):
    modern = encode_spec(
        ServerConfig(
            slug="ask",
            command=(sys.executable, str(SCRIPT), "--modern"),
            env=(),
            secrets=(),
            provider="",
            credential_env="",
        )
    )

    async def scenario(client: Client) -> tuple[Any, Any]:
        first = await client.session.call_tool("book", {"item": "socks"}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        done = await client.session.call_tool(
            "book",
            {"item": "socks"},
            input_responses={QUESTION_KEY: YES},
            request_state=first.request_state,
            allow_input_required=True,
        )
        return first, done

    first, done = on_host(host, scenario, spec=modern)

    (request,) = first.input_requests.values()
    assert request.params.message == "Book socks?"
    assert first.request_state.startswith(HELD_STATE_PREFIX)  # the host's own state, not the child's
    assert [block.text for block in done.content] == ["booked socks"]
