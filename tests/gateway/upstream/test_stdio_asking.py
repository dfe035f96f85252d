"""A stdio child asking the client mid-call (elicitation, sampling), through the MCP host and /mcp, governed.

Real parts: the MCP host under uvicorn on loopback (one for the module, its child kept across
tests), a 2025-era stdio server built with the official SDK that asks on stdio while its tool
waits (tests/support/stdio_asking_server.py), Toolgate's /mcp on Django's live server, and the
SDK's `Client` with real callbacks in both eras. The host holds the child's waiting call and
answers the worker an InputRequiredResult; the worker treats it as any 2026-07-28 upstream's round.
"""

from __future__ import annotations

import asyncio
import io
import shlex
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from django.core.management import call_command
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from gateway.models import McpServer
from gateway.upstream.services import mcp_server_discover, mcp_tool_allow_asking, mcp_tool_approve
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tools_app.models import ToolInvocation
from tools_app.services import tool_set_enabled

SCRIPT = Path(__file__).resolve().parents[2] / "support" / "stdio_asking_server.py"
COMMAND = f"{shlex.quote(sys.executable)} {shlex.quote(str(SCRIPT))}"
SECRET = "sk-asking-5e4d3c2b1a0f9e8d7c6b"
ORDER = "mcp__ask__order"
SUMMARISE = "mcp__ask__summarise"
REVEAL = "mcp__ask__reveal"
MODERN = "2026-07-28"


@pytest.fixture
def shop(host, settings, transactional_db, monkeypatch) -> tuple[str, Any]:
    """The caller's key and policy; the asking server registered, its tools approved and on (none may ask yet)."""
    settings.TOOLGATE_MCP_HOST_URL, settings.TOOLGATE_MCP_HOST_TOKEN = host.url, host.token
    settings.TOOLGATE_MCP_HOST_SANDBOX = "none"
    settings.TOOLGATE_MCP_CHILD_MEMORY_MB = 4096
    monkeypatch.setenv("ASKING_SOURCE", SECRET)
    tenant = TenantFactory(slug="acme-co")
    _account, key = service_account_with_key(tenant, name="agent")
    policy = ToolPolicyFactory(tenant=tenant, allowed_tools=["mcp__ask__*"])
    call_command(
        "mcp_upstream",
        "add",
        "ask",
        "--command",
        COMMAND,
        "--secret-env",
        "ASKING_TOKEN=ASKING_SOURCE",
        stdout=io.StringIO(),
    )
    report = mcp_server_discover(server_id=McpServer.objects.get(slug="ask").pk)
    for tool_id in report.new:
        mcp_tool_approve(tool_id=tool_id, via="test")
    tool_set_enabled(tool_ids=list(report.new), enabled=True)
    return key, policy


class Person:
    """The client's side: what its callbacks were asked, and what they answer."""

    def __init__(self, *, confirm: bool = True) -> None:
        self.confirm = confirm
        self.questions: list[str] = []
        self.samples: list[str] = []

    async def elicit(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.questions.append(params.message)
        return types.ElicitResult(action="accept", content={"confirm": self.confirm})

    async def sample(self, context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        content = params.messages[0].content
        self.samples.append(content.text if isinstance(content, types.TextContent) else "?")
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="short"), model="test-model"
        )


def run_client(
    url: str, key: str, person: Person, scenario: Callable[[Client], Awaitable[Any]], *, mode: str = MODERN
) -> Any:
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


def test_a_stdio_childs_question_reaches_a_client_of_either_era_and_the_answer_reaches_the_child(
    live_server, shop, host
):
    # given: the operator allowed the order tool to ask the person
    key, _policy = shop
    mcp_tool_allow_asking(tool_id=ORDER, elicitation=True, sampling=False)
    person, streaming = Person(), Person(confirm=False)

    # when: a 2026-07-28 client (rounds), then a 2025-11-25 one (the question on its call's stream)
    result = run_client(live_server.url, key, person, lambda c: c.call_tool(ORDER, {"item": "socks"}))
    kept = run_client(live_server.url, key, streaming, lambda c: c.call_tool(ORDER, {"item": "boots"}), mode="legacy")

    # then: each was asked once; the child got each answer ("ordered" only on a confirmed accept)
    assert not result.is_error, text_of(result)
    assert text_of(result) == "ordered socks"
    assert person.questions == ["Order socks?"]
    assert text_of(kept) == "kept boots (accept)"
    assert streaming.questions == ["Order boots?"]
    # and each round is an audit row: the question, then the answer; nothing stays held in the host
    assert outcomes(ORDER) == ["input_required", "ok", "input_required", "ok"]
    assert [child.busy for child in host.children()] == [0]


def test_sampling_is_refused_by_default_and_passes_under_the_policys_cap(live_server, shop):
    key, policy = shop
    mcp_tool_allow_asking(tool_id=SUMMARISE, elicitation=False, sampling=True)
    person = Person()

    # when: the caller's policy passes no sampling
    refused = run_client(live_server.url, key, person, lambda c: c.call_tool(SUMMARISE, {"text": "long"}))

    # then: the child was told no at once, the client's model was never asked, and the message says why
    assert refused.is_error
    assert "the stdio server asked the client's model to sample, which this call may not ask" in text_of(refused)
    assert "policy allows no more sampling" in text_of(refused)
    assert person.samples == []
    assert outcomes(SUMMARISE) == ["tool_error"]

    # when: the policy passes one sampling request per call
    policy.max_samples_per_call = 1
    policy.save()
    result = run_client(live_server.url, key, person, lambda c: c.call_tool(SUMMARISE, {"text": "long"}))

    # then
    assert text_of(result) == "summary: short"
    assert person.samples == ["Summarise: long"]
    assert outcomes(SUMMARISE) == ["tool_error", "input_required", "ok"]


def test_a_question_the_call_may_not_ask_or_holding_a_declared_secret_is_refused_and_the_call_says_why(
    live_server, shop
):
    # given: the order tool approved and on, never allowed to ask; reveal allowed, its question holds a secret
    key, _policy = shop
    mcp_tool_allow_asking(tool_id=REVEAL, elicitation=True, sampling=False)
    person = Person()

    # when: the client could answer either
    not_allowed = run_client(live_server.url, key, person, lambda c: c.call_tool(ORDER, {"item": "socks"}))
    revealing = run_client(live_server.url, key, person, lambda c: c.call_tool(REVEAL, {"name": "ASKING_TOKEN"}))

    # then: nobody was asked, and each call failed saying why, without the secret
    assert person.questions == []
    assert not_allowed.is_error
    assert text_of(not_allowed) == (
        "upstream MCP server: the stdio server asked the person a question (elicitation), which this call may "
        "not ask (the tool is not allowed to, the client cannot answer, or the caller's policy allows no more "
        "sampling)"
    )
    assert revealing.is_error
    assert text_of(revealing) == (
        "upstream MCP server: the stdio server's question carries a declared secret; it was not passed on"
    )
    assert (outcomes(ORDER), outcomes(REVEAL)) == (["tool_error"], ["tool_error"])
