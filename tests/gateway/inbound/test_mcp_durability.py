"""A `tools/call` over MCP answers only once its audit row is committed, and an outage there is JSON-RPC.

The MCP endpoints run the API's middleware list, so the call's audit row is
sent ahead of the answer and awaited as the answer leaves
(config.middleware.answer_after_durable_writes). A commit refused after the
view built its result must reach an MCP client as the endpoint's own outage
error (HTTP 503, a JSON-RPC error object), as when the row was awaited in
place, never as the REST envelope and never as the result of a call without
its row.
"""

from __future__ import annotations

import json

import pytest
from django.test import Client

from runner.pipeline import DEPENDENCY_MESSAGE
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import enable_tools
from tools_app.models import ToolInvocation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("postgres_required")]

TIME = "core__get_current_time"
CALL = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": TIME, "arguments": {}}}


@pytest.fixture
def client() -> Client:
    enable_tools(TIME)
    tenant = TenantFactory(slug="durable-mcp")
    _account, key = service_account_with_key(tenant)
    ToolPolicyFactory(tenant=tenant, allowed_tools=[TIME])
    return Client(HTTP_AUTHORIZATION=f"Bearer {key}")


def _call(client: Client):
    return client.post(
        "/mcp", json.dumps(CALL), content_type="application/json", headers={"MCP-Protocol-Version": "2025-11-25"}
    )


def test_a_tools_call_whose_audit_row_fails_at_its_commit_answers_the_json_rpc_outage(client, commits_refused):
    response = _call(client)

    assert response.status_code == 503, response.content
    assert response["Content-Type"] == "application/json"
    assert response["Retry-After"]
    body = response.json()
    assert body["jsonrpc"] == "2.0"
    assert body["error"]["message"] == DEPENDENCY_MESSAGE
    assert "result" not in body  # nothing of the tool's result leaves without its row
    assert not ToolInvocation.objects.filter(tool_id=TIME).exists()


def test_the_same_call_answers_its_result_once_commits_succeed(client):
    response = _call(client)

    assert response.status_code == 200, response.content
    assert response.json()["result"]["isError"] is False
    row = ToolInvocation.objects.get(tool_id=TIME)
    assert (row.ok, row.executed) == (True, True)
