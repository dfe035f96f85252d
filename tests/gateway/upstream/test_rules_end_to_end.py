"""Argument rules and result guards end to end: REST exec, /tools/calls and /mcp, a real upstream that counts calls."""

from __future__ import annotations

import asyncio
import json

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from gateway.upstream.services import mcp_server_discover, mcp_server_register, mcp_tool_approve
from policies_app.approval_args import approval_args_view
from policies_app.models import ApprovalRequest, ArgumentRule, ResultGuard
from policies_app.services import argument_rule_save, result_guard_save
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.gateway.upstream.conftest import add
from tests.support.api import api_client, enable_tools
from tests.support.mcp_upstream import McpUpstream
from tools_app.models import ToolInvocation
from tools_app.services import tool_set_enabled

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
    "-----END RSA PRIVATE KEY-----"
)
MESSAGE = "numbers above 100 need another agent; ask the user for a smaller one"


def read_config(name: str) -> str:
    """Read a configuration file (it holds a cloud key and a private key)."""
    return f"file {name}\naws_access_key_id = {AWS_KEY}\n{PEM}\n"


@pytest.fixture
def upstream():
    with McpUpstream(legacy=False) as server:
        server.server.add_tool(add)
        server.server.add_tool(read_config, structured_output=False)
        yield server


@pytest.fixture
def caller(db):
    tenant = TenantFactory(slug="acme")
    account, key = service_account_with_key(tenant, name="agent")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["mcp__up__*"])
    return tenant, account, key


@pytest.fixture
def ready(settings, upstream, caller):
    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = True
    server, _ = mcp_server_register(slug="up", url=upstream.url)
    mcp_server_discover(server_id=server.pk)
    for tool_id in ("mcp__up__add", "mcp__up__read_config"):
        mcp_tool_approve(tool_id=tool_id, via="test")
    tool_set_enabled(tool_ids=["mcp__up__add", "mcp__up__read_config"], enabled=True)
    upstream.clear()
    return caller


def deny_big_numbers(tenant, **fields):
    values = {
        "name": "no-big-numbers",
        "tenant": tenant,
        "tools": ["mcp__up__add"],
        "condition": "args.a > 100 || args.b > 100",
        "action": "deny",
        "message": MESSAGE,
    }
    return argument_rule_save(rule=ArgumentRule(**{**values, **fields}))


def exec_call(key, tool_id, args, **extra):
    return api_client(key).post("/api/v1/tools/exec", {"tool_id": tool_id, "args": args, **extra}, format="json")


@pytest.mark.django_db
def test_a_denied_call_over_rest_never_reaches_the_upstream_and_the_model_reads_the_message(ready, upstream):
    tenant, _account, key = ready
    rule = deny_big_numbers(tenant)

    response = exec_call(key, "mcp__up__add", {"a": 101, "b": 1}, tool_call_id="big_1")

    assert response.status_code == 403
    assert response.json()["error_code"] == "policy_denied"
    assert response.json()["safe_message"] == MESSAGE
    assert upstream.calls() == 0
    row = ToolInvocation.objects.get(tool_call_id="big_1")
    assert (row.decision, row.executed, row.rule_id, row.rule_action) == ("deny", False, str(rule.pk), "deny")

    # a call the rule does not match runs, and its row names no rule
    response = exec_call(key, "mcp__up__add", {"a": 2, "b": 40}, tool_call_id="small_1")
    assert response.json()["value"] == {"result": 42}
    assert upstream.calls("add") == 1
    row = ToolInvocation.objects.get(tool_call_id="small_1")
    assert (row.rule_id, row.rule_action) == ("", "")


@pytest.mark.django_db
def test_an_allow_rule_of_the_service_account_is_an_exception_to_the_tenants_deny(ready, upstream):
    tenant, account, key = ready
    deny_big_numbers(tenant)
    exception = argument_rule_save(
        rule=ArgumentRule(
            name="agent-may-add-big",
            tenant=tenant,
            service_account=account,
            tools=["mcp__up__add"],
            condition="args.a <= 1000",
            action="allow",
        )
    )

    response = exec_call(key, "mcp__up__add", {"a": 500, "b": 1}, tool_call_id="big_ok")

    assert response.json()["value"] == {"result": 501}
    row = ToolInvocation.objects.get(tool_call_id="big_ok")
    assert (row.rule_id, row.rule_action, row.executed) == (str(exception.pk), "allow", True)


@pytest.mark.django_db
def test_a_condition_that_errors_refuses_the_call_over_rest(ready, upstream):
    tenant, _account, key = ready
    deny_big_numbers(tenant, condition="args.c > 1")  # the tool has no argument c

    response = exec_call(key, "mcp__up__add", {"a": 1, "b": 1})

    assert response.status_code == 403
    assert 'no field "c"' in response.json()["safe_message"]
    assert upstream.calls() == 0


@pytest.mark.django_db
def test_a_denied_call_in_a_models_turn_answers_the_message_and_never_runs(ready, upstream):
    tenant, _account, key = ready
    deny_big_numbers(tenant)
    message = {
        "role": "assistant",
        "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "mcp__up__add", "arguments": '{"a": 7, "b": 300}'}}
        ],
    }

    response = api_client(key).post("/api/v1/tools/calls", {"format": "openai", "message": message}, format="json")

    assert response.status_code == 200
    [result] = response.json()["results"]
    assert MESSAGE in result["content"]
    assert json.loads(result["content"])["error_code"] == "policy_denied"
    assert upstream.calls() == 0


@pytest.mark.django_db(transaction=True)
def test_a_denied_call_over_mcp_is_an_error_result_with_the_message_and_never_runs(ready, upstream, live_server):
    tenant, _account, key = ready
    deny_big_numbers(tenant)

    async def scenario():
        async with (
            create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as http,
            Client(streamable_http_client(f"{live_server.url}/mcp", http_client=http), mode="auto") as client,
        ):
            refused = await client.call_tool("mcp__up__add", {"a": 1000, "b": 1})
            allowed = await client.call_tool("mcp__up__add", {"a": 1, "b": 1})
            return refused, allowed

    refused, allowed = asyncio.run(scenario())

    assert refused.is_error is True
    assert MESSAGE in refused.content[0].text
    assert allowed.is_error is False
    assert upstream.calls("add") == 1  # only the allowed one


@pytest.mark.django_db
def test_require_approval_opens_an_approval_with_the_exact_arguments_and_runs_once_approved(ready, upstream):
    tenant, _account, key = ready
    rule = deny_big_numbers(tenant, action="require_approval", message="large sums need an operator")
    args = {"a": 250, "b": 5}

    response = exec_call(key, "mcp__up__add", args, tool_call_id="ask_1")

    assert response.status_code == 202
    assert response.json()["error_code"] == "approval_required"
    approval = ApprovalRequest.objects.get(pk=response.json()["approval_id"])
    assert approval.required_because == "rule no-big-numbers: large sums need an operator"
    assert approval.approver == "operator"
    assert json.loads(approval_args_view(approval).text) == args
    assert upstream.calls() == 0
    row = ToolInvocation.objects.get(tool_call_id="ask_1")
    assert (row.decision, row.rule_id, row.rule_action) == ("require_approval", str(rule.pk), "require_approval")

    ApprovalRequest.objects.filter(pk=approval.pk).update(status=ApprovalRequest.Status.APPROVED)
    response = exec_call(key, "mcp__up__add", args, tool_call_id="ask_1")
    assert response.json()["value"] == {"result": 255}
    assert upstream.calls("add") == 1


@pytest.mark.django_db
def test_require_confirmation_asks_the_person_and_without_one_refuses(ready, upstream):
    tenant, _account, key = ready
    deny_big_numbers(tenant, action="require_confirmation", message="confirm large sums")

    response = exec_call(key, "mcp__up__add", {"a": 250, "b": 5})

    assert response.status_code == 403
    assert "confirmation of the person this call is for" in response.json()["safe_message"]
    assert upstream.calls() == 0


@pytest.mark.django_db
def test_an_aws_key_and_a_pem_key_in_an_upstream_result_are_redacted_and_the_audit_records_it(ready, upstream):
    _tenant, _account, key = ready
    guard = result_guard_save(
        guard=ResultGuard(name="no-secrets", tools=["*"], detectors=["aws_access_key", "private_key"], action="redact")
    )

    response = exec_call(key, "mcp__up__read_config", {"name": "prod.ini"}, tool_call_id="read_1")

    assert response.status_code == 200, response.json()
    text = response.json()["value"]["content"][0]["text"]
    assert text == "file prod.ini\naws_access_key_id = [redacted: aws key]\n[redacted: private key]\n"
    assert AWS_KEY not in response.content.decode()
    assert "PRIVATE KEY" not in response.content.decode()
    assert upstream.calls("read_config") == 1
    row = ToolInvocation.objects.get(tool_call_id="read_1")
    assert row.guardrail == {"action": "redact", "guards": [str(guard.pk)], "found": {"aws key": 1, "private key": 1}}
    assert AWS_KEY not in json.dumps(row.content)
    assert "PRIVATE KEY" not in json.dumps(row.content)


@pytest.mark.django_db
def test_a_withholding_guard_answers_a_tool_error_the_model_reads(ready, upstream):
    tenant, _account, key = ready
    result_guard_save(
        guard=ResultGuard(
            name="withhold-keys",
            tenant=tenant,
            tools=["mcp__up__read_config"],
            detectors=["private_key"],
            action="withhold",
            message="that file holds a private key; it was not shown",
        )
    )

    response = exec_call(key, "mcp__up__read_config", {"name": "id_rsa"})

    body = response.json()
    assert (response.status_code, body["error_code"]) == (200, "tool_error")
    assert body["content"] == [{"type": "text", "text": "that file holds a private key; it was not shown"}]
    assert "PRIVATE KEY" not in response.content.decode()


@pytest.mark.django_db
def test_a_guard_applies_to_a_builtin_tool_as_to_an_upstream_one(caller):
    # given a built-in tool whose answer carries the time zone, and an operator's pattern for it
    tenant, _account, key = caller
    enable_tools("core__get_current_time")
    ToolPolicyFactory(service_account=_account, tenant=tenant, allowed_tools=["core__get_current_time"])
    guard = result_guard_save(
        guard=ResultGuard(name="zones", tools=["core__*"], patterns=[r"Europe/[A-Za-z]+"], action="record")
    )

    response = exec_call(key, "core__get_current_time", {"timezone": "Europe/Paris"}, tool_call_id="t_1")

    assert response.json()["value"]["timezone"] == "Europe/Paris"  # record: the result passes as it was
    row = ToolInvocation.objects.get(tool_call_id="t_1")
    assert row.guardrail == {"action": "record", "guards": [str(guard.pk)], "found": {"zones pattern 1": 1}}

    guard.action = "redact"
    result_guard_save(guard=guard)
    response = exec_call(key, "core__get_current_time", {"timezone": "Europe/Paris"})
    assert response.json()["value"]["timezone"] == "[redacted: zones pattern 1]"


@pytest.mark.django_db
def test_a_secret_in_the_arguments_refuses_the_call_before_the_upstream_or_only_is_recorded(ready, upstream):
    _tenant, _account, key = ready
    guard = result_guard_save(
        guard=ResultGuard(
            name="no-secrets-in",
            tools=["mcp__up__read_config"],
            detectors=["aws_access_key", "private_key"],
            action="redact",
            arguments="refuse",
        )
    )

    response = exec_call(key, "mcp__up__read_config", {"name": f"backup-{AWS_KEY}.ini"}, tool_call_id="arg_1")

    assert response.status_code == 403, response.json()
    assert response.json()["error_code"] == "policy_denied"
    assert response.json()["safe_message"] == "the arguments carry a secret (aws key); send the call without it"
    assert upstream.calls() == 0
    row = ToolInvocation.objects.get(tool_call_id="arg_1")
    assert (row.decision, row.executed) == ("deny", False)
    assert row.guardrail == {"arguments": {"action": "refuse", "guards": [str(guard.pk)], "found": {"aws key": 1}}}

    guard.arguments = "record"
    result_guard_save(guard=guard)
    response = exec_call(key, "mcp__up__read_config", {"name": f"backup-{AWS_KEY}.ini"}, tool_call_id="arg_2")

    assert response.status_code == 200, response.json()
    assert upstream.calls("read_config") == 1
    row = ToolInvocation.objects.get(tool_call_id="arg_2")
    assert row.guardrail["arguments"] == {"action": "record", "guards": [str(guard.pk)], "found": {"aws key": 1}}
    assert row.guardrail["action"] == "redact"  # the result's own key and PEM block, redacted as before


@pytest.mark.django_db
def test_a_replay_after_a_deny_rule_was_saved_is_refused_with_its_message(ready, upstream):
    tenant, _account, key = ready
    first = exec_call(key, "mcp__up__add", {"a": 2, "b": 40}, tool_call_id="again_1")
    assert first.json()["value"] == {"result": 42}
    replayed = exec_call(key, "mcp__up__add", {"a": 2, "b": 40}, tool_call_id="again_1")
    assert replayed.json()["value"] == {"result": 42}

    rule = deny_big_numbers(tenant, condition="args.a + args.b > 10")
    refused = exec_call(key, "mcp__up__add", {"a": 2, "b": 40}, tool_call_id="again_1")

    assert refused.status_code == 403
    assert (refused.json()["error_code"], refused.json()["safe_message"]) == ("policy_denied", MESSAGE)
    assert "42" not in refused.content.decode()
    assert upstream.calls("add") == 1
    decisions = list(
        ToolInvocation.objects.filter(tool_call_id="again_1").order_by("started_at").values_list("decision", "rule_id")
    )
    assert decisions[-1] == ("deny", str(rule.pk))
    assert [decision for decision, _ in decisions] == ["allow", "replayed", "deny"]
