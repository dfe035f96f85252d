"""Golden tests of the Anthropic Messages wire adapter: exact shapes, decoded tool uses, no leaked input.

Shapes are checked against the official `anthropic` SDK's types: a TypedDict
param validated by pydantic drops keys it does not know, so
`validate_python(x) == x` proves both the types and that no extra key is sent.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.types import MessageParam, ToolParam, ToolResultBlockParam
from pydantic import TypeAdapter

from runner.types import ErrorCode, ToolEffect, ToolExecResult, ToolSpec
from runner.wire.anthropic import (
    decode_content_tool_uses,
    encode_tool,
    encode_tool_result_block,
    encode_tool_results,
    encode_tools,
)
from runner.wire.common import INVALID_ARGS, DecodedCall, WireFormatError

TOOL_PARAM = TypeAdapter(ToolParam)
MESSAGE_PARAM = TypeAdapter(MessageParam)
RESULT_BLOCK = TypeAdapter(ToolResultBlockParam)

WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "units": {"type": "string", "enum": ["metric", "imperial"]}},
    "required": ["city"],
    "additionalProperties": False,
}
CANARY = "secret-canary-77"


def _spec(name: str, schema: dict[str, Any]) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=f"{name} description",
        input_schema=schema,
        effect=ToolEffect.EXTERNAL_SIDE_EFFECT,
        requires_connection=True,
        provider="github",
        schema_hash="0" * 64,
    )


# --- encoder -------------------------------------------------------------------


def test_encode_tool_has_exactly_the_messages_api_keys():
    spec = _spec("github__create_issue", WEATHER_SCHEMA)

    encoded = encode_tool(spec)

    assert encoded == {
        "name": "github__create_issue",
        "description": "github__create_issue description",
        "input_schema": WEATHER_SCHEMA,
    }
    assert TOOL_PARAM.validate_python(encoded) == encoded  # no key the SDK does not know
    assert encoded["input_schema"] is not spec.input_schema


def test_encoded_schema_is_a_copy():
    spec = _spec("core__get_weather", json.loads(json.dumps(WEATHER_SCHEMA)))

    encoded = encode_tools([spec])
    encoded[0]["input_schema"]["properties"]["city"]["type"] = "integer"

    assert spec.input_schema == WEATHER_SCHEMA


# --- whole content -------------------------------------------------------------


def test_content_tool_uses_are_decoded_in_order_and_text_is_skipped():
    content = [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "core__get_weather", "input": {"city": "Oslo"}},
        {"type": "tool_use", "id": "toolu_2", "name": "core__get_weather", "input": CANARY},
    ]

    calls = decode_content_tool_uses(content)

    assert calls == [
        DecodedCall("message[1]", "toolu_1", "core__get_weather", {"city": "Oslo"}),
        DecodedCall("message[2]", "toolu_2", "core__get_weather", INVALID_ARGS),
    ]
    assert CANARY not in repr(calls)


def test_a_tool_use_without_input_has_no_arguments_and_one_without_id_or_name_is_read_as_empty():
    content = [{"type": "tool_use", "id": "toolu_1", "name": "t__x"}, {"type": "tool_use", "input": {"a": 1}}]

    assert decode_content_tool_uses(content) == [
        DecodedCall("message[0]", "toolu_1", "t__x", {}),
        DecodedCall("message[1]", "", "", {"a": 1}),  # the turn refuses it: no id, no tool
    ]


@pytest.mark.parametrize("content", [{"type": "tool_use"}, [1], [{"type": "tool_use", "id": 5, "name": "x"}]])
def test_content_that_is_not_a_content_list_raises(content):
    with pytest.raises(WireFormatError):
        decode_content_tool_uses(content)


# --- results -------------------------------------------------------------------


def test_results_form_one_user_turn_of_tool_result_blocks():
    ok = ToolExecResult(tool_call_id="toolu_1", tool_id="core__get_weather", ok=True, value={"temp_c": 12})
    failed = ToolExecResult(
        tool_call_id="toolu_2",
        tool_id="core__get_weather",
        ok=False,
        error_code=ErrorCode.INVALID_JSON,
        safe_message="Invalid tool arguments JSON",
    )

    turn = encode_tool_results([encode_tool_result_block(ok), encode_tool_result_block(failed)])

    assert turn == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"temp_c": 12}', "is_error": False},
            {
                "type": "tool_result",
                "tool_use_id": "toolu_2",
                "content": json.dumps(
                    {"ok": False, "error_code": "invalid_json", "message": "Invalid tool arguments JSON"}
                ),
                "is_error": True,
            },
        ],
    }
    MESSAGE_PARAM.validate_python(turn)
    for block in turn["content"]:  # MessageParam validates its content lazily: check each block's own type
        assert RESULT_BLOCK.validate_python(block) == block


def test_result_block_answers_the_models_own_id_when_given():
    result = ToolExecResult(tool_call_id="tc_abc", tool_id="t__x", ok=True, value=1)

    assert encode_tool_result_block(result, tool_use_id="toolu:odd")["tool_use_id"] == "toolu:odd"
