"""The API's JSON parser: bounded size and depth, strict JSON, objects only.

Every /api/ view parses its body with `HardenedJSONParser` (REST_FRAMEWORK's
only parser, set in config/settings.py) and reads it with `validated_body`:
the JSON object (`json_object` also refuses an empty body) through the view's
input serializer. The tools API, the connections API and the MCP endpoint
share this one parser. Its messages name the problem, never the input.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from rest_framework import exceptions
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.serializers import BaseSerializer

from core.errors import BODY_TOO_LARGE_STATUS
from runner import strict_json
from runner.strict_json import MAX_JSON_DEPTH
from runner.types import ErrorCode

MAX_BODY_BYTES: Final = 64 * 1024


class RequestBodyTooLarge(exceptions.APIException):
    status_code = BODY_TOO_LARGE_STATUS
    default_detail = f"request body exceeds {MAX_BODY_BYTES} bytes"
    default_code = ErrorCode.VALIDATION.value


def _invalid_json(message: str) -> exceptions.ParseError:
    return exceptions.ParseError(message, code=ErrorCode.INVALID_JSON.value)


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """A request body as a JSON object, or a ParseError whose message names the problem, never the input."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _invalid_json("request body is not valid UTF-8") from None
    try:
        document = strict_json.loads(text, max_depth=MAX_JSON_DEPTH)
    except strict_json.NotJson:
        raise _invalid_json("request body is not valid JSON") from None
    except strict_json.StrictJsonError as exc:
        raise _invalid_json(str(exc)) from None
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
