"""A model's whole turn in, result messages out: shape refusals, per-call malformed args, id mapping."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessageParam
from pydantic import TypeAdapter

from runner.types import ErrorCode, MalformedArgs, ToolExecResult
from runner.wire.codecs import CODECS
from runner.wire.common import WireCodec, WireFormatError
from runner.wire.turns import MAX_CALLS_PER_TURN, ModelCall, decode_turn, encode_results, toolgate_call_id

CANARY = "secret-canary-13"
OPENAI, OPENAI_RESPONSES, ANTHROPIC = CODECS["openai"], CODECS["openai_responses"], CODECS["anthropic"]
CHAT_MESSAGE = TypeAdapter(ChatCompletionMessageParam)


def _chat_call(call_id: Any, name: Any, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _chat(*tool_calls: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": list(tool_calls)}


def test_ids_that_fit_are_kept_and_others_map_deterministically():
    odd = "functions.core__wait:0"

    assert toolgate_call_id("call_AbC-9") == "call_AbC-9"
    assert toolgate_call_id(odd) == "tc_" + hashlib.sha256(odd.encode()).hexdigest()
    assert toolgate_call_id(odd) == toolgate_call_id(odd)
    assert toolgate_call_id("x" * 129) == "tc_" + hashlib.sha256(b"x" * 129).hexdigest()
    assert len(toolgate_call_id("é" * 500)) == 67


def test_chat_turn_decodes_calls_with_malformed_args_kept_as_their_own_call():
    message = _chat(
        _chat_call("call_1", "core__wait", '{"ms": 1}'),
        _chat_call("functions.core__wait:1", "core__wait", f'{{"ms": "{CANARY}"'),
        _chat_call("call_3", "core__get_current_time", ""),
    )

    calls = decode_turn(OPENAI, message)

    assert calls == [
        ModelCall("call_1", "call_1", "core__wait", {"ms": 1}),
        ModelCall(
            "functions.core__wait:1",
            toolgate_call_id("functions.core__wait:1"),
            "core__wait",
            MalformedArgs(ErrorCode.INVALID_JSON, "Invalid tool arguments JSON"),
        ),
        ModelCall("call_3", "call_3", "core__get_current_time", {}),
    ]
    assert CANARY not in repr(calls)


def test_oversized_args_become_a_validation_call():
    message = _chat(_chat_call("call_1", "core__wait", json.dumps({"pad": "x" * 9000})))

    [call] = decode_turn(OPENAI, message)

    assert call.args == MalformedArgs(ErrorCode.VALIDATION, "tool arguments must be at most 8192 bytes serialized")


@pytest.mark.parametrize(
    ("wire_format", "message", "problem"),
    [
        (OPENAI, [], "message must be an object"),
        (OPENAI, _chat(_chat_call(None, "core__wait", "{}")), "message.tool_calls[0] has no call id"),
        (OPENAI, _chat(_chat_call("c", "", "{}")), "message.tool_calls[0] has no tool name"),
        (OPENAI, _chat(_chat_call("c", "x" * 129, "{}")), "over 128 characters"),
        (OPENAI, _chat(_chat_call("c" * 513, "t", "{}")), "call id over 512 characters"),
        (
            OPENAI,
            _chat(_chat_call("c", "t", "{}"), _chat_call("c", "t", "{}")),
            "message.tool_calls[1] repeats the call id of an earlier call",
        ),
        (
            OPENAI,
            _chat({"id": "c", "type": "custom", "custom": {"name": "t", "input": CANARY}}),
            "message.tool_calls[0] is not a function tool call",
        ),
        (OPENAI, _chat(_chat_call("c", "t", 5)), "message.tool_calls[0].function.arguments"),
        (OPENAI_RESPONSES, {"type": "function_call"}, "output list"),
        (OPENAI_RESPONSES, [{"type": "function_call", "name": "t", "arguments": "{}"}], "has no call id"),
        (ANTHROPIC, "text", "content list"),
        (ANTHROPIC, [{"type": "tool_use", "id": "toolu_1", "input": {}}], "message[0] has no tool name"),
    ],
)
def test_a_body_that_is_not_a_turn_is_refused_whole(wire_format, message, problem):
    with pytest.raises(WireFormatError) as raised:
        decode_turn(wire_format, message)

    assert problem in str(raised.value)
    assert CANARY not in str(raised.value)


def test_too_many_calls_are_refused():
    message = _chat(*(_chat_call(f"c{i}", "t", "{}") for i in range(MAX_CALLS_PER_TURN + 1)))

    with pytest.raises(WireFormatError, match="at most 16 tool calls"):
        decode_turn(OPENAI, message)


def test_a_turn_without_tool_calls_has_no_calls():
    assert decode_turn(OPENAI, {"role": "assistant", "content": "Hi"}) == []
    assert decode_turn(ANTHROPIC, [{"type": "text", "text": "Hi"}]) == []
    assert encode_results(ANTHROPIC, [], []) == []


def test_responses_and_anthropic_accept_the_whole_response_or_message():
    output = [{"type": "function_call", "call_id": "call_A", "name": "t__x", "arguments": "{}", "id": "fc_1"}]
    content = [{"type": "tool_use", "id": "toolu_1", "name": "t__x", "input": {"a": 1}}]

    assert decode_turn(OPENAI_RESPONSES, {"output": output}) == decode_turn(OPENAI_RESPONSES, output)
    assert decode_turn(ANTHROPIC, {"role": "assistant", "content": content}) == [
        ModelCall("toolu_1", "toolu_1", "t__x", {"a": 1})
    ]


def test_results_answer_the_models_own_ids_in_each_format():
    calls = [ModelCall("a:1", toolgate_call_id("a:1"), "t__x", {}), ModelCall("b", "b", "t__x", {})]
    results = [
        ToolExecResult(tool_call_id=toolgate_call_id("a:1"), tool_id="t__x", ok=True, value={"v": 1}),
        ToolExecResult(
            tool_call_id="b", tool_id="t__x", ok=False, error_code=ErrorCode.POLICY_DENIED, safe_message="no"
        ),
    ]
    denied = json.dumps({"ok": False, "error_code": "policy_denied", "message": "no"})

    chat = encode_results(OPENAI, calls, results)
    responses = encode_results(OPENAI_RESPONSES, calls, results)
    anthropic = encode_results(ANTHROPIC, calls, results)

    assert chat == [
        {"role": "tool", "tool_call_id": "a:1", "content": '{"v": 1}'},
        {"role": "tool", "tool_call_id": "b", "content": denied},
    ]
    for message in chat:
        assert CHAT_MESSAGE.validate_python(message) == message
    assert responses == [
        {"type": "function_call_output", "call_id": "a:1", "output": '{"v": 1}'},
        {"type": "function_call_output", "call_id": "b", "output": denied},
    ]
    assert anthropic == [
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "a:1", "content": '{"v": 1}', "is_error": False},
                {"type": "tool_result", "tool_use_id": "b", "content": denied, "is_error": True},
            ],
        }
    ]


# --- arbitrary text in every format's arguments ---------------------------------------------------

ANY_CHARACTER = st.characters(codec=None, categories=None)  # surrogates and NUL included


def _decoded_args(wire_format: WireCodec, value: str, *, as_escaped_json: bool) -> dict[str, Any] | MalformedArgs:
    arguments = json.dumps({"k": value}) if as_escaped_json else value  # json.dumps escapes surrogates as \\udxxx
    if wire_format is OPENAI:
        message: Any = _chat(_chat_call("call_1", "core__wait", arguments))
    elif wire_format is OPENAI_RESPONSES:
        message = [{"type": "function_call", "call_id": "call_1", "name": "core__wait", "arguments": arguments}]
    else:  # Messages carries the input as an object: the value itself, whatever Python handed over
        message = [{"type": "tool_use", "id": "call_1", "name": "core__wait", "input": {"k": value}}]
    [call] = decode_turn(wire_format, message)
    return call.args


@settings(max_examples=300, deadline=None)
@given(wire_format=st.sampled_from(list(CODECS.values())), value=st.text(alphabet=ANY_CHARACTER), escaped=st.booleans())
def test_every_decoder_answers_arguments_that_can_be_stored_or_refuses_them(wire_format, value, escaped):
    """Whatever text a model sends, a call's args are refused or clean: UTF-8, no NUL (what audit rows can hold)."""
    args = _decoded_args(wire_format, value, as_escaped_json=escaped)

    if isinstance(args, MalformedArgs):
        assert args.error_code in (ErrorCode.INVALID_JSON, ErrorCode.VALIDATION)
    else:
        encoded = json.dumps(args, ensure_ascii=False).encode("utf-8")
        assert b"\x00" not in encoded


@pytest.mark.parametrize("wire_format", list(CODECS.values()))
@pytest.mark.parametrize("value", ["\ud800", "a\udfffb", "nul\x00"])
def test_a_lone_surrogate_or_nul_in_arguments_is_refused_as_invalid_json(wire_format, value):
    args = _decoded_args(wire_format, value, as_escaped_json=True)

    assert args == MalformedArgs(error_code=ErrorCode.INVALID_JSON, safe_message="Invalid tool arguments JSON")
