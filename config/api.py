"""What every /api/ response has in common: the JSON parser, the error envelope and its statuses.

The contract promises one error body everywhere under /api/:
`{"error_code": str, "safe_message": str, ...}`, never a stack trace, an HTML
page or an echo of the input. This module is the one place that turns errors
into that body and decides the HTTP status of each error code (`ERROR_STATUS`);
the apps raise exceptions carrying a code and never pick a status themselves
(apps do not import config, so they cannot reach this table even by mistake).

It is wired through settings (REST_FRAMEWORK's parser and exception handler)
and config/urls.py (the Django-level handlers and the /api/ catch-all).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db import connections
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions
from rest_framework.parsers import BaseParser
from rest_framework.response import Response

from policies_app.outages import OUTAGE_ERRORS
from runner.pipeline import DEPENDENCY_MESSAGE, DEPENDENCY_RETRY_AFTER_S
from runner.types import ErrorCode
from tools_app.api import ToolCallFailed

logger = logging.getLogger(__name__)

API_PREFIX = "/api/"
MAX_BODY_BYTES: Final = 64 * 1024
MAX_JSON_DEPTH: Final = 32

# Codes of the API itself, beside the tool-call codes of runner.types.ErrorCode.
UNAUTHENTICATED = "unauthenticated"
FORBIDDEN = "forbidden"
NOT_FOUND = "not_found"
METHOD_NOT_ALLOWED = "method_not_allowed"
NOT_ACCEPTABLE = "not_acceptable"
UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
BAD_REQUEST = "bad_request"
INTERNAL = "internal"

# The one table from error code to HTTP status (CONTRACT.md §4).
ERROR_STATUS: Final[Mapping[str, int]] = {
    ErrorCode.UNAVAILABLE: 404,
    ErrorCode.POLICY_DENIED: 403,
    ErrorCode.APPROVAL_REQUIRED: 202,
    ErrorCode.RATE_LIMITED: 429,
    ErrorCode.IDEMPOTENCY_CONFLICT: 409,
    ErrorCode.INVALID_JSON: 400,
    ErrorCode.VALIDATION: 422,
    ErrorCode.CONNECTION_UNAVAILABLE: 409,
    ErrorCode.AUTH_REFRESH_FAILED: 502,
    ErrorCode.TIMEOUT: 504,
    ErrorCode.EXECUTION: 502,
    ErrorCode.OUTPUT_INVALID: 500,
    ErrorCode.REDACTION_FAILED: 500,
    ErrorCode.RESULT_TOO_LARGE: 502,
    ErrorCode.AUTHZ_DENIED: 403,
    ErrorCode.UNAVAILABLE_DEPENDENCY: 503,
    UNAUTHENTICATED: 401,
    FORBIDDEN: 403,
    NOT_FOUND: 404,
    METHOD_NOT_ALLOWED: 405,
    NOT_ACCEPTABLE: 406,
    UNSUPPORTED_MEDIA_TYPE: 415,
    BAD_REQUEST: 400,
    INTERNAL: 500,
}
# The contract files size limits under `validation`; the whole-body limit still answers
# 413 so proxies and HTTP clients recognise it (args over their limit answer 422).
BODY_TOO_LARGE_STATUS: Final = 413

# DRF's own exceptions, by the contract code they stand for.
_CODE_OF_EXCEPTION: Final[tuple[tuple[type[exceptions.APIException], str], ...]] = (
    (exceptions.NotAuthenticated, UNAUTHENTICATED),
    (exceptions.AuthenticationFailed, UNAUTHENTICATED),
    (exceptions.PermissionDenied, FORBIDDEN),
    (exceptions.NotFound, NOT_FOUND),
    (exceptions.MethodNotAllowed, METHOD_NOT_ALLOWED),
    (exceptions.NotAcceptable, NOT_ACCEPTABLE),
    (exceptions.UnsupportedMediaType, UNSUPPORTED_MEDIA_TYPE),
    (exceptions.ParseError, ErrorCode.INVALID_JSON),
    (exceptions.ValidationError, ErrorCode.VALIDATION),
    (exceptions.Throttled, ErrorCode.RATE_LIMITED),
)
# DRF's default messages for these echo request data (method, media type) or are vague.
_FIXED_MESSAGES: Final[Mapping[type[exceptions.APIException], str]] = {
    exceptions.NotAuthenticated: "no API key: send `Authorization: Bearer <api key>`",
    exceptions.MethodNotAllowed: "method not allowed on this resource",
    exceptions.UnsupportedMediaType: "unsupported media type; send application/json",
    exceptions.NotAcceptable: "this API answers application/json only",
    exceptions.Throttled: "too many requests; retry later",
    exceptions.ValidationError: "the request is invalid",
}


def envelope(error_code: str, safe_message: str, **extra: Any) -> dict[str, Any]:
    """The contract's error body."""
    return {"error_code": str(error_code), "safe_message": safe_message, **extra}


# --- the parser ----------------------------------------------------------------------


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
        if request is not None and _declared_length(request.META) > MAX_BODY_BYTES:
            raise RequestBodyTooLarge()
        raw = stream.read(MAX_BODY_BYTES + 1)
        if len(raw) > MAX_BODY_BYTES:
            raise RequestBodyTooLarge()
        return parse_json_object(raw)


def _declared_length(meta: Mapping[str, Any]) -> int:
    try:
        return int(meta.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


# --- the exception handler -------------------------------------------------------------


def set_rollback() -> None:
    """As DRF's own handler does: an error response must not commit an ATOMIC_REQUESTS transaction.

    (Not imported from rest_framework.views: that module reads the parser
    setting, which names this module, while it is being imported.)
    """
    for db in connections.all(initialized_only=True):
        if db.settings_dict["ATOMIC_REQUESTS"] and db.in_atomic_block:
            db.set_rollback(True)


def exception_handler(exc: Exception, context: Mapping[str, Any]) -> Response:
    """DRF's EXCEPTION_HANDLER: every exception of an API view becomes the envelope.

    Exceptions nobody anticipated answer 500 `internal`; the log line names the
    exception type only, since messages of arbitrary exceptions may carry data.
    """
    set_rollback()
    if isinstance(exc, ToolCallFailed):
        return _tool_call_failed(exc)
    if isinstance(exc, OUTAGE_ERRORS):
        logger.error("dependency unreachable: %s", type(exc).__name__)
        return Response(
            envelope(ErrorCode.UNAVAILABLE_DEPENDENCY, DEPENDENCY_MESSAGE),
            status=ERROR_STATUS[ErrorCode.UNAVAILABLE_DEPENDENCY],
            headers={"Retry-After": str(DEPENDENCY_RETRY_AFTER_S)},
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound("not found")
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, RequestDataTooBig):
        exc = RequestBodyTooLarge()
    if isinstance(exc, exceptions.APIException):
        return _api_exception(exc)
    view = context.get("view")
    logger.error("unhandled %s in %s", type(exc).__name__, type(view).__name__ if view is not None else "an API view")
    return Response(envelope(INTERNAL, "internal error"), status=ERROR_STATUS[INTERNAL])


def _tool_call_failed(exc: ToolCallFailed) -> Response:
    headers = {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s is not None else None
    return Response(exc.body, status=ERROR_STATUS.get(exc.error_code, ERROR_STATUS[INTERNAL]), headers=headers)


def _api_exception(exc: exceptions.APIException) -> Response:
    code = _error_code(exc)
    headers = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header
    if getattr(exc, "wait", None):
        headers["Retry-After"] = str(int(exc.wait + 0.999))
    extra: dict[str, Any] = {}
    if isinstance(exc, exceptions.ValidationError):
        extra["errors"] = flatten_errors(exc.detail)
    body = envelope(code, _safe_message(exc), **extra)
    status = BODY_TOO_LARGE_STATUS if isinstance(exc, RequestBodyTooLarge) else ERROR_STATUS[code]
    return Response(body, status=status, headers=headers)


def _error_code(exc: exceptions.APIException) -> str:
    """A contract code the raiser chose (`NotFound(..., code="unavailable")`), else the class's."""
    chosen = getattr(exc.detail, "code", None)
    if isinstance(chosen, str) and chosen in ERROR_STATUS:
        return chosen
    for exception_class, code in _CODE_OF_EXCEPTION:
        if isinstance(exc, exception_class):
            return code
    return BAD_REQUEST if 400 <= exc.status_code < 500 else INTERNAL


def _safe_message(exc: exceptions.APIException) -> str:
    for exception_class, message in _FIXED_MESSAGES.items():
        if isinstance(exc, exception_class):
            return message
    if isinstance(exc.detail, str):
        return str(exc.detail)
    return "the request was refused"


def flatten_errors(detail: Any, path: str = "") -> list[dict[str, str]]:
    """DRF's nested error detail as `[{"path", "message"}]` (DRF messages name rules, not values)."""
    if isinstance(detail, dict):
        return [
            error
            for key, value in detail.items()
            for error in flatten_errors(value, _join(path, "" if key == "non_field_errors" else str(key)))
        ]
    if isinstance(detail, list):
        if all(isinstance(item, str) for item in detail):
            return [{"path": path, "message": str(item)} for item in detail]
        return [
            error for index, item in enumerate(detail) if item for error in flatten_errors(item, _join(path, index))
        ]
    return [{"path": path, "message": str(detail)}]


def _join(path: str, part: str | int) -> str:
    part = str(part)
    if not part:
        return path
    return f"{path}.{part}" if path else part


# --- Django-level handlers: errors raised before or outside an API view ------------------


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


def _json_error(code: str, message: str) -> JsonResponse:
    return JsonResponse(envelope(code, message), status=ERROR_STATUS[code])


@csrf_exempt
def api_not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """The /api/ catch-all route: a JSON 404 whatever the method, and even with DEBUG=True."""
    return _json_error(NOT_FOUND, "no such API endpoint")


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _is_api(request):
        return _json_error(NOT_FOUND, "no such API endpoint")
    return defaults.page_not_found(request, exception)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _is_api(request):
        if isinstance(exception, RequestDataTooBig):
            return JsonResponse(envelope(ErrorCode.VALIDATION, RequestBodyTooLarge.default_detail), status=413)
        return _json_error(BAD_REQUEST, "bad request")
    return defaults.bad_request(request, exception)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _is_api(request):
        return _json_error(FORBIDDEN, "forbidden")
    return defaults.permission_denied(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if _is_api(request):
        return _json_error(INTERNAL, "internal error")
    return defaults.server_error(request)
