"""A pinned schema's quick yes (jsonschema-rs) never accepts what python-jsonschema refuses.

Every refusal, with its paths and messages, comes from python-jsonschema; the
quick check only lets a valid call skip it. These properties hold the quick
check to python-jsonschema's answer on the keywords it is trusted with, and
check that any other keyword leaves python-jsonschema alone to decide.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.upstream.definitions import compile_pinned
from gateway.upstream.source import schema_errors

DIALECTS = [
    "https://json-schema.org/draft/2020-12/schema",
    "https://json-schema.org/draft/2019-09/schema",
    "http://json-schema.org/draft-07/schema#",
    "http://json-schema.org/draft-06/schema#",
]
NAMES = st.sampled_from(["a", "b", "n", "ü"])
NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, 1, 1.0, -1, 2.5]),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=6))
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(NAMES, inner, max_size=4)),
    max_leaves=12,
)
TYPES = st.sampled_from(["null", "boolean", "integer", "number", "string", "array", "object"])
SMALL = st.integers(0, 4)


def _leaf_rules() -> st.SearchStrategy[dict]:
    return st.fixed_dictionaries(
        {},
        optional={
            "type": st.one_of(TYPES, st.lists(TYPES, min_size=1, max_size=3, unique=True)),
            "enum": st.lists(SCALARS, min_size=1, max_size=4),
            "const": SCALARS,
            "minimum": NUMBERS,
            "maximum": NUMBERS,
            "exclusiveMinimum": NUMBERS,
            "exclusiveMaximum": NUMBERS,
            "minLength": SMALL,
            "maxLength": SMALL,
            "minItems": SMALL,
            "maxItems": SMALL,
            "minProperties": SMALL,
            "maxProperties": SMALL,
            "format": st.sampled_from(["email", "date-time", "uri", "uuid"]),
            "title": st.text(max_size=5),
        },
    )


SCHEMAS = st.recursive(
    st.one_of(_leaf_rules(), st.booleans()),
    lambda inner: st.one_of(
        st.fixed_dictionaries(
            {"type": st.just("object")},
            optional={
                "properties": st.dictionaries(NAMES, inner, max_size=3),
                "required": st.lists(NAMES, max_size=3, unique=True),
                "additionalProperties": inner,
            },
        ),
        st.fixed_dictionaries(
            {"type": st.just("array")},
            optional={"items": inner, "prefixItems": st.lists(inner, min_size=1, max_size=2)},
        ),
        st.builds(
            lambda key, items: {key: items},
            st.sampled_from(["allOf", "anyOf", "oneOf"]),
            st.lists(inner, min_size=1, max_size=3),
        ),
        st.builds(lambda rule: {"not": rule}, inner),
    ),
    max_leaves=6,
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dialect=st.sampled_from(DIALECTS), schema=SCHEMAS, instances=st.lists(JSON, min_size=1, max_size=6))
def test_the_quick_check_answers_what_python_jsonschema_answers(dialect, schema, instances):
    schema = {"$schema": dialect, **schema} if isinstance(schema, dict) else schema
    if not isinstance(schema, dict):
        return
    pinned = compile_pinned(schema)

    assert pinned.quick is not None  # every keyword drawn here is one the quick check is trusted with
    for instance in instances:
        assert pinned.accepts_quickly(instance) == pinned.validator.is_valid(instance), (schema, instance)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": "^a+$"},  # regular expressions: two dialects
        {"type": "object", "patternProperties": {"^x": {"type": "integer"}}},
        {"$defs": {"n": {"type": "integer"}}, "$ref": "#/$defs/n"},
        {"type": "array", "uniqueItems": True},
        {"type": "number", "multipleOf": 0.1},
        {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer"},  # 1.0 is no integer in draft 4
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}},  # nested too
        {"type": "object", "dependentRequired": {"a": ["b"]}},
    ],
)
def test_a_schema_with_other_keywords_is_left_to_python_jsonschema(schema):
    pinned = compile_pinned(schema)

    assert pinned.quick is None
    assert pinned.accepts_quickly("anything") is False


def test_a_refusal_still_names_the_wrong_argument():
    pinned = compile_pinned(
        {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}
    )

    assert pinned.quick is not None
    assert schema_errors(pinned, {"a": 1}) == ()
    assert [(error.path, error.message) for error in schema_errors(pinned, {"a": "1"})] == [
        ("a", "must be of type integer")
    ]
    assert [error.path for error in schema_errors(pinned, {})] == ["a"]
