"""A hostile upstream that misframes its answers, called by two tenants through POST /api/v1/tools/exec.

The upstream keeps sessions, so its calls go through the SDK's client (httpx2):
what is checked here is that client's transport (core/framing.py)
and the session pool's key (one session per tenant).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from gateway.upstream.services import mcp_server_discover, mcp_server_register, mcp_tool_approve
from gateway.upstream.source import SURROGATE_IN_ANSWER
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import api_client
from tests.support.misframing_upstream import SMUGGLED_VALUE, MisframingUpstream
from tools_app.services import tool_set_enabled

pytestmark = pytest.mark.django_db

URL = "/api/v1/tools/exec"
OPERATOR_TOKEN = "op-token-5f4e3d2c1b0a9f8e"
TOOL = "mcp__evil__add"


@pytest.fixture
def upstream() -> Iterator[MisframingUpstream]:
    with MisframingUpstream() as server:
        yield server


@pytest.fixture
def tenants(allow_private, upstream):
    """acme and beta, each with an agent allowed the upstream's `add` (one operator token for both)."""
    server, _ = mcp_server_register(slug="evil", url=upstream.url, operator_token=OPERATOR_TOKEN)
    mcp_server_discover(server_id=server.pk)
    mcp_tool_approve(tool_id=TOOL, via="test")
    tool_set_enabled(tool_ids=[TOOL], enabled=True)
    keys = {}
    for slug in ("acme", "beta"):
        tenant = TenantFactory(slug=slug)
        _account, keys[slug] = service_account_with_key(tenant, name="agent")
        ToolPolicyFactory(tenant=tenant, allowed_tools=[TOOL])
    return keys


def call(key: str, a: int, b: int):
    return api_client(key).post(URL, {"tool_id": TOOL, "args": {"a": a, "b": b}}, format="json")


@pytest.mark.parametrize("mode", ["twice", "clte"])
def test_a_smuggled_answer_fails_its_call_and_never_reaches_the_next_tenant(tenants, upstream, mode):
    # given: acme's next answer is followed, in the same write, by an answer to the next request id
    upstream.mode, upstream.once = mode, True

    # when: acme calls, then beta, then acme again
    acme = call(tenants["acme"], 2, 40)
    beta = call(tenants["beta"], 1, 1)
    acme_again = call(tenants["acme"], 3, 4)

    # then: acme's misframed exchange is refused and its connection dropped; nobody reads the smuggled answer
    assert (acme.status_code, acme.json()["error_code"]) == (502, "execution")
    assert acme.json()["safe_message"] == (
        "upstream MCP server: the upstream's HTTP answer was framed ambiguously (two answers, or two lengths); "
        "its connection was closed"
    )
    assert (beta.status_code, beta.json()["value"]) == (200, {"result": 2})
    assert (acme_again.status_code, acme_again.json()["value"]) == (200, {"result": 7})
    for response in (acme, beta, acme_again):
        assert "SMUGGLED" not in json.dumps(response.json())
        assert str(SMUGGLED_VALUE) not in json.dumps(response.json())
    first, second, third = upstream.calls()
    assert len({first.connection, second.connection, third.connection}) == 3  # the misframed one was closed


def test_each_tenant_has_its_own_session_and_connections_even_with_one_operator_token(tenants, upstream):
    for _ in range(2):
        assert call(tenants["acme"], 1, 2).status_code == 200
        assert call(tenants["beta"], 1, 2).status_code == 200

    calls = upstream.calls()
    acme_calls, beta_calls = calls[0::2], calls[1::2]
    assert {c.authorization for c in calls} == {f"Bearer {OPERATOR_TOKEN}"}
    assert len({c.session for c in acme_calls}) == len({c.session for c in beta_calls}) == 1
    assert {c.session for c in acme_calls}.isdisjoint({c.session for c in beta_calls})
    assert {c.connection for c in acme_calls}.isdisjoint({c.connection for c in beta_calls})


def test_a_lone_surrogate_in_a_plain_json_answer_is_a_clear_execution_failure(allow_private, settings):
    """The plain path parses with json.loads, which takes `\\ud800` alone (the SDK's parser refuses it: -32700)."""
    settings.TOOLGATE_MCP_PLAIN_JSON_CALLS = True
    with MisframingUpstream(sessions=False) as upstream:
        server, _ = mcp_server_register(slug="evil", url=upstream.url, operator_token=OPERATOR_TOKEN)
        mcp_server_discover(server_id=server.pk)
        mcp_tool_approve(tool_id=TOOL, via="test")
        tool_set_enabled(tool_ids=[TOOL], enabled=True)
        tenant = TenantFactory(slug="acme")
        _account, key = service_account_with_key(tenant, name="agent")
        ToolPolicyFactory(tenant=tenant, allowed_tools=[TOOL])
        assert call(key, 1, 1).json()["value"] == {"result": 2}  # warm: the plain caller is set up
        upstream.mode = "surrogate"

        response = call(key, 2, 40)

    assert (response.status_code, response.json()["error_code"]) == (502, "execution")
    assert response.json()["safe_message"] == SURROGATE_IN_ANSWER
