"""The exec answer built directly is what its declared fields render; the call inputs share one routing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from rest_framework import serializers

from gateway.inbound.wire import CALL_META_FIELDS
from runner.types import ToolExecResult
from tools_app.api.calls import CallsInputSerializer
from tools_app.api.serializers import ExecInputSerializer, ExecSuccessOutputSerializer, exec_input, plain_exec_fields
from tools_app.routing import CALL_ROUTING_FIELDS, CallRouting
from tools_app.services import ExecRequest

STARTED = datetime(2026, 11, 23, 1, 2, 3, 456789, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "ended_at"),
    [
        ({"now": "2026-11-23T01:02:03Z", "nested": [1, None, "ünï"]}, STARTED + timedelta(milliseconds=3)),
        (None, STARTED),
        ([], STARTED.astimezone(timezone(timedelta(hours=-5)))),
        ("text", STARTED.replace(microsecond=0)),
    ],
)
def test_the_success_answer_is_what_the_declared_fields_render(value, ended_at):
    result = ToolExecResult(
        tool_call_id="call-1",
        tool_id="core__get_current_time",
        ok=True,
        value=value,
        started_at=STARTED,
        ended_at=ended_at,
    )
    built = ExecSuccessOutputSerializer(result).data
    by_fields = serializers.Serializer.to_representation(ExecSuccessOutputSerializer(result), result)

    assert dict(built) == dict(by_fields)
    assert list(built) == list(ExecSuccessOutputSerializer().fields)


# --- the plain-body path of ExecInputSerializer ------------------------------------------------

_TEXT = st.one_of(
    st.text(max_size=70),
    st.sampled_from(["", "core__get_current_time", "a" * 64, "a" * 65, "a" * 128, "a" * 129, "x\x00y", "\ud800"]),
)
_VALUE = st.one_of(
    st.none(),
    st.integers(),
    st.booleans(),
    _TEXT,
    st.lists(_TEXT, max_size=3),
    st.dictionaries(_TEXT, _TEXT, max_size=3),
)
# What the JSON parser lets into args: no lone surrogate anywhere (core/api/handlers.py refuses them first).
_PARSED_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
_PARSED_VALUE = st.one_of(st.none(), st.integers(), st.booleans(), _PARSED_TEXT, st.lists(_PARSED_TEXT, max_size=3))
_FIELD_VALUES = {
    "tool_id": st.one_of(_TEXT, _VALUE),
    "args": st.one_of(
        st.dictionaries(_PARSED_TEXT, _PARSED_VALUE, max_size=4),
        st.just({"big": "x" * 9000}),
        st.none(),
        st.integers(),
        _PARSED_TEXT,
        st.lists(_PARSED_TEXT, max_size=2),
    ),
    "tool_call_id": st.one_of(st.from_regex(r"\A[A-Za-z0-9_-]{1,130}\Z"), _VALUE),
    "run_id": st.one_of(st.from_regex(r"\A[A-Za-z0-9_-]{1,130}\Z"), _VALUE),
    "connection_id": st.one_of(_TEXT, _VALUE),
    "connection_ids": st.one_of(st.lists(_TEXT, max_size=34), _VALUE),
    "grant_id": st.one_of(_TEXT, _VALUE),
}
_BODY = st.one_of(
    st.fixed_dictionaries({}, optional={**_FIELD_VALUES, "extra": _VALUE}),
    st.fixed_dictionaries(
        {"tool_id": st.just("core__get_current_time")},
        optional={name: values for name, values in _FIELD_VALUES.items() if name != "tool_id"},
    ),
    _VALUE,
)


class FieldsOnlyExecInputSerializer(ExecInputSerializer):
    """The exec input checked by DRF's own run_validation: the fields, one by one, never the plain path."""

    def run_validation(self, data=serializers.empty):
        return super(ExecInputSerializer, self).run_validation(data)


@settings(max_examples=600, deadline=None)
@given(_BODY)
@example({"tool_id": "a" * 128})
@example({"tool_id": "a" * 129})
@example({"tool_id": "x\x00y"})
@example({"tool_id": "\ud800"})
@example({"tool_id": ""})
@example({"tool_id": 5})
@example({"tool_id": "t", "connection_id": "a" * 64, "grant_id": "g"})
@example({"tool_id": "t", "connection_id": "a" * 65, "grant_id": "g"})
@example({"tool_id": "t", "grant_id": ""})
@example({"tool_id": "t", "connection_ids": ["a" * 65]})
@example({"tool_id": "t", "connection_ids": ["c"] * 32})
@example({"tool_id": "t", "connection_ids": ["c"] * 33})
@example({"tool_id": "t", "connection_ids": "c"})
@example({"tool_id": "t", "tool_call_id": "a" * 129})
@example({"tool_id": "t", "run_id": "a b"})
@example({"tool_id": "t", "args": {"big": "x" * 9000}})
@example({"tool_id": "t", "args": None})
@example({"tool_id": "t", "args": []})
@example({"tool_id": "t", "extra": 1})
@example({"tool_id": "t", "connection_id": "c"})
@example([])
@example("x")
@example(None)
def test_the_plain_body_path_answers_exactly_what_the_fields_answer(body):
    by_fields = FieldsOnlyExecInputSerializer(data=body)
    fields_valid = by_fields.is_valid()

    serializer = ExecInputSerializer(data=body)
    valid = serializer.is_valid()

    assert valid == fields_valid
    assert serializer.validated_data == by_fields.validated_data
    assert serializer.errors == by_fields.errors
    plain = plain_exec_fields(body)
    if plain is not None:  # every field accepts the body as it is, and answers the same values
        assert plain == FieldsOnlyExecInputSerializer(data=body).to_internal_value(body)
    # what the exec view reads: the same answer, with or without building the serializer
    if valid:
        assert exec_input(body) == serializer.validated_data
    else:
        with pytest.raises(serializers.ValidationError) as refused:
            exec_input(body)
        assert refused.value.detail == serializer.errors


@pytest.mark.parametrize(
    "body",
    [
        {"tool_id": "core__get_current_time"},
        {"tool_id": "core__get_current_time", "args": {"timezone": "UTC"}, "tool_call_id": "call_1", "run_id": "r"},
        {"tool_id": "github__get_user", "args": {}, "connection_id": "c", "grant_id": "g", "connection_ids": ["c"]},
        {"tool_id": "t", "connection_id": None, "grant_id": None, "connection_ids": None, "run_id": None},
    ],
)
def test_the_usual_bodies_take_the_plain_path(body):
    assert plain_exec_fields(body) is not None


def test_the_grant_rule_holds_on_the_plain_path_too():
    serializer = ExecInputSerializer(data={"tool_id": "github__get_user", "connection_id": "c"})

    assert plain_exec_fields(serializer.initial_data) is not None
    assert not serializer.is_valid()
    assert serializer.errors == {"grant_id": ["required whenever connection_id is given"]}


def test_the_call_inputs_take_the_routing_fields_after_their_own_in_the_contracts_order():
    assert CALL_ROUTING_FIELDS == ("run_id", "connection_id", "connection_ids", "grant_id")
    assert list(ExecInputSerializer().fields) == ["tool_id", "args", "tool_call_id", *CALL_ROUTING_FIELDS]
    assert list(CallsInputSerializer().fields) == ["format", "message", *CALL_ROUTING_FIELDS]


def test_mcp_carries_the_out_of_band_fields_under_the_contracts_meta_keys():
    assert CALL_META_FIELDS == {
        "toolgate/tool_call_id": "tool_call_id",
        "toolgate/run_id": "run_id",
        "toolgate/connection_id": "connection_id",
        "toolgate/connection_ids": "connection_ids",
        "toolgate/grant_id": "grant_id",
    }


@pytest.mark.parametrize(
    ("body", "declared"),
    [
        ({}, ()),
        ({"connection_id": "c1", "grant_id": "g1"}, ("c1",)),
        ({"connection_id": "c1", "grant_id": "g1", "connection_ids": None}, ("c1",)),
        ({"connection_id": "c1", "grant_id": "g1", "connection_ids": []}, ()),
        ({"connection_id": "c1", "grant_id": "g1", "connection_ids": ["c2", "c1"]}, ("c2", "c1")),
    ],
)
def test_an_exec_body_becomes_its_routing_with_the_declared_default(body, declared):
    serializer = ExecInputSerializer(data={"tool_id": "core__get_current_time", "run_id": "run_9", **body})
    assert serializer.is_valid(), serializer.errors

    request = ExecRequest.of(serializer.validated_data)

    assert request.routing == CallRouting(
        run_id="run_9",
        connection_id=body.get("connection_id"),
        connection_ids=body.get("connection_ids"),
        grant_id=body.get("grant_id"),
    )
    assert request.routing.declared_connection_ids == declared
