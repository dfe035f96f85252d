"""`/mcp`'s negotiation (gateway.inbound.views.McpNegotiation) and rendering answer exactly as DRF's do.

Every message is sent twice through the whole stack: once as served, once
with DRF's DefaultContentNegotiation in its place. Status, headers and body
must match once the per-call values (ids, the clock's reading) are set aside.
A spy records whether the shortcut chose the renderer, so each case also
proves it took the path it is meant to.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.response import Response

from gateway.inbound import views
from gateway.inbound.views import MCP_CLIENT_ACCEPTS, McpNegotiation, McpView
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import enable_tools

pytestmark = pytest.mark.django_db

TIME = "core__get_current_time"
MODERN = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
}
UNCOMPARED_HEADERS = {"X-Request-ID", "Content-Length"}


@pytest.fixture
def key() -> str:
    enable_tools(TIME)
    account, key = service_account_with_key(TenantFactory(slug="acme"), name="agent")
    ToolPolicyFactory(tenant=account.tenant, allowed_tools=[TIME])
    return key


@pytest.fixture
def served_by(monkeypatch):
    """How each renderer was chosen: 'plain' (the shortcut) or 'drf' (DRF's parsing)."""
    answers: list[str] = []
    original = McpNegotiation.plain_choice

    def spy(self: McpNegotiation, *args: Any) -> Any:
        choice = original(self, *args)
        answers.append("drf" if choice is None else "plain")
        return choice

    monkeypatch.setattr(McpNegotiation, "plain_choice", spy)
    return answers


def message(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "method": method, **({"params": params} if params is not None else {})}


MODERN_CALL = (
    message("tools/call", {"name": TIME, "arguments": {}, "_meta": ENVELOPE}),
    {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": TIME},
)
LEGACY_CALL = (message("tools/call", {"name": TIME, "arguments": {}}), {"MCP-Protocol-Version": "2025-11-25"})
CASES = {
    "modern call": MODERN_CALL,
    "handshake-era call": LEGACY_CALL,
    "initialize": (message("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {}}), {}),
    "tools/list": (
        message("tools/list", {"_meta": ENVELOPE}),
        {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"},
    ),
    "unknown tool": (message("tools/call", {"name": "core__nope", "arguments": {}}), {}),
    "unknown method": (message("resources/list"), {}),
    "headers disagree": (MODERN_CALL[0], {**MODERN_CALL[1], "Mcp-Name": "other"}),
    "notification": ({"jsonrpc": "2.0", "method": "notifications/initialized"}, {}),
    "no key": (LEGACY_CALL[0], {"no_auth": "1"}),
    "not JSON": (b"{nope", {}),
    "a batch": ([message("ping")], {}),
}


def comparable(response) -> tuple[int, dict[str, str], Any]:
    headers = {name: value for name, value in response.headers.items() if name not in UNCOMPARED_HEADERS}
    if not response.content:
        return response.status_code, headers, b""
    body = response.json()
    result = body.get("result")
    if isinstance(result, dict) and "_meta" in result and "content" in result:  # a call: its id and the time vary
        body["result"] = {**result, "_meta": "<per call>", "content": "<per call>", "structuredContent": "<per call>"}
    return response.status_code, headers, body


def send(key: str, body: Any, accept: str, headers: dict[str, str]):
    headers = dict(headers)
    if not headers.pop("no_auth", None):
        headers["Authorization"] = f"Bearer {key}"
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Client().post("/mcp", raw, content_type="application/json", headers={**headers, "Accept": accept})


def both_paths(monkeypatch, key: str, case: str, accept: str) -> tuple[tuple, tuple]:
    body, headers = CASES[case]
    served = comparable(send(key, body, accept, headers))
    with monkeypatch.context() as switched_off:
        switched_off.setattr(McpView, "content_negotiation_class", DefaultContentNegotiation)
        by_drf = comparable(send(key, body, accept, headers))
    return served, by_drf


@pytest.mark.parametrize("accept", sorted(MCP_CLIENT_ACCEPTS))
@pytest.mark.parametrize("case", CASES)
def test_an_mcp_clients_accept_is_answered_as_drfs_negotiation_answers_it(case, accept, key, served_by, monkeypatch):
    served, by_drf = both_paths(monkeypatch, key, case, accept)

    assert served_by  # the view negotiated (a refusal too)
    assert set(served_by) == {"plain"}
    assert served == by_drf


@pytest.mark.parametrize(
    "accept", ["text/event-stream", "application/json;q=0.5, text/event-stream", "text/html, text/event-stream"]
)
def test_any_other_accept_is_left_to_drfs_negotiation(accept, key, served_by, monkeypatch):
    served, by_drf = both_paths(monkeypatch, key, "modern call", accept)

    assert set(served_by) == {"drf"}
    assert served == by_drf


def drf_response(request, reply_body, *, status, headers):
    return Response(reply_body, status, headers=headers)


@pytest.mark.parametrize("accept", ["application/json, text/event-stream", "application/json; indent=4"])
@pytest.mark.parametrize("case", CASES)
def test_every_reply_is_rendered_as_drfs_response_renders_it(case, accept, key, monkeypatch):
    body, headers = CASES[case]
    served = send(key, body, accept, headers)
    with monkeypatch.context() as switched_off:
        switched_off.setattr(
            views,
            "plain_json_answer",
            lambda request, body, *, status, headers: Response(body, status, headers=headers),
        )
        by_response = send(key, body, accept, headers)

    assert comparable(served) == comparable(by_response)
    assert served.get("Content-Length") == by_response.get("Content-Length")
