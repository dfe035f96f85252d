"""Error paths of bound tools: declared names and indexes are kept, a caller's own keys never come back."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runner.bound import field_errors, property_names
from runner.types import FieldError


def test_an_undeclared_key_is_masked_in_nested_paths_too():
    # given a pydantic error whose path runs through a declared field, a caller's dict key and a list index
    class Inner(BaseModel):
        model_config = ConfigDict(extra="forbid")
        depth: int

    class Outer(BaseModel):
        items: dict[str, list[Inner]]

    with pytest.raises(ValidationError) as raised:
        Outer.model_validate({"items": {"sk_live_KEY": [{"depth": "x", "sk_live_EXTRA": 1}]}})

    # when
    errors = field_errors(raised.value, known_names=property_names(Outer.model_json_schema()))

    # then
    assert errors == (
        FieldError(path="items.(unknown field).0.depth", message="must be an integer, not a string"),
        FieldError(
            path="items.(unknown field).0.(unknown field)",
            message="unknown field; the tool's input_schema lists the fields it accepts",
        ),
    )


def test_a_mistyped_key_is_reported_where_it_is_with_the_closest_declared_name():
    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        timezone: str = "UTC"

    with pytest.raises(ValidationError) as raised:
        Args.model_validate({"timezon": "UTC"})

    errors = field_errors(raised.value, known_names=property_names(Args.model_json_schema()))

    assert errors == (
        FieldError(
            path="timezon",  # a typo of a declared name is named where it is
            message="unknown field (did you mean 'timezone'?); the tool's input_schema lists the fields it accepts",
        ),
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"count": "three"}, "must be an integer, not a string"),
        ({"count": None}, "must be an integer, not null"),
        ({"name": 5, "count": 1}, "must be a string, not a number"),
        ({}, "required"),
        ({"count": 1, "name": "x" * 11}, "must be at most 10 characters"),
        ({"count": -1}, "must be at least 0"),
    ],
)
def test_messages_say_what_is_wrong_in_plain_words_without_the_value(value, message):
    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        count: int = Field(ge=0)
        name: str = Field(default="n", max_length=10)

    with pytest.raises(ValidationError) as raised:
        Args.model_validate(value)

    [error] = field_errors(raised.value, known_names=property_names(Args.model_json_schema()))
    assert error.message == message
