"""A whole tool-calling round with each official SDK against a fake model server on loopback.

The SDK sends Toolgate's catalog (`GET /api/v1/tools?format=...`) as its
`tools`, the fake model answers tool calls, `POST /api/v1/tools/calls` runs
them, and the SDK sends the answered results as the next request. What the
fake server receives is what the model's API would: the catalog entries
exactly, and result messages that the SDK's own param types accept.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types import MessageParam, ToolResultBlockParam
from openai.types.chat import ChatCompletionMessageParam
from openai.types.responses import ResponseInputItemParam
from pydantic import TypeAdapter

from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import api_client, enable_tools
from tests.support.loopback import Answer, LoopbackServer, RecordedRequest, json_answer
from tools_app.models import ToolInvocation

pytestmark = pytest.mark.django_db

GOOD_ARGS = '{"timezone": "UTC"}'
BAD_ARGS = '{"timezone": '
INVALID_ARGS = json.dumps({"ok": False, "error_code": "invalid_json", "message": "Invalid tool arguments JSON"})


@pytest.fixture
def key():
    tenant = TenantFactory(slug="acme")
    enable_tools("core__get_current_time")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["core__get_current_time"])
    _account, clear_key = service_account_with_key(tenant, name="agent")
    return clear_key


@pytest.fixture
def model():
    with LoopbackServer() as server:
        yield server


def catalog(key: str, wire_format: str) -> list[dict[str, Any]]:
    response = api_client(key).get("/api/v1/tools", {"format": wire_format})
    assert response.status_code == 200
    return response.json()["tools"]


def run_calls(key: str, wire_format: str, message: Any) -> dict[str, Any]:
    response = api_client(key).post(
        "/api/v1/tools/calls", {"format": wire_format, "message": message, "run_id": "run_sdk"}, format="json"
    )
    assert response.status_code == 200, response.json()
    return response.json()


def audited() -> list[tuple[str, bool, str]]:
    return [(row.tool_call_id, row.ok, row.error_code) for row in ToolInvocation.objects.order_by("id")]


# --- Chat Completions ------------------------------------------------------------------------


def chat_completions(request: RecordedRequest) -> Answer:
    answered = any(message["role"] == "tool" for message in request.json()["messages"])
    if answered:
        message: dict[str, Any] = {"role": "assistant", "content": "It is noon in UTC."}
        finish_reason = "stop"
    else:
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "core__get_current_time", "arguments": GOOD_ARGS},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "core__get_current_time", "arguments": BAD_ARGS},
                },
            ],
        }
        finish_reason = "tool_calls"
    return json_answer(
        200,
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": "gpt-test",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        },
    )


def test_openai_chat_completions_round_trip(key, model):
    # given the catalog in Chat Completions format, sent by the SDK
    model.handle("POST", "/v1/chat/completions", chat_completions)
    client = openai.OpenAI(api_key="sk-test", base_url=f"{model.url}/v1", max_retries=0)
    tools = catalog(key, "openai")
    messages: list[Any] = [{"role": "user", "content": "What time is it?"}]

    # when the model answers two tool calls and Toolgate runs them
    first = client.chat.completions.create(model="gpt-test", messages=messages, tools=tools)
    assistant = first.choices[0].message.model_dump(mode="json", exclude_none=True)
    answered = run_calls(key, "openai", assistant)
    final = client.chat.completions.create(
        model="gpt-test", messages=[*messages, assistant, *answered["results"]], tools=tools
    )

    # then the model saw the catalog, then exactly the results, which the SDK's types accept
    assert final.choices[0].message.content == "It is noon in UTC."
    first_request, second_request = (request.json() for request in model.requests)
    assert first_request["tools"] == tools
    sent_results = second_request["messages"][2:]
    assert sent_results == answered["results"]
    assert [message["tool_call_id"] for message in sent_results] == ["call_1", "call_2"]
    assert json.loads(sent_results[0]["content"])["timezone"] == "UTC"
    assert sent_results[1]["content"] == INVALID_ARGS
    message_param = TypeAdapter(ChatCompletionMessageParam)
    for message in sent_results:
        assert message_param.validate_python(message) == message
    assert audited() == [("call_1", True, ""), ("call_2", False, "invalid_json")]


# --- Responses --------------------------------------------------------------------------------


def responses(request: RecordedRequest) -> Answer:
    items = request.json()["input"]
    answered = any(isinstance(item, dict) and item.get("type") == "function_call_output" for item in items)
    if answered:
        output: list[dict[str, Any]] = [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "It is noon in UTC.", "annotations": []}],
            }
        ]
    else:
        output = [
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_A",
                "name": "core__get_current_time",
                "arguments": GOOD_ARGS,
                "status": "completed",
            },
            {
                "type": "function_call",
                "id": "fc_2",
                "call_id": "call_B",
                "name": "core__get_current_time",
                "arguments": BAD_ARGS,
                "status": "completed",
            },
        ]
    return json_answer(
        200,
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 1_700_000_000,
            "status": "completed",
            "model": "gpt-test",
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "metadata": {},
            "temperature": 1.0,
            "top_p": 1.0,
        },
    )


def test_openai_responses_round_trip(key, model):
    model.handle("POST", "/v1/responses", responses)
    client = openai.OpenAI(api_key="sk-test", base_url=f"{model.url}/v1", max_retries=0)
    tools = catalog(key, "openai_responses")
    user = {"role": "user", "content": "What time is it?"}

    first = client.responses.create(model="gpt-test", input=[user], tools=tools)
    output = [item.model_dump(mode="json", exclude_none=True) for item in first.output]
    answered = run_calls(key, "openai_responses", output)
    final = client.responses.create(model="gpt-test", input=[user, *output, *answered["results"]], tools=tools)

    assert final.output_text == "It is noon in UTC."
    first_request, second_request = (request.json() for request in model.requests)
    assert first_request["tools"] == tools
    sent_results = second_request["input"][3:]
    assert sent_results == answered["results"]
    assert [(item["type"], item["call_id"]) for item in sent_results] == [
        ("function_call_output", "call_A"),
        ("function_call_output", "call_B"),
    ]
    assert sent_results[1]["output"] == INVALID_ARGS
    input_item = TypeAdapter(ResponseInputItemParam)
    for item in sent_results:
        assert input_item.validate_python(item) == item
    assert audited() == [("call_A", True, ""), ("call_B", False, "invalid_json")]


# --- Anthropic Messages -------------------------------------------------------------------------

TOOL_USE_CONTENT = [
    {"type": "text", "text": "Let me check."},
    {"type": "tool_use", "id": "toolu_1", "name": "core__get_current_time", "input": {"timezone": "UTC"}},
    {"type": "tool_use", "id": "toolu_2", "name": "core__get_current_time", "input": {"timezone": 5}},
]


def _message(content: list[dict[str, Any]], stop_reason: str | None) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def anthropic_messages(request: RecordedRequest) -> Answer:
    answered = any(
        isinstance(message["content"], list) and any(block.get("type") == "tool_result" for block in message["content"])
        for message in request.json()["messages"]
    )
    if answered:
        return json_answer(200, _message([{"type": "text", "text": "It is noon in UTC."}], "end_turn"))
    return json_answer(200, _message(TOOL_USE_CONTENT, "tool_use"))


def test_anthropic_messages_round_trip(key, model):
    model.handle("POST", "/v1/messages", anthropic_messages)
    client = anthropic.Anthropic(api_key="sk-ant-test", base_url=model.url, max_retries=0)
    tools = catalog(key, "anthropic")
    user: MessageParam = {"role": "user", "content": "What time is it?"}

    first = client.messages.create(model="claude-test", max_tokens=256, messages=[user], tools=tools)
    assistant = {
        "role": "assistant",
        "content": [block.model_dump(mode="json", exclude_none=True) for block in first.content],
    }
    answered = run_calls(key, "anthropic", assistant["content"])
    final = client.messages.create(
        model="claude-test", max_tokens=256, messages=[user, assistant, *answered["results"]], tools=tools
    )

    assert final.content[0].text == "It is noon in UTC."
    first_request, second_request = (request.json() for request in model.requests)
    assert first_request["tools"] == tools
    [result_turn] = second_request["messages"][2:]
    assert result_turn == answered["results"][0]
    assert [(block["tool_use_id"], block["is_error"]) for block in result_turn["content"]] == [
        ("toolu_1", False),
        ("toolu_2", True),
    ]
    assert result_turn["role"] == "user"
    result_block = TypeAdapter(ToolResultBlockParam)
    for block in result_turn["content"]:
        assert result_block.validate_python(block) == block
    assert audited() == [("toolu_1", True, ""), ("toolu_2", False, "validation")]
