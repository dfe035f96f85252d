"""The seam every wire adapter plugs into: its error, the call it decodes, the codec it registers.

An adapter (runner/wire/openai.py, openai_responses.py, anthropic.py) is the
only place that knows one model API's shapes. What they share lives here, so
no adapter reaches into another's private helpers:

- `WireFormatError`: a payload that is not the format's shape.
- `DecodedCall`: one tool call as an adapter read it from a model's turn,
  before the turn's own rules (runner/wire/turns.py) apply: ids present and
  unique, names bounded, arguments bounded.
- `parse_arguments`: a call's arguments text as a JSON object, decoded by
  runner/strict_json.py so it refuses what the request body parser refuses.
- `WireCodec`: what a format offers the rest of Toolgate. runner/wire/codecs.py
  registers one per format; the catalog, the calls endpoint and their
  serializers read names and encoders from there.

Messages of errors and refusals name a location and a type, never a value
from the payload, because a model may echo secrets or user data in a call.
Standard library and the runner package only: no Django, no HTTP client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runner import strict_json
from runner.errors import ToolgateError
from runner.types import ErrorCode, MalformedArgs, ToolExecResult, ToolSpec

INVALID_ARGS_MESSAGE = "Invalid tool arguments JSON"
INVALID_ARGS = MalformedArgs(error_code=ErrorCode.INVALID_JSON, safe_message=INVALID_ARGS_MESSAGE)


class WireFormatError(ToolgateError, ValueError):
    """A provider payload whose shape is not the format's.

    Messages name the offending location and expected type only, never a value
    from the payload, so the error may be logged or shown as is.
    """


@dataclass(frozen=True, slots=True)
class DecodedCall:
    """One tool call of a model's turn, as its format's adapter read it.

    `where` names the call in a refusal of the turn (`message.tool_calls[0]`,
    `message[2]`). `call_id` and `name` are "" when the model sent none: the
    turn refuses such a call, an adapter only reads. `args` is the parsed
    object, or `MalformedArgs` when the model's arguments are not one; it never
    holds the raw text.
    """

    where: str
    call_id: str
    name: str
    args: dict[str, Any] | MalformedArgs


# The model's id of a call and the result that answers it, in the turn's order.
Answer = tuple[str, ToolExecResult]


@dataclass(frozen=True, slots=True)
class WireCodec:
    """One model API's format: its name in `?format=` and `format`, and its three translations.

    `catalog_doc` and `turn_doc` describe the shapes in the API's help texts.
    """

    name: str
    catalog_doc: str
    turn_doc: str
    encode_tools: Callable[[Iterable[ToolSpec]], list[dict[str, Any]]]
    decode_turn: Callable[[Any], list[DecodedCall]]
    encode_results: Callable[[Sequence[Answer]], list[dict[str, Any]]]


def parse_arguments(arguments: str) -> dict[str, Any] | MalformedArgs:
    """The arguments text as a JSON object; empty means no arguments (models send "" for no-arg tools)."""
    if not arguments.strip():
        return {}
    try:
        parsed = strict_json.loads(arguments)
    except strict_json.StrictJsonError:  # malformed, too deep, or what the body parser refuses too
        return INVALID_ARGS
    return parsed if isinstance(parsed, dict) else INVALID_ARGS


def optional_str(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise WireFormatError(f"{where} must be a string")


def optional_mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return value
    raise WireFormatError(f"{where} must be an object")


def listed(message: Any, key: str, refusal: str) -> list[Any]:
    """The list of a turn given whole (`{key: [...]}`) or as the list itself."""
    found = message.get(key) if isinstance(message, Mapping) else message
    if not isinstance(found, list):
        raise WireFormatError(refusal)
    return found


def typed_items(items: Any, *, name: str, item_type: str) -> Iterator[tuple[int, str, Mapping[str, Any]]]:
    """(index, where, item) of the entries of `item_type` in the list `items` (called `name` in errors).

    Entries of other types (text, reasoning) are skipped; an entry that is not
    an object, or `items` not being a list, raises `WireFormatError`.
    """
    if not isinstance(items, list):
        raise WireFormatError(f"{name} must be a list")
    for index, item in enumerate(items):
        where = f"{name}[{index}]"
        if not isinstance(item, Mapping):
            raise WireFormatError(f"{where} must be an object")
        if item.get("type") == item_type:
            yield index, where, item


def plain_copy(value: Any) -> Any:
    """Deep copy into plain dicts and lists, the types `json.dumps` and HTTP clients expect."""
    if isinstance(value, Mapping):
        return {key: plain_copy(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain_copy(item) for item in value]
    return value
