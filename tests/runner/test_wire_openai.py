"""Golden tests of the OpenAI wire adapter: exact shapes, delta assembly, no leaked arguments.

No database and no Django: the adapter is pure Python, so these run with `-p no:django`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from runner.errors import ToolgateError
from runner.types import ErrorCode, FieldError, ToolEffect, ToolExecResult, ToolInvocationRecord, ToolSpec
from runner.wire.openai import (
    OpenAIToolCallDecoder,
    WireFormatError,
    decode_message_tool_calls,
    decode_stream,
    encode_tool,
    encode_tool_result,
    encode_tools,
)

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


def _chunk(*tool_calls: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    """A `chat.completion.chunk` as LiteLLM streams it."""
    return {
        "id": "chatcmpl-abc",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": {"tool_calls": list(tool_calls)}, "finish_reason": finish_reason}],
    }


def _args_fragment(index: int, arguments: str) -> dict[str, Any]:
    return {"index": index, "function": {"arguments": arguments}}


# A realistic single-call stream: role chunk, id+name, arguments split mid-token,
# a content-only chunk, the finish chunk, and a usage chunk with empty choices.
SINGLE_CALL_STREAM: list[dict[str, Any]] = [
    {
        "id": "chatcmpl-abc",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": None}, "finish_reason": None}],
    },
    _chunk(
        {
            "index": 0,
            "id": "call_weather_1",
            "type": "function",
            "function": {"name": "core__get_weather", "arguments": ""},
        }
    ),
    _chunk(_args_fragment(0, '{"ci')),
    _chunk(_args_fragment(0, 'ty": "Par')),
    {
        "id": "chatcmpl-abc",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": "Let me check."}, "finish_reason": None}],
    },
    _chunk(_args_fragment(0, 'is", "uni')),
    _chunk(_args_fragment(0, 'ts": "metric"}')),
    {
        "id": "chatcmpl-abc",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
    },
    {
        "id": "chatcmpl-abc",
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": {"prompt_tokens": 42, "completion_tokens": 17, "total_tokens": 59},
    },
]


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


# --- stream decoder ------------------------------------------------------------


def test_realistic_stream_assembles_one_exact_record() -> None:
    records = decode_stream(SINGLE_CALL_STREAM)

    assert records == [
        ToolInvocationRecord(
            tool_call_id="call_weather_1",
            tool_id="core__get_weather",
            args={"city": "Paris", "units": "metric"},
            raw={
                "index": 0,
                "id": "call_weather_1",
                "name": "core__get_weather",
                "arguments": '{"city": "Paris", "units": "metric"}',
            },
        )
    ]
    assert (records[0].ok, records[0].error_code, records[0].safe_message) == (None, None, None)


def test_interleaved_indices_yield_two_records_in_index_order() -> None:
    decoder = OpenAIToolCallDecoder()
    stream = [
        _chunk({"index": 0, "id": "call_a", "type": "function", "function": {"name": "core__a", "arguments": ""}}),
        _chunk(_args_fragment(0, '{"x": ')),
        _chunk({"index": 1, "id": "call_b", "type": "function", "function": {"name": "core__b", "arguments": '{"y"'}}),
        _chunk(_args_fragment(0, "1}")),
        _chunk(_args_fragment(1, ': "two"}')),
    ]
    for chunk in stream:
        decoder.feed(chunk)

    records = decoder.finish()

    assert [(r.tool_call_id, r.tool_id, r.args) for r in records] == [
        ("call_a", "core__a", {"x": 1}),
        ("call_b", "core__b", {"y": "two"}),
    ]


def test_records_follow_index_order_not_arrival_order() -> None:
    records = decode_stream(
        [
            _chunk({"index": 1, "id": "call_b", "function": {"name": "core__b", "arguments": "{}"}}),
            _chunk({"index": 0, "id": "call_a", "function": {"name": "core__a", "arguments": "{}"}}),
        ]
    )

    assert [r.tool_call_id for r in records] == ["call_a", "call_b"]
    assert [r.raw["index"] for r in records] == [0, 1]


def test_several_fragments_in_one_chunk_are_all_applied() -> None:
    records = decode_stream(
        [
            _chunk(
                {"index": 0, "id": "call_a", "function": {"name": "core__a", "arguments": '{"n":'}},
                {"index": 1, "id": "call_b", "function": {"name": "core__b", "arguments": "{}"}},
            ),
            _chunk(_args_fragment(0, " 5}")),
        ]
    )

    assert [(r.tool_id, r.args) for r in records] == [("core__a", {"n": 5}), ("core__b", {})]


def test_name_fragments_concatenate_and_first_id_wins() -> None:
    records = decode_stream(
        [
            _chunk({"index": 0, "id": "call_first", "function": {"name": "core__get_"}}),
            _chunk({"index": 0, "id": "call_second", "function": {"name": "weather", "arguments": "{}"}}),
        ]
    )

    assert [(r.tool_call_id, r.tool_id) for r in records] == [("call_first", "core__get_weather")]


def test_invalid_json_arguments_give_invalid_json_record_without_raw_text() -> None:
    records = decode_stream(
        [
            _chunk(
                {"index": 0, "id": "call_bad", "type": "function", "function": {"name": "core__a", "arguments": ""}}
            ),
            _chunk(_args_fragment(0, '{"token": "SECRET-')),
            _chunk(_args_fragment(0, 'MARKER-123", oops')),
        ]
    )

    assert len(records) == 1
    record = records[0]
    assert record.tool_call_id == "call_bad"
    assert record.tool_id == "core__a"
    assert record.args is None
    assert record.ok is False
    assert record.error_code is ErrorCode.INVALID_JSON
    assert record.safe_message == "Invalid tool arguments JSON"
    assert record.raw == {"index": 0}
    assert "SECRET-MARKER-123" not in repr(record)
    assert "SECRET-MARKER-123" not in repr(record.raw)


@pytest.mark.parametrize("arguments", ["[1,2]", '"a string"', "42", "null", "true"])
def test_non_object_json_arguments_are_invalid_json(arguments: str) -> None:
    records = decode_stream(
        [_chunk({"index": 0, "id": "call_a", "function": {"name": "core__a", "arguments": arguments}})]
    )

    assert [(r.args, r.ok, r.error_code, r.safe_message, r.raw) for r in records] == [
        (None, False, ErrorCode.INVALID_JSON, "Invalid tool arguments JSON", {"index": 0})
    ]


@pytest.mark.parametrize("arguments", ["", "   \n\t"])
def test_empty_arguments_are_an_empty_object(arguments: str) -> None:
    records = decode_stream(
        [_chunk({"index": 0, "id": "call_a", "function": {"name": "core__a", "arguments": arguments}})]
    )

    assert [(r.args, r.ok, r.error_code) for r in records] == [({}, None, None)]


def test_absent_arguments_are_an_empty_object() -> None:
    records = decode_stream([_chunk({"index": 0, "id": "call_a", "function": {"name": "core__a"}})])

    assert records[0].args == {}


def test_missing_id_gets_a_generated_call_id() -> None:
    records = decode_stream([_chunk({"index": 0, "function": {"name": "core__a", "arguments": "{}"}})])

    assert len(records) == 1
    assert records[0].tool_call_id.startswith("call_")
    assert len(records[0].tool_call_id) > len("call_")
    assert records[0].raw["id"] is None


def test_generated_ids_differ_between_calls() -> None:
    records = decode_stream(
        [
            _chunk({"index": 0, "function": {"name": "core__a", "arguments": "{}"}}),
            _chunk({"index": 1, "function": {"name": "core__b", "arguments": "{}"}}),
        ]
    )

    assert records[0].tool_call_id != records[1].tool_call_id


def test_call_without_name_is_a_validation_record() -> None:
    records = decode_stream(
        [_chunk({"index": 0, "id": "call_a", "function": {"arguments": '{"SECRET-MARKER-123": 1}'}})]
    )

    assert len(records) == 1
    record = records[0]
    assert record.tool_call_id == "call_a"
    assert record.tool_id == ""
    assert record.args is None
    assert record.ok is False
    assert record.error_code is ErrorCode.VALIDATION
    assert record.safe_message == "tool call has no function name"
    assert record.raw == {"index": 0}
    assert "SECRET-MARKER-123" not in repr(record)


def test_finish_resets_state_for_the_next_session() -> None:
    decoder = OpenAIToolCallDecoder()
    decoder.feed(_chunk({"index": 0, "id": "call_old", "function": {"name": "core__old", "arguments": '{"a": 1}'}}))
    first = decoder.finish()

    decoder.feed(_chunk({"index": 0, "id": "call_new", "function": {"name": "core__new", "arguments": '{"b": '}}))
    decoder.feed(_chunk(_args_fragment(0, "2}")))
    second = decoder.finish()

    assert [(r.tool_call_id, r.tool_id, r.args) for r in first] == [("call_old", "core__old", {"a": 1})]
    assert [(r.tool_call_id, r.tool_id, r.args) for r in second] == [("call_new", "core__new", {"b": 2})]
    assert decoder.finish() == []


def test_reset_drops_the_session() -> None:
    decoder = OpenAIToolCallDecoder()
    decoder.feed(_chunk({"index": 0, "id": "call_a", "function": {"name": "core__a", "arguments": '{"a"'}}))

    decoder.reset()

    assert decoder.finish() == []


def test_stream_without_tool_calls_yields_no_records() -> None:
    records = decode_stream(
        [
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hello"}, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {"content": " world"}, "finish_reason": "stop"}]},
            {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}},
            {"choices": [{"index": 0, "delta": {"tool_calls": None}, "finish_reason": None}]},
            {"usage": {"total_tokens": 3}},
        ]
    )

    assert records == []


def test_only_choice_zero_is_assembled() -> None:
    records = decode_stream(
        [
            {
                "choices": [
                    {
                        "index": 1,
                        "delta": {"tool_calls": [{"index": 0, "id": "call_alt", "function": {"name": "core__alt"}}]},
                    },
                    {
                        "index": 0,
                        "delta": {"tool_calls": [{"index": 0, "id": "call_main", "function": {"name": "core__main"}}]},
                    },
                ]
            }
        ]
    )

    assert [(r.tool_call_id, r.tool_id) for r in records] == [("call_main", "core__main")]


def test_choice_without_index_counts_as_choice_zero() -> None:
    # The shape of the spec's LiteLLM example (§5): no choice index, no type.
    records = decode_stream(
        [
            {
                "choices": [
                    {
                        "delta": {
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "id": "call_xxx",
                                    "function": {"name": "generate_title", "arguments": ""},
                                    "type": "function",
                                }
                            ]
                        }
                    }
                ]
            },
            {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"mes'}}]}}]},
            {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": 'sage":"hi"}'}}]}}]},
        ]
    )

    assert [(r.tool_call_id, r.tool_id, r.args) for r in records] == [("call_xxx", "generate_title", {"message": "hi"})]


@pytest.mark.parametrize(
    "chunk",
    [
        pytest.param(["not", "a", "chunk"], id="chunk-not-object"),
        pytest.param({"choices": {"index": 0}}, id="choices-not-list"),
        pytest.param({"choices": ["SECRET-MARKER-123"]}, id="choice-not-object"),
        pytest.param({"choices": [{"index": "0", "delta": {}}]}, id="choice-index-not-int"),
        pytest.param({"choices": [{"index": 0, "delta": "SECRET-MARKER-123"}]}, id="delta-not-object"),
        pytest.param({"choices": [{"index": 0, "delta": {"tool_calls": {"index": 0}}}]}, id="tool-calls-not-list"),
        pytest.param({"choices": [{"index": 0, "delta": {"tool_calls": ["SECRET-MARKER-123"]}}]}, id="call-not-object"),
        pytest.param({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": "0"}]}}]}, id="index-str"),
        pytest.param({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": True}]}}]}, id="index-bool"),
        pytest.param({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": -1}]}}]}, id="index-negative"),
        pytest.param({"choices": [{"index": 0, "delta": {"tool_calls": [{"function": {}}]}}]}, id="index-missing"),
        pytest.param({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": 7}]}}]}, id="id-not-str"),
        pytest.param(
            {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": "SECRET-MARKER-123"}]}}]},
            id="function-not-object",
        ),
        pytest.param(
            {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": ["core__a"]}}]}}]},
            id="name-not-str",
        ),
        pytest.param(
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {"tool_calls": [{"index": 0, "function": {"arguments": {"SECRET-MARKER-123": 1}}}]},
                    }
                ]
            },
            id="arguments-not-str",
        ),
    ],
)
def test_malformed_chunk_raises_wire_format_error_without_payload(chunk: Any) -> None:
    decoder = OpenAIToolCallDecoder()

    with pytest.raises(WireFormatError) as excinfo:
        decoder.feed(chunk)

    assert isinstance(excinfo.value, ValueError)
    assert isinstance(excinfo.value, ToolgateError)
    assert "SECRET-MARKER-123" not in str(excinfo.value)
    assert "core__a" not in str(excinfo.value)


def test_malformed_chunk_leaves_the_session_unchanged() -> None:
    decoder = OpenAIToolCallDecoder()
    decoder.feed(_chunk({"index": 0, "id": "call_a", "function": {"name": "core__a", "arguments": '{"a": 1'}}))

    with pytest.raises(WireFormatError):
        # The first fragment is well formed, the second is not: neither may be applied.
        decoder.feed(_chunk(_args_fragment(0, ', "b": 2'), {"index": "1"}))
    decoder.feed(_chunk(_args_fragment(0, "}")))

    assert [r.args for r in decoder.finish()] == [{"a": 1}]


# --- non-streamed message ------------------------------------------------------


def test_decode_message_tool_calls_round_trip() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "core__get_weather", "arguments": '{"city": "Oslo"}'},
            },
            {"id": "call_2", "type": "function", "function": {"name": "core__get_time", "arguments": ""}},
            {"id": "call_3", "type": "function", "function": {"name": "core__a", "arguments": '{"SECRET-MARKER-123'}},
            {"type": "function", "function": {"name": "core__b", "arguments": "[]"}},
        ],
    }

    records = decode_message_tool_calls(message)

    assert [(r.tool_call_id, r.tool_id, r.args, r.ok, r.error_code) for r in records[:3]] == [
        ("call_1", "core__get_weather", {"city": "Oslo"}, None, None),
        ("call_2", "core__get_time", {}, None, None),
        ("call_3", "core__a", None, False, ErrorCode.INVALID_JSON),
    ]
    assert records[0].raw == {
        "index": 0,
        "id": "call_1",
        "name": "core__get_weather",
        "arguments": '{"city": "Oslo"}',
    }
    assert records[2].safe_message == "Invalid tool arguments JSON"
    assert records[2].raw == {"index": 2}
    assert "SECRET-MARKER-123" not in repr(records)
    assert records[3].tool_call_id.startswith("call_")
    assert (records[3].tool_id, records[3].error_code) == ("core__b", ErrorCode.INVALID_JSON)


def test_decode_message_matches_the_stream_decoder() -> None:
    message = {
        "role": "assistant",
        "tool_calls": [
            {
                "id": "call_weather_1",
                "type": "function",
                "function": {"name": "core__get_weather", "arguments": '{"city": "Paris", "units": "metric"}'},
            }
        ],
    }

    assert decode_message_tool_calls(message) == decode_stream(SINGLE_CALL_STREAM)


def test_decode_message_without_tool_calls_is_empty() -> None:
    assert decode_message_tool_calls({"role": "assistant", "content": "hi"}) == []
    assert decode_message_tool_calls({"role": "assistant", "content": "hi", "tool_calls": None}) == []


@pytest.mark.parametrize(
    "message",
    [
        pytest.param({"role": "assistant", "tool_calls": "SECRET-MARKER-123"}, id="tool-calls-not-list"),
        pytest.param({"role": "assistant", "tool_calls": ["SECRET-MARKER-123"]}, id="call-not-object"),
        pytest.param(
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "function": {"name": "n", "arguments": {"k": "SECRET-MARKER-123"}}}],
            },
            id="arguments-not-str",
        ),
    ],
)
def test_decode_message_rejects_malformed_shapes(message: dict[str, Any]) -> None:
    with pytest.raises(WireFormatError) as excinfo:
        decode_message_tool_calls(message)

    assert "SECRET-MARKER-123" not in str(excinfo.value)


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
