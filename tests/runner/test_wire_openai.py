"""Golden tests of the OpenAI wire adapter: exact shapes, decoded calls, no leaked arguments.

No database and no Django: the adapter is pure Python, so these run with `-p no:django`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from runner.errors import ToolgateError
from runner.types import ErrorCode, FieldError, MalformedArgs, ToolEffect, ToolExecResult, ToolSpec
from runner.wire.common import INVALID_ARGS, DecodedCall, WireFormatError
from runner.wire.openai import decode_message_tool_calls, encode_tool, encode_tool_result, encode_tools

WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name"},
        "units": {"type": "string", "enum": ["metric", "imperial"]},
    },
    "required": ["city"],
    "additionalProperties": False,
}


def _spec(name: str, schema: dict[str, Any]) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=f"{name} description",
        input_schema=schema,
        effect=ToolEffect.READ_ONLY,
        requires_connection=False,
        provider=None,
        schema_hash="0" * 64,
    )


# --- encoder -------------------------------------------------------------------


def test_encode_tool_has_exact_key_sets_and_copies_the_schema() -> None:
    spec = _spec("core__get_weather", WEATHER_SCHEMA)

    encoded = encode_tool(spec)

    assert set(encoded) == {"type", "function"}
    assert encoded["type"] == "function"
    assert set(encoded["function"]) == {"name", "description", "parameters"}
    assert encoded["function"]["name"] == "core__get_weather"
    assert encoded["function"]["description"] == "core__get_weather description"
    assert encoded["function"]["parameters"] == WEATHER_SCHEMA
    assert encoded["function"]["parameters"] is not spec.input_schema
    assert type(encoded["function"]["parameters"]) is dict


def test_mutating_encoded_parameters_does_not_change_the_spec() -> None:
    spec = _spec("core__get_weather", json.loads(json.dumps(WEATHER_SCHEMA)))

    encoded = encode_tool(spec)
    encoded["function"]["parameters"]["properties"]["city"]["type"] = "integer"
    encoded["function"]["parameters"]["required"].append("units")
    encoded["function"]["parameters"]["extra"] = True

    assert spec.input_schema == WEATHER_SCHEMA


def test_encode_tools_keeps_order_and_shape() -> None:
    specs = [_spec("core__a", {"type": "object", "properties": {}}), _spec("core__b", WEATHER_SCHEMA)]

    encoded = encode_tools(specs)

    assert [tool["function"]["name"] for tool in encoded] == ["core__a", "core__b"]
    assert encoded == [encode_tool(spec) for spec in specs]
    assert json.loads(json.dumps(encoded)) == encoded


# --- decoder ------------------------------------------------------------------


def _message(*tool_calls: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": list(tool_calls)}


def _call(call_id: Any, function: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": function}


def test_decode_message_tool_calls_reads_every_call_in_order() -> None:
    message = _message(
        _call("call_1", {"name": "core__get_weather", "arguments": '{"city": "Oslo"}'}),
        _call("call_2", {"name": "core__get_time", "arguments": ""}),
        _call("call_3", {"name": "core__a", "arguments": '{"SECRET-MARKER-123'}),
        {"type": "function", "function": {"name": "core__b", "arguments": "[]"}},
    )

    calls = decode_message_tool_calls(message)

    assert calls == [
        DecodedCall("message.tool_calls[0]", "call_1", "core__get_weather", {"city": "Oslo"}),
        DecodedCall("message.tool_calls[1]", "call_2", "core__get_time", {}),
        DecodedCall("message.tool_calls[2]", "call_3", "core__a", INVALID_ARGS),
        DecodedCall("message.tool_calls[3]", "", "core__b", INVALID_ARGS),  # the turn refuses a call without id
    ]
    assert "SECRET-MARKER-123" not in repr(calls)


def test_invalid_json_arguments_are_malformed_without_the_raw_text() -> None:
    [call] = decode_message_tool_calls(
        _message(_call("call_bad", {"name": "core__a", "arguments": '{"token": "SECRET-MARKER-123", oops'}))
    )

    assert call.args == MalformedArgs(ErrorCode.INVALID_JSON, "Invalid tool arguments JSON")
    assert "SECRET-MARKER-123" not in repr(call)


@pytest.mark.parametrize("arguments", ["[1,2]", '"a string"', "42", "null", "true"])
def test_non_object_json_arguments_are_invalid_json(arguments: str) -> None:
    [call] = decode_message_tool_calls(_message(_call("call_a", {"name": "core__a", "arguments": arguments})))

    assert call.args == INVALID_ARGS


@pytest.mark.parametrize(
    "function", [{"name": "core__a", "arguments": ""}, {"name": "core__a", "arguments": " \n\t"}, {"name": "core__a"}]
)
def test_empty_or_absent_arguments_are_an_empty_object(function: dict[str, Any]) -> None:
    [call] = decode_message_tool_calls(_message(_call("call_a", function)))

    assert call.args == {}


def test_a_call_without_a_name_is_read_with_an_empty_name() -> None:
    [call] = decode_message_tool_calls(_message(_call("call_a", {"arguments": "{}"})))

    assert (call.call_id, call.name) == ("call_a", "")  # the turn refuses it: there is no tool to run


def test_decode_message_without_tool_calls_is_empty() -> None:
    assert decode_message_tool_calls({"role": "assistant", "content": "hi"}) == []
    assert decode_message_tool_calls({"role": "assistant", "content": "hi", "tool_calls": None}) == []


@pytest.mark.parametrize(
    "message",
    [
        pytest.param(["SECRET-MARKER-123"], id="message-not-object"),
        pytest.param({"role": "assistant", "tool_calls": "SECRET-MARKER-123"}, id="tool-calls-not-list"),
        pytest.param({"role": "assistant", "tool_calls": ["SECRET-MARKER-123"]}, id="call-not-object"),
        pytest.param(
            _message({"id": "c", "type": "custom", "custom": {"input": "SECRET-MARKER-123"}}), id="not-function"
        ),
        pytest.param(_message(_call(7, {"name": "core__a"})), id="id-not-str"),
        pytest.param(_message(_call("c", "SECRET-MARKER-123")), id="function-not-object"),
        pytest.param(_message(_call("c", {"name": ["core__a"]})), id="name-not-str"),
        pytest.param(
            _message(_call("c", {"name": "n", "arguments": {"k": "SECRET-MARKER-123"}})), id="arguments-not-str"
        ),
    ],
)
def test_decode_message_rejects_malformed_shapes_without_payload(message: Any) -> None:
    with pytest.raises(WireFormatError) as excinfo:
        decode_message_tool_calls(message)

    assert isinstance(excinfo.value, ValueError)
    assert isinstance(excinfo.value, ToolgateError)
    assert "SECRET-MARKER-123" not in str(excinfo.value)
    assert "core__a" not in str(excinfo.value)


def test_every_call_is_checked_to_be_a_function_call_before_any_is_read() -> None:
    message = _message(_call(7, {"name": "core__a"}), {"id": "c", "type": "custom"})

    with pytest.raises(WireFormatError) as excinfo:
        decode_message_tool_calls(message)

    assert str(excinfo.value) == "message.tool_calls[1] is not a function tool call"


# --- tool result ---------------------------------------------------------------


def test_encode_tool_result_ok() -> None:
    result = ToolExecResult(
        tool_call_id="call_weather_1",
        tool_id="core__get_weather",
        ok=True,
        value={"temperature_c": 21.5, "conditions": ["sunny"]},
        executed=True,
    )

    message = encode_tool_result(result)

    assert set(message) == {"role", "tool_call_id", "content"}
    assert message["role"] == "tool"
    assert message["tool_call_id"] == "call_weather_1"
    assert isinstance(message["content"], str)
    assert json.loads(message["content"]) == {"temperature_c": 21.5, "conditions": ["sunny"]}


def test_encode_tool_result_error() -> None:
    result = ToolExecResult(
        tool_call_id="call_bad",
        tool_id="core__a",
        ok=False,
        error_code=ErrorCode.INVALID_JSON,
        safe_message="Invalid tool arguments JSON",
        errors=(FieldError(path="city", message="required"),),
    )

    message = encode_tool_result(result)

    assert set(message) == {"role", "tool_call_id", "content"}
    assert message["role"] == "tool"
    assert message["tool_call_id"] == "call_bad"
    assert json.loads(message["content"]) == {
        "ok": False,
        "error_code": "invalid_json",
        "message": "Invalid tool arguments JSON: city: required",  # the model reads which argument is wrong
    }
