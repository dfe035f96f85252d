"""How a validation problem is said, the same way for every input: API bodies, tool args, credentials.

Messages say what is wrong and what to send instead, in a few plain words:
"required", "must be a string, not a number", "unknown field (did you mean
'api_key'?); the fields are: api_key". They never echo a value the caller
sent: a type is named, a value never is, and an unknown key is never repeated
(a caller may paste a secret anywhere, a key included); a suggestion is
always one of the declared names.

The REST serializers (tools_app/api/serializers.py) take their field messages
from here; the runner's pydantic errors (tool args and outputs) and the
credential shapes go through `pydantic_message`.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

REQUIRED = "required"
NOT_NULL = "must not be null"
NOT_EMPTY = "must not be empty"
OBJECT = "an object (a JSON dictionary)"
# The usual slip with a model's tool call: OpenAI hands its arguments over as a string of JSON.
JSON_STRING_HINT = (
    "must be a JSON object, not a string holding one: parse the string and send the object itself "
    "(OpenAI's function.arguments is such a string)"
)

# What each pydantic error type means, as "must be ..." where it is a type.
_PYDANTIC_TYPES = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "dict_type": OBJECT,
    "model_type": OBJECT,
    "model_attributes_type": OBJECT,
    "list_type": "a list",
    "tuple_type": "a list",
    "set_type": "a list",
    "datetime_type": "an ISO 8601 date-time",
    "datetime_parsing": "an ISO 8601 date-time",
    "datetime_from_date_parsing": "an ISO 8601 date-time",
    "uuid_type": "a UUID",
    "uuid_parsing": "a UUID",
}
_PYDANTIC_LIMITS = {
    "string_too_short": "must be at least {min_length} characters",
    "string_too_long": "must be at most {max_length} characters",
    "too_short": "must have at least {min_length} items",
    "too_long": "must have at most {max_length} items",
    "greater_than": "must be greater than {gt}",
    "greater_than_equal": "must be at least {ge}",
    "less_than": "must be less than {lt}",
    "less_than_equal": "must be at most {le}",
    "string_pattern_mismatch": "must match the pattern {pattern}",
    "literal_error": "must be one of: {expected}",
    "enum": "must be one of: {expected}",
}


def json_type_name(value: Any) -> str:
    """The JSON kind of a value, for "must be X, not Y" (never the value itself)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    return "something else"


def must_be(expected: str, value: Any = ...) -> str:
    """`must be a string`, or with the value's kind: `must be a string, not a number`."""
    if value is ...:
        return f"must be {expected}"
    return f"must be {expected}, not {json_type_name(value)}"


def pydantic_message(error: Mapping[str, Any]) -> str:
    """One pydantic error (from `errors(include_input=True, include_context=True)`) in plain words."""
    kind = error.get("type", "")
    if kind == "missing":
        return REQUIRED
    if kind in _PYDANTIC_TYPES:
        return must_be(_PYDANTIC_TYPES[kind], error.get("input", ...))
    if kind in _PYDANTIC_LIMITS:
        try:
            return _PYDANTIC_LIMITS[kind].format(**(error.get("ctx") or {}))
        except (KeyError, IndexError):
            pass
    if kind == "value_error":  # a validator's own reason: "Value error, unknown IANA timezone"
        return str(error.get("msg", "")).removeprefix("Value error, ")
    return str(error.get("msg", "invalid"))


UNKNOWN_FIELD = "(unknown field)"


def unknown_field_name(key: str, allowed: Iterable[str]) -> str:
    """How an error's path names a key nobody declared: the key itself when it is a typo of a declared name.

    A caller may put anything in a key, a secret pasted in the wrong place
    included, so an unknown key is echoed only when it is close to a declared
    name (the "did you mean" match: it is that name, misspelt); any other
    reads `(unknown field)`, so the path still shows where it is.
    """
    return key if difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.7) else UNKNOWN_FIELD


def unknown_field_message(
    unknown: Iterable[str], allowed: Iterable[str], *, allowed_phrase: str = "the fields are"
) -> str:
    """`unknown field (did you mean 'args'?); the fields are: tool_id, args` — the unknown names never echoed."""
    names = list(allowed)
    suggestions = sorted({match for key in unknown for match in difflib.get_close_matches(key, names, n=1, cutoff=0.7)})
    guess = f" (did you mean {' or '.join(repr(name) for name in suggestions)}?)" if suggestions else ""
    listed = f"; {allowed_phrase}: {', '.join(names)}" if names else "; none are accepted here"
    return f"unknown field{guess}{listed}"


class _PathAndMessage(Protocol):
    @property
    def path(self) -> str: ...

    @property
    def message(self) -> str: ...


WHOLE_ARGUMENTS = "(arguments)"


def refusal_for_model(message: str, errors: Iterable[_PathAndMessage]) -> str:
    """A refusal as a model reads it: the message, then each wrong argument and what is wrong with it.

    `arguments do not match the tool's schema: timezone: unknown IANA time zone; ms: required`.
    Paths and messages come from the validators, which never echo a value.
    Where the model reads only text (MCP's `isError` content, a model format's
    tool result), the field errors must be in it: nobody reads `_meta`.
    """
    errors = list(errors)
    if len(errors) == 1 and errors[0].message == message:  # the message is the one error's: say where only
        return f"{errors[0].path}: {message}" if errors[0].path else message
    details = [f"{error.path or WHOLE_ARGUMENTS}: {error.message}" for error in errors]
    return f"{message}: {'; '.join(details)}" if details else message


def is_json_object_text(value: Any) -> bool:
    """A string that parses to a JSON object: sent where the object itself belonged."""
    if not isinstance(value, str):
        return False
    try:
        return isinstance(json.loads(value), dict)
    except ValueError:
        return False
