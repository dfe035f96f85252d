"""POST /api/v1/tools/calls against the real runtime: a model's turn in, result messages out, every call audited."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from runner.wire.turns import toolgate_call_id
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import api_client, enable_tools
from tools_app.models import ToolInvocation

pytestmark = pytest.mark.django_db

URL = "/api/v1/tools/calls"
CANARY = "canary-c4115"
INVALID_ARGS = json.dumps({"ok": False, "error_code": "invalid_json", "message": "Invalid tool arguments JSON"})


@pytest.fixture
def key():
    """A caller allowed the clock; core__wait is enabled but outside its policy."""
    tenant = TenantFactory(slug="acme")
    enable_tools("core__get_current_time", "core__wait")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["core__get_current_time"])
    _account, clear_key = service_account_with_key(tenant, name="agent")
    return clear_key


def run_turn(key: str, **body):
    return api_client(key).post(URL, body, format="json")


def chat_call(call_id: str, name: str, arguments: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def rows(tool_call_id: str) -> list[ToolInvocation]:
    return list(ToolInvocation.objects.filter(tool_call_id=tool_call_id).order_by("id"))


def test_chat_turn_runs_each_call_and_answers_tool_messages_in_order(key):
    # given a turn with a good call, a malformed one, and one outside the policy
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            chat_call("call_time", "core__get_current_time", '{"timezone": "UTC"}'),
            chat_call("call_bad", "core__get_current_time", f'{{"timezone": "{CANARY}"'),
            chat_call("call_wait", "core__wait", '{"ms": 1}'),
        ],
    }

    # when
    response = run_turn(key, format="openai", message=message, run_id="run_1")

    # then
    assert response.status_code == 200
    body = response.json()
    assert body["calls"] == [
        {"tool_call_id": "call_time", "tool_id": "core__get_current_time", "ok": True},
        {"tool_call_id": "call_bad", "tool_id": "core__get_current_time", "ok": False, "error_code": "invalid_json"},
        {"tool_call_id": "call_wait", "tool_id": "core__wait", "ok": False, "error_code": "policy_denied"},
    ]
    time_message, bad_message, wait_message = body["results"]
    assert set(time_message) == {"role", "tool_call_id", "content"}
    assert (time_message["role"], time_message["tool_call_id"]) == ("tool", "call_time")
    assert json.loads(time_message["content"])["timezone"] == "UTC"
    assert bad_message == {"role": "tool", "tool_call_id": "call_bad", "content": INVALID_ARGS}
    assert wait_message["tool_call_id"] == "call_wait"
    assert json.loads(wait_message["content"])["error_code"] == "policy_denied"
    # every call left its audit row under the model's id, in the run
    audited = [
        (row.tool_call_id, row.run_id, row.ok, row.error_code, row.executed)
        for row in ToolInvocation.objects.order_by("id")
    ]
    assert audited == [
        ("call_time", "run_1", True, "", True),
        ("call_bad", "run_1", False, "invalid_json", False),
        ("call_wait", "run_1", False, "policy_denied", False),
    ]
    assert CANARY not in response.content.decode()
    assert CANARY not in repr(list(ToolInvocation.objects.values()))


def test_repeating_a_turn_replays_the_calls_that_ran(key):
    message = {"role": "assistant", "tool_calls": [chat_call("call_once", "core__get_current_time", "{}")]}

    first = run_turn(key, format="openai", message=message)
    second = run_turn(key, format="openai", message=message)

    assert second.json() == first.json()
    assert [(row.executed, row.decision) for row in rows("call_once")] == [(True, "allow"), (False, "replayed")]


def test_responses_turn_maps_an_odd_call_id_and_answers_the_models_own(key):
    odd_id = "functions.core__get_current_time:0"
    output = [
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": odd_id,
            "name": "core__get_current_time",
            "arguments": '{"timezone": "Europe/Paris"}',
            "status": "completed",
        },
    ]

    response = run_turn(key, format="openai_responses", message={"output": output})

    mapped = toolgate_call_id(odd_id)
    assert mapped.startswith("tc_")
    [result] = response.json()["results"]
    assert set(result) == {"type", "call_id", "output"}
    assert (result["type"], result["call_id"]) == ("function_call_output", odd_id)
    assert json.loads(result["output"])["timezone"] == "Europe/Paris"
    assert response.json()["calls"] == [{"tool_call_id": mapped, "tool_id": "core__get_current_time", "ok": True}]
    assert api_client(key).get(f"/api/v1/invocations/{mapped}").json()["ok"] is True


ARGUMENTS_THE_BODY_PARSER_REFUSES = [
    '{"timezone": "\\ud800"}',  # an escaped lone surrogate: UTF-8 cannot encode it
    '{"timezone": "UTC\\u0000"}',  # an escaped NUL: PostgreSQL refuses it
    '{"timezone": "UTC", "timezone": "Europe/Paris"}',  # a duplicate key
    '{"timezone": NaN}',
    "[" * 40 + "]" * 40,  # nested deeper than the parser allows
]


@pytest.mark.parametrize("wire_format", ["openai", "openai_responses"])
@pytest.mark.parametrize("arguments", ARGUMENTS_THE_BODY_PARSER_REFUSES)
def test_arguments_the_body_parser_would_refuse_answer_that_call_invalid_json_and_run_the_others(
    key, wire_format, arguments
):
    # given a turn whose first call's arguments string holds JSON the API refuses in a body
    calls = [("call_bad", arguments), ("call_good", '{"timezone": "UTC"}')]
    if wire_format == "openai":
        message = {"role": "assistant", "tool_calls": [chat_call(i, "core__get_current_time", a) for i, a in calls]}
    else:
        message = {
            "output": [
                {"type": "function_call", "call_id": i, "name": "core__get_current_time", "arguments": a}
                for i, a in calls
            ]
        }

    # when
    response = run_turn(key, format=wire_format, message=message)

    # then the bad call is refused on its own, the good one runs, and both are audited
    assert response.status_code == 200
    assert response.json()["calls"] == [
        {"tool_call_id": "call_bad", "tool_id": "core__get_current_time", "ok": False, "error_code": "invalid_json"},
        {"tool_call_id": "call_good", "tool_id": "core__get_current_time", "ok": True},
    ]
    audited = [(row.tool_call_id, row.error_code, row.executed) for row in ToolInvocation.objects.order_by("id")]
    assert audited == [("call_bad", "invalid_json", False), ("call_good", "", True)]


def test_anthropic_turn_answers_one_user_turn_with_is_error(key):
    content = [
        {"type": "text", "text": "Checking the time."},
        {"type": "tool_use", "id": "toolu_1", "name": "core__get_current_time", "input": {"timezone": "UTC"}},
        {"type": "tool_use", "id": "toolu_2", "name": "core__get_current_time", "input": {"timezone": 5}},
        {"type": "tool_use", "id": "toolu_3", "name": "core__nope", "input": {}},
    ]

    response = run_turn(key, format="anthropic", message=content)

    assert response.status_code == 200
    [turn] = response.json()["results"]
    assert turn["role"] == "user"
    assert [(block["tool_use_id"], block["is_error"]) for block in turn["content"]] == [
        ("toolu_1", False),
        ("toolu_2", True),
        ("toolu_3", True),
    ]
    assert [call.get("error_code") for call in response.json()["calls"]] == [None, "validation", "unavailable"]
    assert json.loads(turn["content"][2]["content"]) == {
        "ok": False,
        "error_code": "unavailable",
        "message": "no such tool; the catalog (GET /api/v1/tools, or MCP tools/list) lists the tools you may call",
    }


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        (
            {"format": "openai", "message": {"tool_calls": [chat_call("", "core__wait", CANARY)]}},
            [{"path": "message", "message": "message.tool_calls[0] has no call id"}],
        ),
        (
            {"format": "anthropic", "message": {"content": CANARY}},
            [
                {
                    "path": "message",
                    "message": "message must be a Messages content list (or an assistant message with one)",
                }
            ],
        ),
        (
            {"format": CANARY, "message": []},
            [{"path": "format", "message": "must be openai, openai_responses or anthropic"}],
        ),
        ({"format": "openai"}, [{"path": "message", "message": "required"}]),
        (
            {"format": "openai", "message": 0},
            [{"path": "message", "message": "must be an object or a list: the turn as the model's API returned it"}],
        ),
        (
            {"format": "openai", "message": {}, "connection_id": "c1"},
            [{"path": "grant_id", "message": "required whenever connection_id is given"}],
        ),
        (  # an unknown key is never echoed: a caller may put anything in one
            {"format": "openai", "message": {}, "tool_calls": []},
            [
                {
                    "path": "(unknown field)",
                    "message": "unknown field; the fields are: format, message, run_id, connection_id, connection_ids, "
                    "grant_id",
                }
            ],
        ),
    ],
)
def test_a_body_that_is_not_a_turn_answers_422_and_runs_nothing(key, body, errors):
    response = run_turn(key, **body)

    assert response.status_code == 422
    assert response.json() == {"error_code": "validation", "safe_message": "the request is invalid", "errors": errors}
    assert CANARY not in response.content.decode()
    assert not ToolInvocation.objects.exists()


def test_a_body_that_is_not_json_answers_invalid_json(key):
    response = api_client(key).post(URL, data=b"{", content_type="application/json")

    assert response.status_code == 400
    assert response.json()["error_code"] == "invalid_json"


def test_a_turn_without_calls_answers_empty_lists(key):
    response = run_turn(key, format="openai", message={"role": "assistant", "content": "Done."})

    assert response.json() == {"results": [], "calls": []}


def test_calls_need_a_key():
    response = APIClient().post(URL, {"format": "openai", "message": {}}, format="json")

    assert response.status_code == 401
    assert response.json()["error_code"] == "unauthenticated"


ZONE_REFUSAL = (
    "arguments do not match the tool's schema: timezone: unknown IANA time zone; "
    "send a tz database name such as Europe/Paris or UTC"
)


@pytest.mark.parametrize("wire_format", ["openai", "openai_responses", "anthropic"])
def test_a_validation_refusal_names_the_wrong_argument_in_the_text_the_model_reads(key, wire_format):
    arguments = {"timezone": "Mars/Base"}
    if wire_format == "openai":
        message = {
            "role": "assistant",
            "tool_calls": [chat_call("c1", "core__get_current_time", json.dumps(arguments))],
        }
    elif wire_format == "openai_responses":
        message = [
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "core__get_current_time",
                "arguments": json.dumps(arguments),
            }
        ]
    else:
        message = [{"type": "tool_use", "id": "c1", "name": "core__get_current_time", "input": arguments}]

    response = run_turn(key, format=wire_format, message=message)

    [result] = response.json()["results"]
    text = {
        "openai": lambda: result["content"],
        "openai_responses": lambda: result["output"],
        "anthropic": lambda: result["content"][0]["content"],
    }[wire_format]()
    assert json.loads(text) == {"ok": False, "error_code": "validation", "message": ZONE_REFUSAL}
    assert "Mars/Base" not in response.content.decode()  # named, never echoed
