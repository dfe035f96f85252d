"""Progress and cancellation through /mcp: a live SDK upstream that streams, the SDK client in both eras.

The upstream is the SDK's MCPServer answering event streams (`json_response=False`),
a 2025-11-25 one with sessions and a stateless 2026-07-28 one; the client is the
official SDK 2.x in `legacy` and `2026-07-28` mode against the live server.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import Context
from mcp.shared._httpx_utils import create_mcp_http_client

from gateway.inflight import cancel_file, cancel_filed
from gateway.upstream.services import mcp_server_discover, mcp_server_register, mcp_tool_approve
from policies_app.models import ServiceAccount, ToolPolicy
from runner.progress import DEFAULT_MAX_EVENTS
from runner.types import Decision
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.mcp_upstream import McpUpstream
from tools_app.models import ToolInvocation
from tools_app.services import tool_set_enabled

TOOLS = ("mcp__up__count", "mcp__up__hang", "mcp__up__flood", "mcp__up__endless")
MODES = {"legacy": "legacy", "modern": "2026-07-28"}


class Upstream(McpUpstream):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hang_started = threading.Event()
        self.hang_cancelled = threading.Event()


def install(upstream: Upstream) -> None:
    async def count(steps: int, ctx: Context) -> str:
        """Report `steps` progress events, then answer."""
        for step in range(1, steps + 1):
            hidden = "\u200b" if step == steps else ""  # a zero-width space: upstream text is untrusted
            await ctx.report_progress(step, steps, f"step {step}{hidden}")
            await asyncio.sleep(0.05)
        return f"counted {steps}"

    async def hang(ctx: Context) -> str:
        """Report once, then wait until cancelled."""
        await ctx.report_progress(1, None, "started")
        upstream.hang_started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            upstream.hang_cancelled.set()
            raise
        return "never"

    async def flood(events: int, ctx: Context) -> str:
        """Report `events` progress events as fast as it can."""
        for event in range(events):
            await ctx.report_progress(event, events)
        return "flooded"

    async def endless(ctx: Context) -> str:
        """Report progress forever: its event stream never carries a result."""
        step = 0
        while True:
            step += 1
            await ctx.report_progress(step, None, "still going")
            await asyncio.sleep(0.05)

    for fn in (count, hang, flood, endless):
        upstream.server.add_tool(fn, structured_output=False)


@pytest.fixture(params=["legacy", "modern"])
def era(request) -> str:
    return request.param


@pytest.fixture
def upstream(era) -> Iterator[Upstream]:
    with Upstream(legacy=era == "legacy", json_response=False) as server:
        install(server)
        yield server


@pytest.fixture
def key(settings, upstream):
    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = True
    tenant = TenantFactory(slug="acme")
    _account, key = service_account_with_key(tenant, name="agent")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["mcp__up__*"])
    server, _ = mcp_server_register(slug="up", url=upstream.url)
    mcp_server_discover(server_id=server.pk)
    for tool_id in TOOLS:
        mcp_tool_approve(tool_id=tool_id, via="test")
    tool_set_enabled(tool_ids=list(TOOLS), enabled=True)
    return key


def client_run(url: str, key: str, mode: str, scenario: Any) -> Any:
    async def run() -> Any:
        async with (
            create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http), mode=mode) as client,
        ):
            return await scenario(client)

    return asyncio.run(run())


def rows(tool_id: str) -> list[ToolInvocation]:
    return list(ToolInvocation.objects.filter(tool_id=tool_id))


@pytest.mark.django_db(transaction=True)
def test_progress_events_arrive_before_the_result_re_keyed_to_the_clients_token(live_server, key, era):
    seen: list[tuple[float, str | None, float]] = []

    async def scenario(client: Client) -> Any:
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append((progress, message, time.monotonic()))

        result = await client.call_tool("mcp__up__count", {"steps": 3}, progress_callback=on_progress)
        return result, time.monotonic()

    result, answered_at = client_run(live_server.url, key, MODES[era], scenario)

    assert result.is_error is False
    assert result.content[0].text == "counted 3"
    expected = [(1, "step 1"), (2, "step 2"), (3, "step 3[U+200B]")]
    assert [(progress, message) for progress, message, _ in seen] == expected
    assert all(at <= answered_at for _, _, at in seen)
    assert seen[0][2] < answered_at - 0.05  # the first came while the tool still ran, not with the answer
    (row,) = rows("mcp__up__count")
    assert row.ok
    assert row.state == ToolInvocation.State.DONE


@pytest.mark.django_db(transaction=True)
def test_a_cancel_mid_call_stops_the_upstream_and_leaves_one_cancelled_row(live_server, key, upstream, era):
    async def scenario(client: Client) -> None:
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            pass

        call = asyncio.ensure_future(client.call_tool("mcp__up__hang", {}, progress_callback=on_progress))
        while not upstream.hang_started.is_set():
            await asyncio.sleep(0.02)
        call.cancel()  # the SDK sends notifications/cancelled for it and leaves the stream
        with pytest.raises(asyncio.CancelledError):
            await call
        await asyncio.sleep(0.5)  # the SDK posts its notifications/cancelled in the background

    client_run(live_server.url, key, MODES[era], scenario)

    assert upstream.hang_cancelled.wait(10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(row.error_code for row in rows("mcp__up__hang")):
        time.sleep(0.05)
    (row,) = rows("mcp__up__hang")
    assert (row.state, row.ok, row.error_code) == (ToolInvocation.State.DONE, False, "cancelled")


@pytest.mark.django_db(transaction=True)
def test_an_event_flood_is_cut_at_the_cap_and_the_result_still_arrives(live_server, key, era):
    seen: list[float] = []

    async def scenario(client: Client) -> Any:
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(progress)

        return await client.call_tool("mcp__up__flood", {"events": 1000}, progress_callback=on_progress)

    result = client_run(live_server.url, key, MODES[era], scenario)

    assert result.content[0].text == "flooded"
    assert len(seen) == DEFAULT_MAX_EVENTS
    assert seen == sorted(seen)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "json"])
def test_a_stream_that_never_ends_is_cut_at_the_runtime_budget_with_one_row(live_server, key, era, streamed):
    ToolPolicy.objects.update(max_runtime_ms=1500)
    seen: list[float] = []

    async def scenario(client: Client) -> Any:
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(progress)

        return await client.call_tool("mcp__up__endless", {}, progress_callback=on_progress if streamed else None)

    started = time.monotonic()
    result = client_run(live_server.url, key, MODES[era], scenario)
    took = time.monotonic() - started

    assert result.is_error is True
    assert result.content[0].text == "timeout: the tool ran past its 1500 ms budget"
    assert 1.5 <= took < 8
    assert bool(seen) is streamed  # a streamed call showed the upstream's progress until the cut
    (row,) = rows("mcp__up__endless")
    assert (row.ok, row.error_code, row.state) == (False, "timeout", ToolInvocation.State.DONE)


@pytest.mark.django_db(transaction=True)
def test_a_client_that_accepts_only_json_or_sends_no_token_gets_the_json_answer(live_server, key, era):
    def post(accept: str, meta: dict[str, Any]) -> httpx.Response:
        message = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "mcp__up__count", "arguments": {"steps": 2}, "_meta": meta},
        }
        headers = {"Authorization": f"Bearer {key}", "Accept": accept, "MCP-Protocol-Version": "2025-11-25"}
        return httpx.post(f"{live_server.url}/mcp", json=message, headers=headers, timeout=10)

    json_only = post("application/json", {"progressToken": "p1"})
    no_token = post("application/json, text/event-stream", {})
    streamed = post("application/json, text/event-stream", {"progressToken": "p1"})

    for answer in (json_only, no_token):
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("application/json")
        assert answer.json()["result"]["content"][0]["text"] == "counted 2"
    assert streamed.headers["content-type"].startswith("text/event-stream")
    messages = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: ")]
    assert [m.get("method") for m in messages] == ["notifications/progress"] * 2 + [None]
    assert {m["params"]["progressToken"] for m in messages[:2]} == {"p1"}
    assert messages[-1]["id"] == 7
    assert messages[-1]["result"]["content"][0]["text"] == "counted 2"


@pytest.mark.django_db(transaction=True)
def test_a_dropped_stream_cancels_the_upstream_call_and_the_row_says_so(live_server, key, upstream, era):
    message = {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "tools/call",
        "params": {
            "name": "mcp__up__hang",
            "arguments": {},
            "_meta": {"progressToken": 1, "toolgate/tool_call_id": "hang-once"},
        },
    }
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    with httpx.stream("POST", f"{live_server.url}/mcp", json=message, headers=headers, timeout=10) as answer:
        first = next(answer.iter_lines())
        assert first == "event: message"
        assert upstream.hang_started.wait(5)
    # leaving the block closed the connection mid-call

    assert upstream.hang_cancelled.wait(10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(row.error_code for row in rows("mcp__up__hang")):
        time.sleep(0.05)
    (row,) = rows("mcp__up__hang")
    assert row.error_code == "cancelled"

    repeat = httpx.post(f"{live_server.url}/mcp", json=message, headers=headers, timeout=10)
    (answer,) = [json.loads(line[6:]) for line in repeat.text.splitlines() if line.startswith("data: ")]
    assert answer["result"]["isError"] is True
    assert "cancelled" in answer["result"]["content"][0]["text"]
    assert upstream.calls("hang") == 1  # the repeat answered the recorded outcome; nothing ran again
    decisions = sorted(row.decision for row in rows("mcp__up__hang"))
    assert decisions == [Decision.ALLOW.value, Decision.REPLAYED.value]  # one run, one audited replay of it


@pytest.mark.django_db(transaction=True)
def test_a_cancel_filed_by_another_worker_stops_the_call_on_the_stream_that_holds_it(live_server, key, upstream, era):
    # given: a streamed call in flight on this worker
    message = {
        "jsonrpc": "2.0",
        "id": "call-7",
        "method": "tools/call",
        "params": {"name": "mcp__up__hang", "arguments": {}, "_meta": {"progressToken": 1}},
    }
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    caller_key = str(ServiceAccount.objects.get(name="agent").pk)
    with httpx.stream("POST", f"{live_server.url}/mcp", json=message, headers=headers, timeout=10) as answer:
        lines = answer.iter_lines()
        assert next(lines) == "event: message"
        assert upstream.hang_started.wait(5)

        # when: its notifications/cancelled reached another worker, which filed it (as cancel_in_flight does)
        cancel_file(caller_key, "call-7")
        cancel_file("another-caller", "call-7")  # noise: nobody else's cancellation is ours
        events = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]

    # then: the holding worker cancelled the upstream call and answered on the still-open stream
    assert upstream.hang_cancelled.wait(10)
    assert events[-1]["id"] == "call-7"
    assert events[-1]["result"]["isError"] is True
    (row,) = rows("mcp__up__hang")
    assert row.error_code == "cancelled"


@pytest.mark.django_db
def test_only_the_callers_own_request_id_is_cancelled():
    cancel_file("caller-a", 5)

    assert cancel_filed("caller-a", 5)
    assert not cancel_filed("caller-b", 5)
    assert not cancel_filed("caller-a", "5")  # ids keep their JSON type
