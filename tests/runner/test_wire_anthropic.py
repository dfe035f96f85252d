"""Golden tests of the Anthropic Messages wire adapter: exact shapes, stream assembly, no leaked input.

Shapes are checked against the official `anthropic` SDK's types: a TypedDict
param validated by pydantic drops keys it does not know, so
`validate_python(x) == x` proves both the types and that no extra key is sent.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.types import MessageParam, RawMessageStreamEvent, ToolParam, ToolResultBlockParam
from pydantic import TypeAdapter

from runner.types import ErrorCode, ToolEffect, ToolExecResult, ToolInvocationRecord, ToolSpec
from runner.wire.anthropic import (
    AnthropicToolUseDecoder,
    decode_content_tool_uses,
    decode_stream,
    encode_tool,
    encode_tool_result_block,
    encode_tool_results,
    encode_tools,
)
from runner.wire.openai import WireFormatError

TOOL_PARAM = TypeAdapter(ToolParam)
MESSAGE_PARAM = TypeAdapter(MessageParam)
STREAM_EVENT = TypeAdapter(RawMessageStreamEvent)
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


def _start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def _json_delta(index: int, partial_json: str) -> dict[str, Any]:
    return {
        "type": "content_block_delta",
        "index": index,
        "delta": {"type": "input_json_delta", "partial_json": partial_json},
    }


def _stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


# A Messages stream as the API sends it: text first, then two tool uses whose
# input arrives in fragments split mid-token, then the message's end.
STREAM: list[dict[str, Any]] = [
    {
        "type": "message_start",
        "message": {
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 25, "output_tokens": 1},
        },
    },
    _start(0, {"type": "text", "text": ""}),
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Checking."}},
    _stop(0),
    _start(1, {"type": "tool_use", "id": "toolu_01A", "name": "core__get_weather", "input": {}}),
    _json_delta(1, ""),
    _json_delta(1, '{"ci'),
    _json_delta(1, 'ty": "Par'),
    _json_delta(1, 'is", "units": "metric"}'),
    _stop(1),
    _start(2, {"type": "tool_use", "id": "toolu_01B", "name": "github__get_user", "input": {}}),
    _stop(2),
    {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 40},
    },
    {"type": "message_stop"},
]


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


# --- stream decoder ------------------------------------------------------------


def test_fixture_events_are_valid_sdk_stream_events():
    for event in STREAM:
        STREAM_EVENT.validate_python(event)


def test_stream_assembles_each_tool_use_in_block_order():
    records = decode_stream(STREAM)

    assert records == [
        ToolInvocationRecord(
            tool_call_id="toolu_01A",
            tool_id="core__get_weather",
            args={"city": "Paris", "units": "metric"},
            raw={"index": 1, "id": "toolu_01A", "name": "core__get_weather"},
        ),
        ToolInvocationRecord(
            tool_call_id="toolu_01B",
            tool_id="github__get_user",
            args={},
            raw={"index": 2, "id": "toolu_01B", "name": "github__get_user"},
        ),
    ]


def test_interleaved_deltas_of_two_blocks_stay_apart():
    events = [
        _start(0, {"type": "tool_use", "id": "toolu_a", "name": "t__a", "input": {}}),
        _start(1, {"type": "tool_use", "id": "toolu_b", "name": "t__b", "input": {}}),
        _json_delta(1, '{"b": '),
        _json_delta(0, '{"a": '),
        _json_delta(0, "1}"),
        _json_delta(1, "2}"),
    ]

    records = decode_stream(events)

    assert [(r.tool_call_id, r.args) for r in records] == [("toolu_a", {"a": 1}), ("toolu_b", {"b": 2})]


def test_finish_resets_the_session():
    decoder = AnthropicToolUseDecoder()
    for event in STREAM:
        decoder.feed(event)

    first = decoder.finish()
    second = decoder.finish()

    assert len(first) == 2
    assert second == []


def test_reset_drops_a_broken_session():
    decoder = AnthropicToolUseDecoder()
    decoder.feed(STREAM[4])
    decoder.feed(STREAM[6])

    decoder.reset()

    assert decoder.finish() == []


@pytest.mark.parametrize("partial_json", [f'{{"city": "{CANARY}"', f'["{CANARY}"]', f'"{CANARY}"', "{]"])
def test_input_that_is_not_a_json_object_is_invalid_json_without_the_raw_text(partial_json):
    events = [
        _start(0, {"type": "tool_use", "id": "toolu_x", "name": "core__get_weather", "input": {}}),
        _json_delta(0, partial_json),
    ]

    [record] = decode_stream(events)

    assert record == ToolInvocationRecord(
        tool_call_id="toolu_x",
        tool_id="core__get_weather",
        ok=False,
        error_code=ErrorCode.INVALID_JSON,
        safe_message="Invalid tool arguments JSON",
        raw={"index": 0},
    )
    assert CANARY not in repr(record) + repr(record.raw)


def test_a_malformed_event_raises_and_leaves_the_session_as_it_was():
    decoder = AnthropicToolUseDecoder()
    decoder.feed(_start(0, {"type": "tool_use", "id": "toolu_x", "name": "t__x", "input": {}}))
    decoder.feed(_json_delta(0, '{"a": 1}'))

    with pytest.raises(WireFormatError) as raised:
        decoder.feed(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": 7}}
        )
    with pytest.raises(WireFormatError):
        decoder.feed(_json_delta(5, "{}"))  # no such tool_use block
    with pytest.raises(WireFormatError):
        decoder.feed({"type": "content_block_start", "index": -1, "content_block": {"type": "tool_use"}})

    assert "7" not in str(raised.value)
    assert [r.args for r in decoder.finish()] == [{"a": 1}]


# --- whole content -------------------------------------------------------------


def test_content_tool_uses_are_decoded_in_order_and_text_is_skipped():
    content = [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "core__get_weather", "input": {"city": "Oslo"}},
        {"type": "tool_use", "id": "toolu_2", "name": "core__get_weather", "input": CANARY},
    ]

    first, second = decode_content_tool_uses(content)

    assert (first.tool_call_id, first.tool_id, first.args) == ("toolu_1", "core__get_weather", {"city": "Oslo"})
    assert (second.tool_call_id, second.error_code, second.args) == ("toolu_2", ErrorCode.INVALID_JSON, None)
    assert CANARY not in repr(second)


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
