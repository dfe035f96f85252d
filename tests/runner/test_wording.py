"""runner.wording: one plain wording, never an echo of what the caller sent."""

from __future__ import annotations

import pytest

from runner.types import FieldError
from runner.wording import json_type_name, must_be, refusal_for_model, unknown_field_message


def test_an_unknown_field_is_answered_with_the_closest_declared_names_only():
    message = unknown_field_message(["tool_idd", "sk_live_SECRET"], ["tool_id", "args"])

    assert message == "unknown field (did you mean 'tool_id'?); the fields are: tool_id, args"
    assert "sk_live" not in message


def test_an_unknown_field_with_nothing_close_lists_what_is_accepted():
    assert unknown_field_message(["zzz"], ["a", "b"]) == "unknown field; the fields are: a, b"
    assert unknown_field_message(["zzz"], []) == "unknown field; none are accepted here"


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (None, "null"),
        (True, "true/false"),
        (3, "a number"),
        (2.5, "a number"),
        ("x", "a string"),
        ({}, "an object"),
        ([], "a list"),
    ],
)
def test_a_value_is_named_by_its_json_kind_never_by_itself(value, kind):
    assert json_type_name(value) == kind
    assert must_be("a string", value) == f"must be a string, not {kind}"


def test_a_refusal_for_a_model_names_each_wrong_argument_and_what_is_wrong():
    errors = (FieldError(path="timezone", message="unknown IANA time zone"), FieldError(path="", message="required"))

    assert refusal_for_model("arguments do not match the tool's schema", errors) == (
        "arguments do not match the tool's schema: timezone: unknown IANA time zone; (arguments): required"
    )
    assert refusal_for_model("no such tool", ()) == "no such tool"
    # a refusal whose message is its one error's says where, once
    grant = FieldError(path="grant_id", message="grant is not active")
    assert refusal_for_model("grant is not active", (grant,)) == "grant_id: grant is not active"
