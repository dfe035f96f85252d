"""What every /api/ error has in common: one exception handler turning errors into the envelope.

The contract promises one error body everywhere under /api/:
`{"error_code": str, "safe_message": str, ...}`, never a stack trace, an HTML
page or an echo of the input. This module is the one place that turns
exceptions into that body: the application's `AppError` (its code picks the
status from the one table, core.errors.ERROR_STATUS), DRF's own
exceptions, outages, and anything unforeseen (500 `internal`).

It is wired through settings (REST_FRAMEWORK's exception handler) and
config/urls.py (the Django-level handlers and the /api/ catch-all).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db import connections
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.urls import Resolver404, resolve
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions
from rest_framework.response import Response

from core.api.parser import RequestBodyTooLarge
from core.errors import (
    BAD_REQUEST,
    BODY_TOO_LARGE_STATUS,
    ERROR_STATUS,
    FORBIDDEN,
    INTERNAL,
    METHOD_NOT_ALLOWED,
    NOT_ACCEPTABLE,
    NOT_FOUND,
    UNAUTHENTICATED,
    UNSUPPORTED_MEDIA_TYPE,
    VALIDATION_MESSAGE,
    AppError,
    drf_field_errors,
    envelope,
)
from core.outages import OUTAGE_ERRORS
from runner.pipeline import DEPENDENCY_MESSAGE, DEPENDENCY_RETRY_AFTER_S
from runner.types import ErrorCode

logger = logging.getLogger(__name__)

API_PREFIX = "/api/"

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
    exceptions.ValidationError: VALIDATION_MESSAGE,
}


# --- the exception handler -------------------------------------------------------------


def set_rollback() -> None:
    """As DRF's own handler does: an error response must not commit an ATOMIC_REQUESTS transaction.

    (Not imported from rest_framework.views: that module reads the parser
    setting, which names this module, while it is being imported.)
    """
    for db in connections.all(initialized_only=True):
        if db.settings_dict["ATOMIC_REQUESTS"] and db.in_atomic_block:
            db.set_rollback(True)


_DEPENDENCY_BODY = envelope(ErrorCode.UNAVAILABLE_DEPENDENCY, DEPENDENCY_MESSAGE)
_DEPENDENCY_STATUS = ERROR_STATUS[ErrorCode.UNAVAILABLE_DEPENDENCY]
_DEPENDENCY_HEADERS = {"Retry-After": str(DEPENDENCY_RETRY_AFTER_S)}


def exception_handler(exc: Exception, context: Mapping[str, Any]) -> Response:
    """DRF's EXCEPTION_HANDLER: every exception of an API view becomes the envelope.

    Exceptions nobody anticipated answer 500 `internal`; the log line names the
    exception type only, since messages of arbitrary exceptions may carry data.
    """
    set_rollback()
    if isinstance(exc, AppError):
        return _app_error(exc)
    if isinstance(exc, OUTAGE_ERRORS):
        logger.error("dependency unreachable: %s", type(exc).__name__)
        return Response(_DEPENDENCY_BODY, status=_DEPENDENCY_STATUS, headers=_DEPENDENCY_HEADERS)
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


def dependency_unavailable(exc: Exception) -> HttpResponse:
    """The API's answer to an outage met after its view returned (a write the answer waits for)."""
    logger.error("dependency unreachable: %s", type(exc).__name__)
    return JsonResponse(_DEPENDENCY_BODY, status=_DEPENDENCY_STATUS, headers=_DEPENDENCY_HEADERS)


OutageAnswer = Callable[[Exception], HttpResponse]
_OUTAGE_ANSWER = "toolgate_outage_answer"  # an HttpRequest's attribute


def answer_outages_with(request: HttpRequest, answer: OutageAnswer) -> None:
    """How this request's answer reads if a write sent ahead of it fails: a view with an envelope of its own.

    The answer waits for its writes in config.middleware's
    `answer_after_durable_writes`, after the view has returned: the MCP
    endpoint's outage is a JSON-RPC error there too, not the REST envelope.
    """
    setattr(request, _OUTAGE_ANSWER, answer)


def outage_answer_of(request: HttpRequest) -> OutageAnswer:
    """The answer `answer_outages_with` set for this request, else the REST API's (`dependency_unavailable`)."""
    return getattr(request, _OUTAGE_ANSWER, dependency_unavailable)  # type: ignore[no-any-return]


def _app_error(exc: AppError) -> Response:
    headers = {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s is not None else None
    return Response(exc.body(), status=exc.status, headers=headers)


def _api_exception(exc: exceptions.APIException) -> Response:
    code = _error_code(exc)
    headers = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header
    if getattr(exc, "wait", None):
        headers["Retry-After"] = str(int(exc.wait + 0.999))
    extra: dict[str, Any] = {}
    if isinstance(exc, exceptions.ValidationError):
        extra["errors"] = [{"path": error.path, "message": error.message} for error in drf_field_errors(exc.detail)]
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


# --- Django-level handlers: errors raised before or outside an API view ------------------


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


def _json_error(code: str, message: str) -> JsonResponse:
    return JsonResponse(envelope(code, message), status=ERROR_STATUS[code])


@csrf_exempt
def api_not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """The /api/ catch-all route: a JSON 404 whatever the method, and even with DEBUG=True.

    API paths take no trailing slash; a path that would exist without one says so (no redirect:
    a client that follows it may drop a POST's body).
    """
    without_slash = request.path.rstrip("/")
    if without_slash != request.path and _api_route_exists(without_slash):
        return _json_error(NOT_FOUND, f"no such API endpoint; API paths take no trailing slash: {without_slash}")
    return _json_error(NOT_FOUND, "no such API endpoint")


def _api_route_exists(path: str) -> bool:
    try:
        return resolve(path).func is not api_not_found
    except Resolver404:
        return False


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
