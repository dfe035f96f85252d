"""Plain-JSON calls (gateway/upstream/lean.py) beside the SDK client: which upstream gets which, and fallbacks.

Every other test in this directory runs against both eras (`upstream` fixture): the
stateless 2026-07-28 server is called the plain way, the 2025-11-25 server with
sessions through the SDK; these tests pin that choice, the 2025-11-25 stateless
case, the switch that turns plain calls off, warm calls made on the caller's
thread (no hop to the event loop), and what happens when an upstream refuses a
plain POST or answers it with an event stream, on either side of the hop.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator

import pytest

from core.netguard import MAX_UPSTREAM_RESPONSE_BYTES
from gateway.upstream.errors import UpstreamError
from gateway.upstream.lean import _streamed_result
from gateway.upstream.services import mcp_server_discover, mcp_server_register, mcp_tool_approve
from runner.http1 import Answer
from runner.pipeline import BackgroundLoop
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.gateway.upstream.conftest import install_tools
from tests.support.api import api_client
from tests.support.mcp_upstream import McpUpstream
from tools_app.services import tool_set_enabled

pytestmark = pytest.mark.django_db

URL = "/api/v1/tools/exec"
TOKEN = "op-token-plain-0123456789abcdef"
_slugs = itertools.count()


def _serve(upstream: McpUpstream) -> tuple[str, str]:
    """Register, discover, approve and enable add/big/fail/counted on `upstream`; returns (slug, caller key)."""
    calls = upstream.counted = []  # type: ignore[attr-defined]

    def counted(tag: str) -> str:
        """Record that it ran."""
        calls.append(tag)
        return f"ran {tag}"

    install_tools(upstream)
    upstream.server.add_tool(counted, structured_output=False)
    slug = f"plain{next(_slugs)}"
    server, _ = mcp_server_register(slug=slug, url=upstream.url, operator_token=TOKEN)
    mcp_server_discover(server_id=server.pk)
    tool_ids = [f"mcp__{slug}__{name}" for name in ("add", "big", "fail", "counted")]
    for tool_id in tool_ids:
        mcp_tool_approve(tool_id=tool_id, via="test")
    tool_set_enabled(tool_ids=tool_ids, enabled=True)
    tenant = TenantFactory(slug=f"t-{slug}")
    _account, key = service_account_with_key(tenant, name="agent")
    ToolPolicyFactory(tenant=tenant, allowed_tools=tool_ids)
    upstream.clear()
    return slug, key


def call(key: str, tool_id: str, args: dict):
    return api_client(key).post(URL, {"tool_id": tool_id, "args": args}, format="json")


def tool_calls(upstream: McpUpstream) -> list:
    return [request for request in upstream.requests if request.rpc_method == "tools/call"]


@pytest.fixture
def modern(allow_private) -> Iterator[McpUpstream]:
    with McpUpstream(legacy=False) as upstream:
        yield upstream


def test_a_stateless_2026_upstream_gets_one_plain_post_per_call_stamped_like_the_sdk(modern):
    slug, key = _serve(modern)

    response = call(key, f"mcp__{slug}__add", {"a": 2, "b": 3})

    assert response.status_code == 200
    assert response.json()["value"] == {"result": 5}
    [sent] = tool_calls(modern)
    assert sent.plain
    assert sent.headers["mcp-protocol-version"] == "2026-07-28"
    assert sent.headers["mcp-method"] == "tools/call"
    assert sent.headers["mcp-name"] == "add"
    assert sent.headers["authorization"] == f"Bearer {TOKEN}"
    assert sent.meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
    assert sent.meta["io.modelcontextprotocol/clientInfo"] == {"name": "toolgate", "version": "1"}
    assert sent.meta["io.modelcontextprotocol/clientCapabilities"] == {}


def test_a_stateless_2025_upstream_gets_plain_posts_with_its_version_header_and_no_meta(allow_private):
    with McpUpstream(legacy=True, stateless=True) as upstream:
        slug, key = _serve(upstream)

        first = call(key, f"mcp__{slug}__add", {"a": 1, "b": 1})
        second = call(key, f"mcp__{slug}__add", {"a": 2, "b": 2})

        assert [first.json()["value"], second.json()["value"]] == [{"result": 2}, {"result": 4}]
        sent = tool_calls(upstream)
        assert [request.plain for request in sent] == [True, True]
        assert {request.headers["mcp-protocol-version"] for request in sent} == {"2025-11-25"}
        assert [request.meta for request in sent] == [None, None]
        assert "mcp-session-id" not in sent[0].headers


def test_an_upstream_that_keeps_sessions_is_called_through_the_sdk(allow_private):
    with McpUpstream(legacy=True) as upstream:
        slug, key = _serve(upstream)

        response = call(key, f"mcp__{slug}__add", {"a": 1, "b": 1})

        assert response.json()["value"] == {"result": 2}
        [sent] = tool_calls(upstream)
        assert not sent.plain
        assert sent.headers["mcp-session-id"]


def test_with_plain_calls_switched_off_every_call_goes_through_the_sdk(modern, settings):
    settings.TOOLGATE_MCP_PLAIN_JSON_CALLS = False
    slug, key = _serve(modern)  # discovery uses its own session; the pooled one opens on the first call

    response = call(key, f"mcp__{slug}__add", {"a": 1, "b": 1})

    assert response.json()["value"] == {"result": 2}
    [sent] = tool_calls(modern)
    assert not sent.plain


def test_warm_plain_calls_run_on_the_callers_thread_without_a_hop_to_the_loop(modern, monkeypatch):
    slug, key = _serve(modern)
    hops = []
    hop = BackgroundLoop.run
    monkeypatch.setattr(BackgroundLoop, "run", lambda self, coro, **kw: hops.append(1) or hop(self, coro, **kw))

    answers = [call(key, f"mcp__{slug}__add", {"a": n, "b": 1}).json()["value"] for n in range(3)]

    assert answers == [{"result": 1}, {"result": 2}, {"result": 3}]
    assert len(hops) == 1  # the first call opens the pooled session on the loop; the next ones skip it
    assert [request.plain for request in tool_calls(modern)] == [True, True, True]


# `warm`: a call before the upstream changes its mind, so the change meets a call made on the
# caller's thread (the runner's fast path) rather than the first one, which the loop makes.
@pytest.mark.parametrize("warm", [False, True], ids=["on-loop", "fast-path"])
@pytest.mark.parametrize("status", [406, 404, 400])
def test_a_refused_plain_post_runs_once_through_the_sdk_and_later_calls_go_there_directly(modern, status, warm):
    slug, key = _serve(modern)
    if warm:
        assert call(key, f"mcp__{slug}__counted", {"tag": "warm"}).status_code == 200
    modern.refuse_plain = status

    first = call(key, f"mcp__{slug}__counted", {"tag": "one"})
    second = call(key, f"mcp__{slug}__counted", {"tag": "two"})

    assert first.status_code == 200
    assert second.status_code == 200
    assert modern.counted == ["warm", "one", "two"][0 if warm else 1 :]  # each ran exactly once
    assert [request.plain for request in tool_calls(modern)] == [True] * warm + [True, False, False]


@pytest.mark.parametrize("warm", [False, True], ids=["on-loop", "fast-path"])
def test_an_event_stream_answer_is_the_calls_answer_and_later_calls_go_through_the_sdk(modern, warm):
    slug, key = _serve(modern)
    if warm:
        assert call(key, f"mcp__{slug}__counted", {"tag": "warm"}).status_code == 200
    modern.stream_calls = True

    first = call(key, f"mcp__{slug}__counted", {"tag": "one"})
    second = call(key, f"mcp__{slug}__counted", {"tag": "two"})

    assert first.status_code == 200
    assert first.json()["value"] == {"content": [{"type": "text", "text": "ran one"}]}
    assert second.json()["value"] == {"content": [{"type": "text", "text": "ran two"}]}
    assert modern.counted == ["warm", "one", "two"][0 if warm else 1 :]
    assert [request.plain for request in tool_calls(modern)] == [True] * warm + [True, False]


def test_a_tool_error_on_the_plain_path_reaches_the_model_as_tool_error(modern):
    slug, key = _serve(modern)

    response = call(key, f"mcp__{slug}__fail", {})

    assert response.status_code == 200
    assert response.json()["error_code"] == "tool_error"
    assert tool_calls(modern)[0].plain


@pytest.mark.parametrize("legacy", [False, True], ids=["plain", "sdk"])
def test_an_answer_past_the_response_cap_is_cut_on_both_paths(allow_private, legacy):
    with McpUpstream(legacy=legacy) as upstream:
        slug, key = _serve(upstream)

        response = call(key, f"mcp__{slug}__big", {"size": MAX_UPSTREAM_RESPONSE_BYTES + 1})
        after = call(key, f"mcp__{slug}__add", {"a": 1, "b": 1})

        assert response.status_code == 502
        assert response.json()["error_code"] == "execution"
        assert response.json()["safe_message"] == "upstream MCP server: the upstream's answer is too large"
        assert after.json()["value"] == {"result": 2}  # the pool goes on with a fresh connection
        assert tool_calls(upstream)[0].plain is not legacy


def test_a_streamed_answer_is_read_by_the_sdks_own_event_parser() -> None:
    """CRLF and CR line ends, comments, other events and a multi-line data field, as httpx2's EventSource reads them."""
    result = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "ok"}]}})
    first, _, rest = result.partition(" ")  # split between JSON tokens, where a newline is whitespace
    second = rest
    body = (
        ": keep-alive\r\n\r\n"
        "event: ping\rdata: {}\r\r"
        'data: {"jsonrpc":"2.0","method":"notifications/progress","params":{}}\n\n'
        f"id: 1\ndata: {first}\ndata: {second}\n\n"
    ).encode()
    answer = Answer(200, b"OK", [(b"content-type", b"text/event-stream")], body)

    # data lines join with "\n": JSON whitespace, so the message split over two lines still parses
    assert _streamed_result(answer, 7).content[0].text == "ok"
    with pytest.raises(UpstreamError):
        _streamed_result(answer, 8)
