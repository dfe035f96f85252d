"""Golden tests of the OpenAI Responses wire adapter, checked against the official `openai` SDK's types."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.responses import FunctionToolParam, ResponseFunctionToolCall, ResponseInputItemParam
from pydantic import TypeAdapter

from runner.types import ErrorCode, MalformedArgs, ToolEffect, ToolExecResult, ToolSpec
from runner.wire.common import DecodedCall, WireFormatError
from runner.wire.openai_responses import decode_output_function_calls, encode_tool, encode_tool_result, encode_tools

FUNCTION_TOOL = TypeAdapter(FunctionToolParam)
INPUT_ITEM = TypeAdapter(ResponseInputItemParam)
CANARY = "secret-canary-91"

CLOSED: dict[str, Any] = {
    "type": "object",
    "properties": {
        "ms": {"type": "integer", "minimum": 0, "maximum": 60000, "description": "How long"},
        "mode": {"type": ["string", "null"], "enum": ["a", "b", None]},
    },
    "required": ["ms", "mode"],
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


def test_encode_tool_is_flat_with_exact_keys():
    encoded = encode_tool(_spec("core__wait", CLOSED))

    assert encoded == {
        "type": "function",
        "name": "core__wait",
        "description": "core__wait description",
        "parameters": CLOSED,
        "strict": True,
    }
    assert FUNCTION_TOOL.validate_python(encoded) == encoded


@pytest.mark.parametrize(
    ("schema", "strict"),
    [
        ({"type": "object", "properties": {}, "additionalProperties": False}, True),
        (CLOSED, True),
        # an optional property: strict mode would make it required
        ({**CLOSED, "required": ["ms"]}, False),
        # an open object
        ({**CLOSED, "additionalProperties": True}, False),
        ({key: value for key, value in CLOSED.items() if key != "additionalProperties"}, False),
        # keywords strict mode does not support
        (
            {
                "type": "object",
                "properties": {"tz": {"type": "string", "default": "UTC"}},
                "required": ["tz"],
                "additionalProperties": False,
            },
            False,
        ),
        (
            {
                "type": "object",
                "properties": {"tz": {"type": "string", "maxLength": 64}},
                "required": ["tz"],
                "additionalProperties": False,
            },
            False,
        ),
        # a nested object must be closed and fully required too
        (
            {
                "type": "object",
                "properties": {"inner": {"type": "object", "properties": {"x": {"type": "integer"}}}},
                "required": ["inner"],
                "additionalProperties": False,
            },
            False,
        ),
        (
            {
                "type": "object",
                "properties": {"inner": {"$ref": "#/$defs/Inner"}},
                "required": ["inner"],
                "additionalProperties": False,
                "$defs": {
                    "Inner": {
                        "type": "object",
                        "properties": {"x": {"type": "array", "items": {"type": "integer"}}},
                        "required": ["x"],
                        "additionalProperties": False,
                    }
                },
            },
            True,
        ),
    ],
)
def test_strict_only_where_the_schema_allows_it(schema, strict):
    assert encode_tool(_spec("t__x", schema))["strict"] is strict


def test_encode_tools_keeps_order_and_copies_parameters():
    spec = _spec("core__wait", json.loads(json.dumps(CLOSED)))

    encoded = encode_tools([_spec("core__a", {"type": "object"}), spec])
    encoded[1]["parameters"]["required"].append("x")

    assert [tool["name"] for tool in encoded] == ["core__a", "core__wait"]
    assert encoded[0]["strict"] is False
    assert spec.input_schema == CLOSED


# --- decoder -------------------------------------------------------------------

OUTPUT: list[dict[str, Any]] = [
    {"type": "reasoning", "id": "rs_1", "summary": []},
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_A",
        "name": "core__wait",
        "arguments": '{"ms": 5, "mode": null}',
        "status": "completed",
    },
    {
        "type": "function_call",
        "id": "fc_2",
        "call_id": "call_B",
        "name": "core__wait",
        "arguments": f'{{"ms": "{CANARY}"',
        "status": "completed",
    },
]


def test_function_call_items_are_valid_sdk_output_items():
    for item in OUTPUT[1:]:
        ResponseFunctionToolCall.model_validate(item)


def test_output_function_calls_decode_under_their_call_id():
    calls = decode_output_function_calls(OUTPUT)

    assert calls == [
        DecodedCall("message[1]", "call_A", "core__wait", {"ms": 5, "mode": None}),
        DecodedCall(
            "message[2]", "call_B", "core__wait", MalformedArgs(ErrorCode.INVALID_JSON, "Invalid tool arguments JSON")
        ),
    ]
    assert CANARY not in repr(calls)


@pytest.mark.parametrize("output", [{"output": []}, ["x"], [{"type": "function_call", "call_id": 3, "name": "t"}]])
def test_output_that_is_not_an_output_list_raises(output):
    with pytest.raises(WireFormatError):
        decode_output_function_calls(output)


# --- result --------------------------------------------------------------------


def test_results_are_function_call_output_items():
    ok = ToolExecResult(tool_call_id="call_A", tool_id="core__wait", ok=True, value={"waited_ms": 5})
    failed = ToolExecResult(
        tool_call_id="call_B", tool_id="core__wait", ok=False, error_code=ErrorCode.TIMEOUT, safe_message="too slow"
    )

    items = [encode_tool_result(ok), encode_tool_result(failed, call_id="call:B")]

    assert items == [
        {"type": "function_call_output", "call_id": "call_A", "output": '{"waited_ms": 5}'},
        {
            "type": "function_call_output",
            "call_id": "call:B",
            "output": json.dumps({"ok": False, "error_code": "timeout", "message": "too slow"}),
        },
    ]
    for item in items:
        assert INPUT_ITEM.validate_python(item) == item
