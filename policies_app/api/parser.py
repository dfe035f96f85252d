"""The API's JSON parser: bounded size and depth, strict JSON, objects only.

Every /api/ view parses its body with `HardenedJSONParser` (REST_FRAMEWORK's
only parser, set in config/settings.py) and reads it with `validated_body`:
the JSON object (`json_object` also refuses an empty body) through the view's
input serializer. It lives in policies_app, the lowest app, so the
tools API, the connections API and the MCP endpoint share one parser instead
of each app keeping a copy. Its messages name the problem, never the input.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

from rest_framework import exceptions
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.serializers import BaseSerializer

from policies_app.errors import BODY_TOO_LARGE_STATUS
from runner.types import ErrorCode

MAX_BODY_BYTES: Final = 64 * 1024
MAX_JSON_DEPTH: Final = 32


class RequestBodyTooLarge(exceptions.APIException):
    status_code = BODY_TOO_LARGE_STATUS
    default_detail = f"request body exceeds {MAX_BODY_BYTES} bytes"
    default_code = ErrorCode.VALIDATION.value


def _invalid_json(message: str) -> exceptions.ParseError:
    return exceptions.ParseError(message, code=ErrorCode.INVALID_JSON.value)


class _Rejected(Exception):
    """A JSON document that parses but that the API refuses; the message is safe."""


# Characters that change the scanner's state: quotes, escapes and brackets.
_STRUCTURAL = re.compile(r'["\\\[\]{}]')


def json_depth_exceeds(text: str, limit: int) -> bool:
    """Whether brackets outside strings nest deeper than `limit`, without recursion.

    Runs before `json.loads`, whose C scanner recurses once per level and would
    meet a RecursionError (a 500 in DRF) on a body of ten thousand `[`. For any
    text, the scanner agrees with JSON on what is inside a string up to the
    first syntax error, and json.loads stops there too.
    """
    depth = 0
    in_string = False
    escaped_at = -1  # the index of the character a backslash escapes
    for match in _STRUCTURAL.finditer(text):
        index, char = match.start(), match.group()
        if index == escaped_at:
            continue
        if in_string:
            if char == "\\":
                escaped_at = index + 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise _Rejected("duplicate key in a JSON object")
    return result


def _reject_constant(name: str) -> Any:
    raise _Rejected("NaN and Infinity are not valid JSON numbers")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):  # 1e999 parses to infinity without asking parse_constant
        raise _Rejected("NaN and Infinity are not valid JSON numbers")
    return value


def _strings(value: Any) -> Iterator[str]:
    """Every key and string value of a parsed document (depth already bounded)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            yield from item.keys()
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _is_clean(text: str) -> bool:
    """No NUL (PostgreSQL refuses it) and no lone surrogate (UTF-8 cannot encode it)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """A request body as a JSON object, or a ParseError whose message names the problem, never the input."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _invalid_json("request body is not valid UTF-8") from None
    if json_depth_exceeds(text, MAX_JSON_DEPTH):
        raise _invalid_json(f"JSON nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        document = json.loads(
            text, object_pairs_hook=_unique_keys, parse_constant=_reject_constant, parse_float=_finite_float
        )
    except _Rejected as exc:
        raise _invalid_json(str(exc)) from None
    except (ValueError, RecursionError):  # JSONDecodeError, oversized integers
        raise _invalid_json("request body is not valid JSON") from None
    if not all(_is_clean(text) for text in _strings(document)):
        raise _invalid_json("JSON strings must not contain NUL characters or unpaired surrogates")
    if not isinstance(document, dict):
        raise _invalid_json("request body must be a JSON object")
    return document


class HardenedJSONParser(BaseParser):
    """The API's only parser: bounded size and depth, strict JSON, objects only.

    Not a JSONParser subclass on purpose: DRF reads `request.body` in full for
    those; this one reads at most the limit plus one byte from the stream, and
    checks the declared Content-Length before reading anything.
    """

    media_type = "application/json"

    def parse(
        self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        request = (parser_context or {}).get("request")
        if request is not None and declared_length(request.META) > MAX_BODY_BYTES:
            raise RequestBodyTooLarge()
        raw = stream.read(MAX_BODY_BYTES + 1)
        if len(raw) > MAX_BODY_BYTES:
            raise RequestBodyTooLarge()
        return parse_json_object(raw)


def declared_length(meta: Mapping[str, Any]) -> int:
    """The request's Content-Length as declared; 0 when absent or not a number."""
    try:
        return int(meta.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


def json_object(request: Request) -> dict[str, Any]:
    """The request's body as a JSON object; an empty body is refused like a non-object one."""
    data = request.data
    if request.stream is None:  # DRF does not call the parser for an empty body
        raise _invalid_json("request body is empty")
    return data  # type: ignore[no-any-return]


def validated_body(request: Request, serializer_class: type[BaseSerializer]) -> Any:
    """The request's JSON object as `serializer_class` validates it; its refusal is a ValidationError (422)."""
    serializer = serializer_class(data=json_object(request))
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data
