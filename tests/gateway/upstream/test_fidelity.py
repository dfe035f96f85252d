"""What an upstream sent reaches agents as it was sent (docs/mcp-upstream.md, docs/api.md).

A real upstream (the SDK's MCPServer under uvicorn on loopback) answers
content blocks of every type, structured content and `isError` results; they
are read back through REST, through `/mcp` of a live Toolgate with the SDK's
own `Client`, and through `/tools/calls` in each model format (checked with
the model SDKs' own param types).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import mcp_types as types
import pytest
from anthropic.types import MessageParam
from django.test import Client as DjangoClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from openai.types.chat import ChatCompletionMessageParam
from openai.types.responses import ResponseInputItemParam
from pydantic import BaseModel, TypeAdapter

from gateway.models import McpServer, McpTool
from gateway.upstream.services import (
    mcp_server_discover,
    mcp_server_register,
    mcp_tool_approve,
    mcp_tool_set_effect,
)
from gateway.upstream.source import NUL_IN_ANSWER
from policies_app.governance import governance_bump
from policies_app.models import ToolPolicy
from runner.types import ToolEffect
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import api_client
from tests.support.mcp_upstream import McpUpstream
from tools_app.models import ToolInvocation
from tools_app.services import tool_set_enabled

pytestmark = pytest.mark.django_db(transaction=True)

OPERATOR_TOKEN = "op-token-fidelity-5d4c3b2a1f0e"
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
CHIRP = base64.b64encode(b"RIFF....WAVEfmt ").decode()

ROOT = Path(__file__).resolve().parents[3]
MCP1_PYTHON = ROOT / ".venv-mcp1" / "bin" / "python"
MCP1_CLIENT = ROOT / "tests" / "support" / "mcp1_client.py"
GALLERY: list[types.ContentBlock] = [
    types.TextContent(
        type="text", text="Here is the chart", annotations=types.Annotations(audience=["user"], priority=0.5)
    ),
    types.ImageContent(type="image", data=PIXEL, mime_type="image/png"),
    types.AudioContent(type="audio", data=CHIRP, mime_type="audio/wav"),
    types.ResourceLink(
        type="resource_link",
        uri="file:///reports/q3.csv",
        name="q3.csv",
        title="Q3 report",
        description="revenue by month",
        mime_type="text/csv",
        size=1234,
        icons=[types.Icon(src="https://example.com/csv.png", mime_type="image/png", sizes=["48x48"])],
    ),
    types.EmbeddedResource(
        type="resource",
        resource=types.TextResourceContents(uri="file:///notes.md", mime_type="text/markdown", text="# Notes"),
    ),
    types.EmbeddedResource(
        type="resource",
        resource=types.BlobResourceContents(uri="file:///logo.png", mime_type="image/png", blob=PIXEL),
    ),
]
REFUSAL: list[types.ContentBlock] = [
    types.TextContent(type="text", text="unknown city; send one of: Paris, Oslo"),
    types.ImageContent(type="image", data=PIXEL, mime_type="image/png"),
]
# What the property test's upstream answers next.
NEXT: dict[str, list[types.ContentBlock]] = {"blocks": []}


class Forecast(BaseModel):
    city: str
    celsius: float


def gallery() -> types.CallToolResult:
    """Answer one block of every type."""
    return types.CallToolResult(content=GALLERY)


def forecast(city: str) -> Annotated[types.CallToolResult, Forecast]:
    """Blocks for the model and structured content for the program."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{city}: 21.5 C"), GALLERY[1]],
        structured_content={"city": city, "celsius": 21.5},
    )


def refuse(city: str) -> types.CallToolResult:
    """An error written for the model."""
    return types.CallToolResult(content=REFUSAL, is_error=True)


def leak() -> types.CallToolResult:
    """An error that echoes the credential it was called with."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"bad token {OPERATOR_TOKEN}")], is_error=True
    )


def nul() -> types.CallToolResult:
    """Text no audit row can hold."""
    return types.CallToolResult(content=[types.TextContent(type="text", text="a\x00b")])


def echo_blocks() -> types.CallToolResult:
    """Whatever the test put in NEXT."""
    return types.CallToolResult(content=NEXT["blocks"])


def weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


TOOLS = ("gallery", "forecast", "refuse", "leak", "nul", "echo_blocks", "weather")
WEATHER_ICONS = [types.Icon(src="https://example.com/sun.png", mime_type="image/png", sizes=["48x48"])]


def sent(blocks: list[types.ContentBlock]) -> list[dict[str, Any]]:
    """The blocks as the upstream puts them on the wire."""
    return [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in blocks]


@pytest.fixture(params=["plain", "sdk"])
def upstream(request, settings) -> Iterator[McpUpstream]:
    """A stateless JSON upstream, called as plain POSTs (gateway/upstream/lean.py) or through the SDK client."""
    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = True
    settings.TOOLGATE_MCP_PLAIN_JSON_CALLS = request.param == "plain"
    with McpUpstream(legacy=False) as server:
        app = server.server
        for fn in (gallery, forecast, refuse, leak, nul, echo_blocks):
            app.add_tool(fn, structured_output=None if fn is forecast else False)
        app.add_tool(
            weather,
            title="Weather now",
            annotations=types.ToolAnnotations(readOnlyHint=True, idempotentHint=True, destructiveHint=False),
            icons=WEATHER_ICONS,
        )
        yield server


@pytest.fixture
def key(upstream, settings) -> str:
    """A caller of every test tool; on the plain path the pooled session is warm (see the end)."""
    tenant = TenantFactory(slug="acme-co")
    _account, clear_key = service_account_with_key(tenant, name="agent")
    ToolPolicyFactory(tenant=tenant, allowed_tools=[f"mcp__acme__{name}" for name in TOOLS])
    server, _ = mcp_server_register(slug="acme", url=upstream.url, operator_token=OPERATOR_TOKEN)
    mcp_server_discover(server_id=server.pk)
    tool_ids = [f"mcp__acme__{name}" for name in TOOLS]
    for tool_id in tool_ids:
        mcp_tool_approve(tool_id=tool_id, via="test")
    tool_set_enabled(tool_ids=tool_ids, enabled=True)
    if settings.TOOLGATE_MCP_PLAIN_JSON_CALLS:
        # One call opens the pooled session on the loop; the tests' calls are then made on the
        # caller's thread (the runner's fast path), as nearly every call of a running server is.
        assert exec_rest(clear_key, "weather", {"city": "Oslo"}).status_code == 200
        upstream.clear()
    return clear_key


def exec_rest(key: str, name: str, args: dict[str, Any] | None = None, **extra: Any) -> Any:
    return api_client(key).post(
        "/api/v1/tools/exec", {"tool_id": f"mcp__acme__{name}", "args": args or {}, **extra}, format="json"
    )


def mcp_call(url: str, key: str, name: str, args: dict[str, Any] | None = None) -> types.CallToolResult:
    async def run() -> types.CallToolResult:
        async with (
            create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http), mode="auto") as client,
        ):
            return await client.call_tool(f"mcp__acme__{name}", args or {})

    return asyncio.run(run())


def mcp_tools(url: str, key: str) -> dict[str, types.Tool]:
    async def run() -> list[types.Tool]:
        async with (
            create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http), mode="auto") as client,
        ):
            return (await client.list_tools()).tools

    return {tool.name: tool for tool in asyncio.run(run())}


def received(result: types.CallToolResult) -> list[dict[str, Any]]:
    return sent(list(result.content))


# --- REST ------------------------------------------------------------------------------------


def test_rest_value_is_every_block_the_upstream_sent(key, upstream):
    response = exec_rest(key, "gallery", tool_call_id="gallery-1")

    assert response.status_code == 200
    assert response.json()["value"] == {"content": sent(GALLERY)}
    assert ToolInvocation.objects.get(tool_call_id="gallery-1").content == sent(GALLERY)


def test_rest_value_is_the_structured_content_when_the_tool_declares_it(key, upstream):
    response = exec_rest(key, "forecast", {"city": "Oslo"})

    assert response.json()["value"] == {"city": "Oslo", "celsius": 21.5}


def test_an_upstream_is_error_answers_tool_error_with_its_blocks_and_is_replayed_once_run(key, upstream):
    first = exec_rest(key, "refuse", {"city": "Atlantis"}, tool_call_id="refuse-1")
    again = exec_rest(key, "refuse", {"city": "Atlantis"}, tool_call_id="refuse-1")

    assert first.status_code == 200
    body = first.json()
    assert (body["ok"], body["error_code"], body["content"]) == (False, "tool_error", sent(REFUSAL))
    assert (again.status_code, again.json()) == (200, body)
    assert upstream.calls("refuse") == 1
    rows = ToolInvocation.objects.filter(tool_call_id="refuse-1").order_by("id")
    assert [(row.decision, row.error_code, row.executed) for row in rows] == [
        ("allow", "tool_error", True),
        ("replayed", "tool_error", False),
    ]


def test_a_tool_error_that_echoes_the_operator_token_is_withheld(key, upstream):
    response = exec_rest(key, "leak")

    # the operator token's guard (the upstream's own credential) answers as it does for a success
    assert response.json()["error_code"] == "execution"
    assert response.json()["safe_message"] == "the upstream's answer carries the server's credential; it was withheld"
    assert OPERATOR_TOKEN not in response.content.decode()
    assert OPERATOR_TOKEN not in repr(list(ToolInvocation.objects.values()))


def test_a_tool_error_is_held_to_the_result_budget(key, upstream):
    ToolPolicy.objects.update(max_result_bytes=64)
    governance_bump()

    response = exec_rest(key, "refuse", {"city": "Atlantis"})

    assert (response.status_code, response.json()["error_code"]) == (502, "result_too_large")
    assert "content" not in response.json()


def test_an_answer_with_nul_characters_is_refused_not_a_crash(key, upstream):
    response = exec_rest(key, "nul", tool_call_id="nul-1")

    assert (response.status_code, response.json()["error_code"]) == (502, "execution")
    assert response.json()["safe_message"] == NUL_IN_ANSWER
    assert ToolInvocation.objects.get(tool_call_id="nul-1").error_code == "execution"


def test_transport_failures_stay_execution_with_toolgates_own_text(key, upstream):
    upstream.status_override = 500

    response = exec_rest(key, "refuse", {"city": "Atlantis"})

    assert (response.status_code, response.json()["error_code"]) == (502, "execution")
    assert response.json()["safe_message"].startswith("upstream MCP server: ")
    assert "content" not in response.json()


# --- MCP: the SDK's Client against a live Toolgate --------------------------------------------


def test_mcp_clients_receive_the_upstreams_blocks_never_a_json_text(live_server, key, upstream):
    result = mcp_call(live_server.url, key, "gallery")

    assert result.is_error is False
    assert received(result) == sent(GALLERY)
    assert result.structured_content is None


def test_mcp_clients_receive_blocks_and_structured_content(live_server, key, upstream):
    result = mcp_call(live_server.url, key, "forecast", {"city": "Oslo"})

    assert received(result) == [{"type": "text", "text": "Oslo: 21.5 C"}, sent(GALLERY)[1]]
    assert result.structured_content == {"city": "Oslo", "celsius": 21.5}


def test_mcp_clients_receive_a_tool_error_as_is_error_with_its_blocks(live_server, key, upstream):
    result = mcp_call(live_server.url, key, "refuse", {"city": "Atlantis"})

    assert result.is_error is True
    assert received(result) == sent(REFUSAL)
    assert result.meta is not None
    assert result.meta["toolgate/error_code"] == "tool_error"


def test_a_1x_client_receives_the_upstreams_structured_content_and_tool_errors(live_server, key, upstream):
    if not MCP1_PYTHON.exists():
        pytest.fail(f"{MCP1_PYTHON} is missing: `make install-dev` builds it from requirements-mcp1.txt")
    plan = {
        "calls": [
            {"name": "mcp__acme__forecast", "arguments": {"city": "Oslo"}},
            {"name": "mcp__acme__refuse", "arguments": {"city": "Atlantis"}},
        ]
    }

    completed = subprocess.run(
        [str(MCP1_PYTHON), str(MCP1_CLIENT)],
        input=json.dumps(plan),
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ.get("PATH", ""), "MCP_URL": f"{live_server.url}/mcp", "TOOLGATE_MCP_KEY": key},
        check=False,
    )

    assert completed.returncode == 0, completed.stderr[-2000:]
    forecast_call, refusal = json.loads(completed.stdout)["calls"]
    assert (forecast_call["is_error"], forecast_call["structured"]) == (False, {"city": "Oslo", "celsius": 21.5})
    assert forecast_call["text"] == "Oslo: 21.5 C"
    assert (refusal["is_error"], refusal["text"]) == (True, "unknown city; send one of: Paris, Oslo")
    assert upstream.calls() == 2


def test_tools_list_passes_title_annotations_icons_and_output_schema(live_server, key, upstream):
    tools = mcp_tools(live_server.url, key)

    weather_tool = tools["mcp__acme__weather"]
    assert weather_tool.title == "Weather now"
    assert [icon.model_dump(mode="json", by_alias=True, exclude_none=True) for icon in weather_tool.icons or []] == [
        {"src": "https://example.com/sun.png", "mimeType": "image/png", "sizes": ["48x48"]}
    ]
    annotations = weather_tool.annotations
    assert annotations is not None
    # the upstream's own hints pass; the effect (external_side_effect until an operator confirms) is stricter
    assert (annotations.idempotent_hint, annotations.destructive_hint) == (True, False)
    assert (annotations.read_only_hint, annotations.open_world_hint) == (False, True)
    assert (
        tools["mcp__acme__forecast"].output_schema
        == McpTool.objects.get(upstream_name="forecast").approved_definition["outputSchema"]
    )


def test_a_read_only_upstream_hint_confirmed_by_the_operator_stays_read_only(live_server, key, upstream):
    mcp_tool_set_effect(tool_id="mcp__acme__weather", effect=ToolEffect.READ_ONLY)
    mcp_tool_approve(tool_id="mcp__acme__weather", via="test")

    annotations = mcp_tools(live_server.url, key)["mcp__acme__weather"].annotations

    assert annotations is not None
    assert (annotations.read_only_hint, annotations.idempotent_hint) == (True, True)


_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30)
_B64 = st.binary(max_size=32).map(lambda raw: base64.b64encode(raw).decode())
_MIME = st.sampled_from(["image/png", "image/jpeg", "audio/wav", "application/pdf", "text/plain"])
_URI = st.sampled_from(["file:///a/b.txt", "https://example.com/r/1", "mem://notes/7"])
_ANNOTATIONS = st.none() | st.builds(
    types.Annotations,
    audience=st.none() | st.lists(st.sampled_from(["user", "assistant"]), max_size=2, unique=True),
    priority=st.none() | st.floats(min_value=0, max_value=1),
    lastModified=st.none() | st.just("2026-11-26T20:00:00Z"),
)
_ICONS = st.none() | st.lists(
    st.builds(
        types.Icon,
        src=st.sampled_from(["https://example.com/i.png", "data:image/png;base64," + PIXEL]),
        mimeType=st.none() | st.just("image/png"),
        sizes=st.none() | st.lists(st.sampled_from(["16x16", "any"]), max_size=2),
    ),
    max_size=2,
)
BLOCKS = st.one_of(
    st.builds(types.TextContent, type=st.just("text"), text=_TEXT, annotations=_ANNOTATIONS),
    st.builds(types.ImageContent, type=st.just("image"), data=_B64, mimeType=_MIME, annotations=_ANNOTATIONS),
    st.builds(types.AudioContent, type=st.just("audio"), data=_B64, mimeType=_MIME, annotations=_ANNOTATIONS),
    st.builds(
        types.ResourceLink,
        type=st.just("resource_link"),
        uri=_URI,
        name=_TEXT,
        title=st.none() | _TEXT,
        description=st.none() | _TEXT,
        mimeType=st.none() | _MIME,
        size=st.none() | st.integers(min_value=0, max_value=2**40),
        icons=_ICONS,
        annotations=_ANNOTATIONS,
    ),
    st.builds(
        types.EmbeddedResource,
        type=st.just("resource"),
        resource=st.one_of(
            st.builds(types.TextResourceContents, uri=_URI, mimeType=st.none() | _MIME, text=_TEXT),
            st.builds(types.BlobResourceContents, uri=_URI, mimeType=st.none() | _MIME, blob=_B64),
        ),
        annotations=_ANNOTATIONS,
    ),
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(blocks=st.lists(BLOCKS, max_size=5))
def test_what_the_upstream_sent_is_what_an_mcp_client_receives(live_server, key, upstream, blocks):
    NEXT["blocks"] = blocks

    result = mcp_call(live_server.url, key, "echo_blocks")

    assert result.is_error is False
    assert received(result) == sent(blocks)


# --- /tools/calls: the blocks in each model format ---------------------------------------------


def run_turn(key: str, wire_format: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    tool_id, arguments = f"mcp__acme__{name}", json.dumps(args)
    message: Any
    if wire_format == "openai":
        message = {
            "role": "assistant",
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": tool_id, "arguments": arguments}}],
        }
    elif wire_format == "openai_responses":
        message = [{"type": "function_call", "call_id": "call_1", "name": tool_id, "arguments": arguments}]
    else:
        message = [{"type": "tool_use", "id": "call_1", "name": tool_id, "input": args}]
    response = api_client(key).post("/api/v1/tools/calls", {"format": wire_format, "message": message}, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def test_anthropic_gets_the_blocks_as_tool_result_content_with_images(key, upstream):
    answer = run_turn(key, "anthropic", "gallery", {})

    [turn] = answer["results"]
    TypeAdapter(MessageParam).validate_python(turn)
    [block] = turn["content"]
    assert block["is_error"] is False
    assert block["content"] == [
        {"type": "text", "text": "Here is the chart"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}},
        {"type": "text", "text": "[audio (audio/wav): this format cannot show it]"},
        {"type": "text", "text": json.dumps(sent(GALLERY)[3], ensure_ascii=False)},
        {"type": "text", "text": "# Notes"},
        {"type": "text", "text": "[embedded resource file:///logo.png (image/png): not shown here]"},
    ]


def test_openai_responses_gets_text_and_image_parts(key, upstream):
    answer = run_turn(key, "openai_responses", "gallery", {})

    [item] = answer["results"]
    TypeAdapter(ResponseInputItemParam).validate_python(item)
    assert item["output"][:2] == [
        {"type": "input_text", "text": "Here is the chart"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PIXEL}"},
    ]
    assert [part["type"] for part in item["output"][2:]] == ["input_text"] * 4


def test_openai_chat_gets_one_text_part_per_block(key, upstream):
    answer = run_turn(key, "openai", "gallery", {})

    [message] = answer["results"]
    TypeAdapter(ChatCompletionMessageParam).validate_python(message)
    assert message["content"][:2] == [
        {"type": "text", "text": "Here is the chart"},
        {"type": "text", "text": "[image (image/png): this format cannot show it]"},
    ]
    assert len(message["content"]) == len(GALLERY)


@pytest.mark.parametrize("wire_format", ["openai", "openai_responses", "anthropic"])
def test_a_tool_error_is_the_formats_error_result_with_the_tools_text(key, upstream, wire_format):
    answer = run_turn(key, wire_format, "refuse", {"city": "Atlantis"})

    assert answer["calls"] == [
        {"tool_call_id": "call_1", "tool_id": "mcp__acme__refuse", "ok": False, "error_code": "tool_error"}
    ]
    [result] = answer["results"]
    if wire_format == "anthropic":
        TypeAdapter(MessageParam).validate_python(result)
        [block] = result["content"]
        assert block["is_error"] is True
        assert block["content"][0] == {"type": "text", "text": "unknown city; send one of: Paris, Oslo"}
        assert block["content"][1]["type"] == "image"
    elif wire_format == "openai":
        TypeAdapter(ChatCompletionMessageParam).validate_python(result)
        assert result["content"][0] == {"type": "text", "text": "unknown city; send one of: Paris, Oslo"}
    else:
        TypeAdapter(ResponseInputItemParam).validate_python(result)
        assert result["output"][0] == {"type": "input_text", "text": "unknown city; send one of: Paris, Oslo"}


def test_a_missing_argument_is_named_in_the_text_a_model_reads(key, upstream):
    answer = run_turn(key, "anthropic", "refuse", {})

    [block] = answer["results"][0]["content"]
    assert block["is_error"] is True
    assert json.loads(block["content"])["message"] == "arguments do not match the tool's schema: city: required"
    assert upstream.calls("refuse") == 0


def test_plain_and_negotiated_accept_answer_a_tool_error_alike(key, upstream):
    direct = exec_rest(key, "refuse", {"city": "Atlantis"}, tool_call_id="refuse-direct")
    # an Accept with parameters is left to DRF's own negotiation (core/api/negotiation.py)
    via_drf = api_client(key).post(
        "/api/v1/tools/exec",
        {"tool_id": "mcp__acme__refuse", "args": {"city": "Atlantis"}, "tool_call_id": "refuse-drf"},
        format="json",
        HTTP_ACCEPT="application/json; indent=4",
    )

    assert (direct.status_code, via_drf.status_code) == (200, 200)
    assert via_drf.json() | {"tool_call_id": "refuse-direct"} == direct.json()


def test_changed_icons_quarantine_the_tool_until_an_operator_approves_them(key, upstream):
    assert exec_rest(key, "weather", {"city": "Oslo"}).status_code == 200
    upstream.server.remove_tool("weather")
    upstream.server.add_tool(
        weather,
        title="Weather now",
        annotations=types.ToolAnnotations(readOnlyHint=True, idempotentHint=True, destructiveHint=False),
        icons=[types.Icon(src="https://tracker.example/pixel.png")],
    )

    report = mcp_server_discover(server_id=McpServer.objects.get(slug="acme").pk)

    assert report.drifted == ["mcp__acme__weather"]
    assert exec_rest(key, "weather", {"city": "Oslo"}).json()["error_code"] == "policy_denied"


@pytest.mark.parametrize(("name", "args"), [("gallery", {}), ("forecast", {"city": "Oslo"})])
def test_a_repeat_on_mcp_replays_the_same_blocks_and_structured_content(key, upstream, name, args):
    client = DjangoClient(HTTP_AUTHORIZATION=f"Bearer {key}")
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": f"mcp__acme__{name}", "arguments": args, "_meta": {"toolgate/tool_call_id": f"{name}-mcp"}},
    }

    def call() -> dict[str, Any]:
        response = client.post(
            "/mcp", json.dumps(body), content_type="application/json", headers={"MCP-Protocol-Version": "2025-11-25"}
        )
        return response.json()["result"]

    first, again = call(), call()

    assert again == first
    assert ("structuredContent" in first) is (name == "forecast")
    assert sent(GALLERY)[1] in first["content"]  # the image, as sent
    assert upstream.calls(name) == 1
