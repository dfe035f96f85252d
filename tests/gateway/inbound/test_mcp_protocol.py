"""`POST /mcp` at the protocol level, through Django's test client: every refusal path.

Each bad request gets its JSON-RPC error (or the HTTP status the transport
requires) and never a 500, a traceback or an echo of a secret; a refused call
leaves no trace of having run (no executed audit row).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
import time_machine
from django.conf import settings
from django.test import Client

from config.runtime import runtime
from gateway.inbound import protocol
from gateway.inbound.wire import decode_cursor, encode_cursor
from policies_app import governance
from policies_app.services import service_account_revoke
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import enable_tools
from tests.support.rate_window import room_in_the_rate_window
from tools_app.models import ToolInvocation
from tools_app.services import tool_set_enabled

pytestmark = pytest.mark.django_db

MODERN = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
}
TIME = "core__get_current_time"


@pytest.fixture
def key() -> str:
    """A tools:exec caller whose policy allows the core tools (wait needs approval) and github__create_issue."""
    enable_tools(TIME, "core__wait", "github__create_issue", "github__get_user")
    account, key = service_account_with_key(TenantFactory(slug="acme"), name="agent")
    ToolPolicyFactory(tenant=account.tenant, allowed_tools=[TIME, "core__wait", "github__create_issue"])
    return key


@pytest.fixture
def client(key) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {key}")


def rpc(method: str, params: dict[str, Any] | None = None, request_id: Any = 1) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def post(client: Client, body: Any, **headers: str):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post("/mcp", raw, content_type="application/json", headers=headers)


def modern(client: Client, method: str, params: dict[str, Any] | None = None, **headers: str):
    """A 2026-07-28 request: envelope in _meta, routing headers that agree with the body."""
    params = dict(params or {})
    params["_meta"] = {**ENVELOPE, **params.get("_meta", {})}
    routing = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if method == "tools/call":
        routing["Mcp-Name"] = params["name"]
    return post(client, rpc(method, params), **{**routing, **headers})


def legacy(client: Client, method: str, params: dict[str, Any] | None = None, **headers: str):
    return post(client, rpc(method, params), **{"MCP-Protocol-Version": "2025-11-25", **headers})


def error_of(response) -> tuple[int, int, Any]:
    body = response.json()
    return response.status_code, body["error"]["code"], body["id"]


# --- both eras: handshake, discovery, ping, notifications ------------------------------------------


@pytest.mark.parametrize(
    ("offered", "answered"),
    [("2025-06-18", "2025-06-18"), ("2025-11-25", "2025-11-25"), ("2024-11-05", "2025-11-25")],
)
def test_initialize_echoes_a_version_it_speaks_else_offers_its_newest(client, offered, answered):
    response = post(client, rpc("initialize", {"protocolVersion": offered, "capabilities": {}, "clientInfo": {}}))

    result = response.json()["result"]
    assert response.status_code == 200
    assert "Mcp-Session-Id" not in response.headers  # stateless: no session is ever issued
    assert (result["protocolVersion"], result["capabilities"]) == (answered, {"tools": {"listChanged": False}})
    assert result["serverInfo"]["name"] == "toolgate"


def test_initialize_without_a_version_is_invalid_params(client):
    assert error_of(post(client, rpc("initialize", {"capabilities": {}}, request_id="i-1"))) == (200, -32602, "i-1")


@pytest.mark.parametrize("version", [None, "2025-06-18", "2025-11-25", MODERN])
def test_notifications_are_accepted_with_no_body(client, version):
    headers = {"MCP-Protocol-Version": version} if version else {}

    response = post(client, {"jsonrpc": "2.0", "method": "notifications/initialized"}, **headers)

    assert (response.status_code, response.content) == (202, b"")


def test_a_notification_at_an_unsupported_revision_is_refused(client):
    response = post(
        client, {"jsonrpc": "2.0", "method": "notifications/initialized"}, **{"MCP-Protocol-Version": "1999-01-01"}
    )

    assert error_of(response) == (400, -32022, None)
    assert response.json()["error"]["data"] == {
        "supported": ["2025-06-18", "2025-11-25", MODERN],
        "requested": "1999-01-01",
    }


def test_server_discover_names_the_2026_revision(client):
    response = modern(client, "server/discover")

    result = response.json()["result"]
    assert response.status_code == 200
    assert (result["supportedVersions"], result["resultType"]) == ([MODERN], "complete")
    assert (result["ttlMs"], result["cacheScope"]) == (0, "private")
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "toolgate"


def test_ping_in_both_eras(client):
    assert legacy(client, "ping").json() == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert modern(client, "ping").json() == {"jsonrpc": "2.0", "id": 1, "result": {"resultType": "complete"}}


def test_an_unsupported_revision_header_is_refused(client):
    response = post(client, rpc("tools/list"), **{"MCP-Protocol-Version": "2025-03-26"})

    assert error_of(response) == (400, -32022, 1)


# --- 2026-07-28: headers must agree with the body ---------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {"MCP-Protocol-Version": "2025-11-25"},  # the body's _meta says 2026-07-28
        {"Mcp-Method": "tools/list"},
        {"Mcp-Name": "core__wait"},
    ],
)
def test_modern_headers_that_disagree_with_the_body_are_refused_before_anything_runs(client, headers):
    response = modern(client, "tools/call", {"name": TIME, "arguments": {}}, **headers)

    assert error_of(response) == (400, -32020, 1)
    assert ToolInvocation.objects.count() == 0


@pytest.mark.parametrize(
    ("era", "headers", "refusal"),
    [
        ("modern", {"Mcp-Name": "core__wait"}, (400, -32020, 1)),
        ("legacy", {"MCP-Protocol-Version": "2025-03-26"}, (400, -32022, 1)),
    ],
)
def test_a_call_that_asks_for_progress_is_refused_like_any_other_before_a_stream_starts(client, era, headers, refusal):
    stream = {"Accept": "application/json, text/event-stream"}
    params = {"name": TIME, "arguments": {}, "_meta": {"progressToken": "p-1"}}
    send = modern if era == "modern" else legacy

    response = send(client, "tools/call", params, **stream, **headers)

    assert response["Content-Type"] == "application/json"  # an error with its status, not a 200 stream
    assert error_of(response) == refusal
    assert ToolInvocation.objects.count() == 0


def test_a_modern_request_without_its_envelope_is_invalid_params(client):
    response = post(client, rpc("tools/list"), **{"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"})

    assert error_of(response) == (400, -32602, 1)


def test_modern_request_missing_its_routing_headers_is_a_mismatch(client):
    assert error_of(post(client, rpc("tools/list", {"_meta": ENVELOPE}))) == (400, -32020, 1)


# --- unknown methods, malformed JSON-RPC ----------------------------------------------------------


def test_an_unknown_method_is_method_not_found_in_each_era(client):
    assert error_of(legacy(client, "sampling/createMessage")) == (200, -32601, 1)  # a client's method
    assert error_of(modern(client, "sampling/createMessage")) == (404, -32601, 1)
    assert error_of(modern(client, "initialize")) == (404, -32601, 1)  # no handshake in 2026-07-28
    assert error_of(legacy(client, "server/discover")) == (200, -32601, 1)


@pytest.mark.parametrize(
    ("message", "echoed_id"),
    [
        ({"id": 1, "method": "ping"}, 1),  # no "jsonrpc"
        ({"jsonrpc": "1.0", "id": 1, "method": "ping"}, 1),
        ({"jsonrpc": "2.0", "id": None, "method": "ping"}, None),  # MCP ids are never null
        ({"jsonrpc": "2.0", "id": True, "method": "ping"}, None),
        ({"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}, None),
        ({"jsonrpc": "2.0", "id": "x" * 300, "method": "ping"}, None),
        ({"jsonrpc": "2.0", "id": 10**300, "method": "ping"}, None),  # an integer id is bounded like a string
        ({"jsonrpc": "2.0", "id": -(10**300), "method": "ping"}, None),
        ({"jsonrpc": "2.0", "id": 1, "method": 7}, 1),
        ({"jsonrpc": "2.0", "id": 1, "method": ""}, 1),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1]}, 1),
        ({"jsonrpc": "2.0", "id": 1, "result": {}}, 1),  # a response posted by the client
    ],
)
def test_malformed_json_rpc_is_an_invalid_request(client, message, echoed_id):
    assert error_of(post(client, message)) == (400, -32600, echoed_id)


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        (b'{"jsonrpc": "2.0",', -32700, "request body is not valid JSON"),
        (b'{"jsonrpc": "2.0", "jsonrpc": "2.0", "id": 1, "method": "ping"}', -32700, "duplicate key in a JSON object"),
        (b"[" * 10_000 + b"]" * 10_000, -32700, "JSON nests deeper than 32 levels"),
        (b'{"a":' * 40 + b"1" + b"}" * 40, -32700, "JSON nests deeper than 32 levels"),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "ping\\u0000"}', -32700, None),
        (b'{"x": NaN}', -32700, None),
        (b"\xff\xfe", -32700, "request body is not valid UTF-8"),
        (b'"ping"', -32600, "the body must be a JSON-RPC request object"),
        (b"42", -32600, "the body must be a JSON-RPC request object"),
        (b"null", -32600, "the body must be a JSON-RPC request object"),
    ],
)
def test_unparseable_bodies_get_json_rpc_errors_never_a_500(client, body, code, message):
    response = post(client, body)

    assert error_of(response) == (400, code, None)
    if message is not None:
        assert response.json()["error"]["message"] == message


def test_a_batch_is_refused_and_none_of_its_calls_runs(client):
    call = rpc("tools/call", {"name": TIME, "arguments": {}, "_meta": {"toolgate/tool_call_id": "in-batch"}})

    response = post(client, [call, {**call, "id": 2}])

    assert error_of(response) == (400, -32600, None)
    assert "batches are not supported" in response.json()["error"]["message"]
    assert ToolInvocation.objects.count() == 0


def test_an_empty_body_is_a_parse_error(client):
    assert error_of(client.post("/mcp", b"", content_type="application/json")) == (400, -32700, None)


def test_an_oversized_body_is_refused_before_it_is_read(client):
    padding = "x" * (64 * 1024)

    response = post(client, rpc("tools/call", {"name": TIME, "arguments": {"timezone": padding}}))

    assert error_of(response) == (413, -32600, None)
    assert ToolInvocation.objects.count() == 0


def test_a_client_that_accepts_only_event_streams_is_406(client):
    response = post(client, rpc("ping"), Accept="text/event-stream")

    assert error_of(response) == (406, -32600, None)


def test_a_body_that_is_not_json_is_unsupported_media(client):
    response = client.post("/mcp", b"ping", content_type="text/plain")

    assert error_of(response) == (415, -32600, None)


# --- HTTP: auth, methods, origin, throttle ----------------------------------------------------------


def test_a_missing_or_bad_key_is_401_with_the_bearer_challenge(key):
    bad_key = key[:-4] + "abcd"
    metadata = 'resource_metadata="http://testserver/.well-known/oauth-protected-resource/mcp"'
    expected = {
        None: f"Bearer {metadata}",
        f"Bearer {bad_key}": f'Bearer error="invalid_token", {metadata}',
        "Basic dXNlcjpwdw==": f'Bearer error="invalid_token", {metadata}',
        "Bearer tga_0123456789ab_" + "x" * 43: f'Bearer error="invalid_token", {metadata}',
    }
    for authorization, challenge in expected.items():
        headers = {} if authorization is None else {"HTTP_AUTHORIZATION": authorization}
        response = Client(**headers).post("/mcp", json.dumps(rpc("ping")), content_type="application/json")

        assert error_of(response) == (401, -32600, None)
        assert response.headers["WWW-Authenticate"] == challenge
        assert bad_key not in response.content.decode()


def test_a_revoked_key_is_401():
    enable_tools(TIME)
    account, key = service_account_with_key(TenantFactory(slug="gone"))
    service_account_revoke(account=account)

    response = post(Client(HTTP_AUTHORIZATION=f"Bearer {key}"), rpc("ping"))

    assert error_of(response) == (401, -32600, None)


def test_a_key_without_the_tools_exec_scope_is_403():
    _account, key = service_account_with_key(TenantFactory(slug="ops"), scopes=("connections:manage",))

    response = post(Client(HTTP_AUTHORIZATION=f"Bearer {key}"), rpc("tools/list"))

    assert error_of(response) == (403, -32600, None)
    assert response.json()["error"]["message"] == "the API key lacks the tools:exec scope"


@pytest.mark.parametrize("method", ["get", "delete", "put", "options"])
def test_only_post_is_allowed(client, method):
    response = getattr(client, method)("/mcp")

    assert error_of(response) == (405, -32600, None)
    assert response.headers["Allow"] == "POST"


@pytest.mark.parametrize("accept", ["text/event-stream", "application/json, text/event-stream", "text/html"])
@pytest.mark.parametrize("path", ["/mcp", "/mcp/t/clock", "/mcp?mode=search"])
@pytest.mark.parametrize("version", ["2025-11-25", MODERN])
def test_the_stream_probe_is_401_without_a_key_and_405_with_one(client, accept, path, version):
    """A client may GET the endpoint to open a server stream; there is none, and that is 405, never 406."""
    headers = {"Accept": accept, "MCP-Protocol-Version": version}

    anonymous = Client().get(path, headers=headers)
    signed = client.get(path, headers=headers)

    assert error_of(anonymous) == (401, -32600, None)
    assert anonymous.headers["WWW-Authenticate"].startswith("Bearer ")
    assert error_of(signed) == (405, -32600, None)
    assert signed.headers["Allow"] == "POST"
    assert signed.headers["Content-Type"] == "application/json"


def test_a_post_that_accepts_no_json_is_still_406(client):
    response = client.post(
        "/mcp", json.dumps(rpc("ping")), content_type="application/json", headers={"Accept": "text/html"}
    )

    assert error_of(response) == (406, -32600, None)


def test_a_foreign_origin_is_403_and_listed_origins_pass(client, settings):
    settings.TOOLGATE_MCP_ALLOWED_ORIGINS = ["https://console.example"]

    foreign = post(client, rpc("ping"), Origin="https://evil.example")
    listed = post(client, rpc("ping"), Origin="https://console.example")
    without = post(client, rpc("ping"))
    anonymous_foreign = post(Client(), rpc("ping"), Origin="https://evil.example")

    assert error_of(foreign) == (403, -32600, None)
    assert error_of(anonymous_foreign) == (403, -32600, None)  # refused before the key is even looked at
    assert (listed.status_code, without.status_code) == (200, 200)


def test_the_fairness_throttle_answers_429_with_retry_after(client, settings):
    settings.TOOLGATE_API_RATE_PER_SECOND = 1

    with time_machine.travel(datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC), tick=False):  # one one-second window
        first, second = post(client, rpc("ping")), post(client, rpc("ping"))

    assert first.status_code == 200
    assert error_of(second) == (429, -32600, None)
    assert second.headers["Retry-After"] == "1"


def test_a_tools_call_spends_the_fairness_share_once_inside_the_runner_and_is_audited(client, settings):
    settings.TOOLGATE_API_RATE_PER_SECOND = 1
    runtime.cache_clear()  # the runner binds the rate when it is built
    try:
        with time_machine.travel(datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC), tick=False):
            first = post(client, rpc("tools/call", {"name": TIME, "arguments": {}}))
            second = post(client, rpc("tools/call", {"name": TIME, "arguments": {}}))
    finally:
        runtime.cache_clear()

    assert first.json()["result"]["isError"] is False
    assert second.json()["result"]["_meta"]["toolgate/error_code"] == "rate_limited"
    assert list(ToolInvocation.objects.order_by("id").values_list("error_code", flat=True)) == ["", "rate_limited"]


# --- tools/list -------------------------------------------------------------------------------------


def test_tools_list_maps_the_catalog_and_annotations_from_the_effect(client):
    tools = legacy(client, "tools/list").json()["result"]["tools"]

    assert [tool["name"] for tool in tools] == [TIME, "core__wait", "github__create_issue"]
    assert [tool["annotations"] for tool in tools] == [
        {"readOnlyHint": True},
        {"readOnlyHint": True},
        {"readOnlyHint": False, "openWorldHint": True},
    ]
    assert tools[0]["inputSchema"]["properties"]["timezone"]["type"] == "string"
    assert tools[0]["outputSchema"]["required"] == ["iso", "epoch_ms", "timezone"]


def test_tools_list_carries_the_seed_002_metadata_in_meta(client):
    tools = legacy(client, "tools/list").json()["result"]["tools"]

    assert tools[2]["_meta"] == {
        "toolgate/consequence_level": "medium",
        "toolgate/requires_confirmation": True,
        "toolgate/tags": ["github", "issues"],
        "toolgate/version": "1.0.0",
    }


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_tools_list_pages_follow_the_cursor_to_the_end(client, monkeypatch, era):
    monkeypatch.setattr(protocol, "PAGE_SIZE", 2)
    send = legacy if era == "legacy" else modern

    first = send(client, "tools/list").json()["result"]
    second = send(client, "tools/list", {"cursor": first["nextCursor"]}).json()["result"]

    assert [tool["name"] for tool in first["tools"]] == [TIME, "core__wait"]
    assert [tool["name"] for tool in second["tools"]] == ["github__create_issue"]
    assert "nextCursor" not in second
    if era == "modern":
        assert (second["ttlMs"], second["cacheScope"], second["resultType"]) == (0, "private", "complete")


def test_a_cursor_survives_a_tool_switched_off_between_pages(client, monkeypatch):
    monkeypatch.setattr(protocol, "PAGE_SIZE", 1)
    first = legacy(client, "tools/list").json()["result"]
    tool_set_enabled(tool_ids=["core__wait"], enabled=False)

    second = legacy(client, "tools/list", {"cursor": first["nextCursor"]}).json()["result"]

    assert [tool["name"] for tool in second["tools"]] == ["github__create_issue"]


@pytest.mark.parametrize("cursor", ["not-a-cursor", 7, encode_cursor("x")[:-2] + "!!"])
def test_an_invalid_cursor_is_invalid_params(client, cursor):
    assert error_of(legacy(client, "tools/list", {"cursor": cursor})) == (200, -32602, 1)
    assert error_of(modern(client, "tools/list", {"cursor": cursor})) == (400, -32602, 1)


def test_cursor_round_trip():
    assert decode_cursor(encode_cursor("github__get_user")) == "github__get_user"
    assert decode_cursor("eyJhIjoxfQ") is None  # JSON, but not ours


# --- tools/call -------------------------------------------------------------------------------------


def test_a_call_answers_structured_content_and_the_same_value_as_text(client):
    response = legacy(
        client, "tools/call", {"name": TIME, "arguments": {"timezone": "UTC"}, "_meta": {"toolgate/tool_call_id": "c1"}}
    )

    result = response.json()["result"]
    assert response.status_code == 200
    assert result["isError"] is False
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
    assert set(result["structuredContent"]) == {"iso", "epoch_ms", "timezone"}
    assert result["_meta"] == {"toolgate/tool_call_id": "c1"}


def test_tools_outside_the_catalog_all_look_unknown_and_are_audited_as_refused(client):
    tool_set_enabled(tool_ids=["core__wait"], enabled=False)
    answers = [
        legacy(client, "tools/call", {"name": name, "arguments": {}, "_meta": {"toolgate/tool_call_id": f"hidden-{n}"}})
        for n, name in enumerate(["github__get_user", "core__wait", "no__such_tool"])
    ]

    assert {response.content for response in answers} == {
        b'{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"unknown tool"}}'
    }
    rows = ToolInvocation.objects.order_by("tool_call_id").values_list("tool_call_id", "error_code", "executed")
    assert list(rows) == [
        ("hidden-0", "policy_denied", False),
        ("hidden-1", "policy_denied", False),
        ("hidden-2", "unavailable", False),
    ]


def test_an_unknown_tool_is_400_in_the_modern_era(client):
    assert error_of(modern(client, "tools/call", {"name": "github__get_user", "arguments": {}})) == (400, -32602, 1)


@pytest.mark.parametrize(
    "params",
    [
        {"arguments": {}},
        {"name": 7},
        {"name": TIME, "arguments": [1]},
        {"name": TIME, "arguments": "{}"},
        {"name": TIME, "_meta": "toolgate"},
    ],
)
def test_malformed_call_params_are_invalid_params(client, params):
    assert error_of(legacy(client, "tools/call", params)) == (200, -32602, 1)
    assert ToolInvocation.objects.count() == 0


@pytest.mark.parametrize(
    ("meta", "arguments", "path"),
    [
        ({"toolgate/tool_call_id": "has space"}, {}, "_meta.toolgate/tool_call_id"),
        ({"toolgate/run_id": "r" * 200}, {}, "_meta.toolgate/run_id"),
        ({"toolgate/connection_id": "c1"}, {}, "_meta.toolgate/grant_id"),
        ({"toolgate/connection_ids": "c1"}, {}, "_meta.toolgate/connection_ids"),
        ({"toolgate/connectionid": "c1"}, {}, "_meta"),  # a typo must not silently drop the id
        ({}, {"timezone": "x" * 9000}, "arguments"),
    ],
)
def test_bad_out_of_band_fields_are_a_validation_result_like_rest(client, meta, arguments, path):
    response = legacy(client, "tools/call", {"name": TIME, "arguments": arguments, "_meta": meta})

    result = response.json()["result"]
    assert result["isError"] is True
    errors = result["_meta"]["toolgate/errors"]
    # the model reads only the text: it names each wrong field and what is wrong with it
    named = "; ".join(f"{error['path']}: {error['message']}" for error in errors)
    assert result["content"][0]["text"] == f"validation: the request is invalid: {named}"
    assert result["_meta"]["toolgate/error_code"] == "validation"
    assert {error["path"] for error in errors} == {path}
    assert ToolInvocation.objects.count() == 0


def test_a_connection_id_in_arguments_is_refused_by_the_tool_schema(client):
    response = legacy(client, "tools/call", {"name": TIME, "arguments": {"connection_id": "c1"}})

    result = response.json()["result"]
    assert (result["isError"], result["_meta"]["toolgate/error_code"]) == (True, "validation")
    assert ToolInvocation.objects.get().error_code == "validation"


def test_arguments_sent_as_a_string_of_json_are_refused_with_what_to_send_instead(client):
    response = legacy(client, "tools/call", {"name": TIME, "arguments": '{"timezone": "UTC"}'})

    error = response.json()["error"]
    assert error["code"] == -32602
    assert error["message"] == (
        "arguments must be a JSON object, not a string holding one: parse the string and send the object itself "
        "(OpenAI's function.arguments is such a string)"
    )
    assert not ToolInvocation.objects.exists()


def test_arguments_that_break_the_tool_schema_are_a_validation_result(client):
    result = legacy(client, "tools/call", {"name": "core__wait", "arguments": {"ms": -5}}).json()["result"]

    assert (result["isError"], result["_meta"]["toolgate/error_code"]) == (True, "validation")
    assert [error["path"] for error in result["_meta"]["toolgate/errors"]] == ["ms"]


def test_a_tool_past_its_budget_answers_timeout_as_an_error_result(key):
    account_policy = ToolPolicyFactory(
        tenant=TenantFactory(slug="slow"), allowed_tools=["core__wait"], max_runtime_ms=50
    )
    _account, slow_key = service_account_with_key(account_policy.tenant)

    response = legacy(
        Client(HTTP_AUTHORIZATION=f"Bearer {slow_key}"), "tools/call", {"name": "core__wait", "arguments": {"ms": 500}}
    )

    result = response.json()["result"]
    assert (response.status_code, result["isError"], result["_meta"]["toolgate/error_code"]) == (200, True, "timeout")
    assert result["content"][0]["text"] == "timeout: the tool ran past its 50 ms budget"


def test_a_spent_rate_budget_answers_rate_limited_with_retry_after(key):
    policy = ToolPolicyFactory(tenant=TenantFactory(slug="busy"), allowed_tools=[TIME], rate_limit_per_minute=1)
    _account, busy_key = service_account_with_key(policy.tenant)
    busy = Client(HTTP_AUTHORIZATION=f"Bearer {busy_key}")
    room_in_the_rate_window()

    first = legacy(busy, "tools/call", {"name": TIME, "arguments": {}}).json()["result"]
    second = legacy(busy, "tools/call", {"name": TIME, "arguments": {}}).json()["result"]

    assert first["isError"] is False
    assert (second["isError"], second["_meta"]["toolgate/error_code"]) == (True, "rate_limited")
    assert second["_meta"]["toolgate/retry_after_s"] >= 1


def test_approval_required_carries_the_approval_id(key):
    policy = ToolPolicyFactory(
        tenant=TenantFactory(slug="careful"), allowed_tools=["core__wait"], require_approval_for_effects=["read_only"]
    )
    _account, careful_key = service_account_with_key(policy.tenant)

    response = modern(
        Client(HTTP_AUTHORIZATION=f"Bearer {careful_key}"), "tools/call", {"name": "core__wait", "arguments": {"ms": 1}}
    )

    result = response.json()["result"]
    assert (response.status_code, result["isError"], result["resultType"]) == (200, True, "complete")
    assert result["_meta"]["toolgate/error_code"] == "approval_required"
    assert result["_meta"]["toolgate/approval_id"]
    assert ToolInvocation.objects.get().executed is False


def test_a_validation_refusal_names_each_wrong_argument_in_the_text_the_model_reads(client):
    response = legacy(client, "tools/call", {"name": TIME, "arguments": {"timezone": "Mars/Base", "zone": "x"}})

    result = response.json()["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"] == (
        "validation: arguments do not match the tool's schema: "
        "timezone: unknown IANA time zone; send a tz database name such as Europe/Paris or UTC; "
        "(unknown field): unknown field; the tool's input_schema lists the fields it accepts"
    )
    assert "Mars/Base" not in response.content.decode()


# --- the hot path's database work -------------------------------------------------------------

# As over REST (tests/tools_app/test_api_exec.py): without Redis the generation is read twice per request.
GENERATION_READS = 0 if settings.REDIS_URL else 2


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_a_warm_call_is_one_insert_like_a_warm_rest_exec(client, monkeypatch, django_assert_num_queries, era):
    """The endpoint adds no query of its own to the runner's (no catalog, no lookups: all cached)."""
    monkeypatch.setattr(governance, "MAX_STALENESS_S", 3600.0)  # no staleness re-read due mid-test
    send = modern if era == "modern" else legacy
    assert send(client, "tools/call", {"name": TIME, "arguments": {}}).status_code == 200  # warm the caches

    with django_assert_num_queries(GENERATION_READS + 1) as captured:
        response = send(client, "tools/call", {"name": TIME, "arguments": {}})

    assert response.json()["result"]["isError"] is False
    assert 'INSERT INTO "tools_app_toolinvocation"' in captured.captured_queries[-1]["sql"]
