"""Error paths of bound tools: declared names and indexes are kept, a caller's own keys never come back."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

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
        FieldError(
            path="items.(unknown field).0.depth",
            message="Input should be a valid integer, unable to parse string as an integer",
        ),
        FieldError(
            path="items.(unknown field).0.(unknown field)",
            message="unknown field; the tool's input_schema lists the fields it accepts",
        ),
    )
