"""The one application error, the contract's error codes and the one table of their HTTP statuses.

Services refuse a request by raising `AppError`: a contract error code, a
message safe to show whoever asked (it names fields, ids and rules, never a
submitted value, a token or an upstream body) and, for `validation`, the
field errors (path, message) that say where. Interfaces translate it in one
place each, and never by hand in a view:

- the REST API: the DRF exception handler (core/api/handlers.py) answers the
  envelope `{"error_code", "safe_message", ...}` with `status_of(code)`;
- MCP: the endpoint answers a JSON-RPC error with the same status;
- forms: `add_app_error_to_form` puts each field error on its field;
- management commands: `command_errors` turns it into a CommandError.

A model's own validation (`full_clean`) reaches interfaces the same way:
services call `full_clean_or_refuse`, never letting Django's ValidationError out.

Every app raises it, and the REST handler, the MCP endpoint and the forms
all read the same table (docs/api.md). It extends the runner's `ToolgateError`, so there is one
hierarchy from the pipeline up; the runner itself stays framework-free.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

from django import forms
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.core.management.base import CommandError
from django.db.models import Model

from runner.errors import ToolgateError
from runner.types import ErrorCode, FieldError

# Codes of the API itself, beside the tool-call codes of runner.types.ErrorCode.
UNAUTHENTICATED = "unauthenticated"
FORBIDDEN = "forbidden"
NOT_FOUND = "not_found"
METHOD_NOT_ALLOWED = "method_not_allowed"
NOT_ACCEPTABLE = "not_acceptable"
UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
BAD_REQUEST = "bad_request"
INTERNAL = "internal"

# The one table from error code to HTTP status (docs/api.md).
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
    ErrorCode.CANCELLED: 499,
    ErrorCode.INPUT_REQUIRED: 202,
    ErrorCode.EXECUTION: 502,
    ErrorCode.OUTPUT_INVALID: 500,
    ErrorCode.REDACTION_FAILED: 500,
    ErrorCode.RESULT_TOO_LARGE: 502,
    ErrorCode.AUTHZ_DENIED: 403,
    ErrorCode.UNAVAILABLE_DEPENDENCY: 503,
    ErrorCode.TOOL_ERROR: 200,
    ErrorCode.CONNECTION_REQUIRED: 409,
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
# What a refused request says as a whole; `errors` says where.
VALIDATION_MESSAGE: Final = "the request is invalid"


def status_of(code: str) -> int:
    """The HTTP status of a contract code; a code outside the table is an internal error."""
    return ERROR_STATUS.get(code, ERROR_STATUS[INTERNAL])


def envelope(error_code: str, safe_message: str, **extra: Any) -> dict[str, Any]:
    """The contract's error body."""
    return {"error_code": str(error_code), "safe_message": safe_message, **extra}


class AppError(ToolgateError):
    """A request an application service (or interface) refuses, with everything an interface needs to say so.

    `code`: a contract error code (ERROR_STATUS's keys); a refused management
    write is `validation`. `field_errors`: (path, message) pairs, paths as the
    API spells them (`credentials.api_key`, `connection_ids.0`; empty for the
    whole request). `extra`: further fields of the API body (a refused tool
    call's tool_call_id, tool_id, ...); `retry_after_s`: the Retry-After header.
    `str(error)` is the safe message.
    """

    def __init__(
        self,
        safe_message: str,
        *,
        code: str = ErrorCode.VALIDATION,
        field_errors: Iterable[FieldError | tuple[str, str]] = (),
        extra: Mapping[str, Any] | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(safe_message)
        self.code = str(code)
        self.safe_message = safe_message
        self.field_errors = tuple(
            error if isinstance(error, FieldError) else FieldError(path=error[0], message=error[1])
            for error in field_errors
        )
        self.extra = dict(extra or {})
        self.retry_after_s = retry_after_s

    @property
    def status(self) -> int:
        return status_of(self.code)

    def body(self) -> dict[str, Any]:
        """The API's envelope for this error.

        A `validation` refusal answers as every invalid request does: the fixed
        "the request is invalid", with `errors` saying where (a refusal without
        field errors is one of the whole request, path ""), grouped by path in
        the order the paths first appear, as DRF lists a serializer's errors.
        The fields of `extra` come first, in their own order.
        """
        if self.code == ErrorCode.VALIDATION and not self.extra:
            errors = self.field_errors or (FieldError(path="", message=self.safe_message),)
            return envelope(self.code, VALIDATION_MESSAGE, errors=_as_dicts(_by_path(errors)))
        body = dict(self.extra)
        body.update(envelope(self.code, self.safe_message))
        if self.field_errors:
            body.setdefault("errors", _as_dicts(self.field_errors))
        return body


def field_errors_of(error: ValidationError) -> list[FieldError]:
    """Django's validation errors as field errors, in order; errors of no one field are the whole request's."""
    if not hasattr(error, "error_dict"):
        return [FieldError(path="", message=message) for message in error.messages]
    return [
        FieldError(path="" if field == NON_FIELD_ERRORS else field, message=message)
        for field, messages in error.message_dict.items()
        for message in messages
    ]


DRF_NON_FIELD_ERRORS: Final = "non_field_errors"  # DRF's NON_FIELD_ERRORS_KEY, left at its default


def drf_field_errors(detail: Any, *, top_level: Mapping[str, str] | None = None) -> list[FieldError]:
    """DRF's nested error detail (`serializer.errors`, a ValidationError's `detail`) as field errors, in order.

    Paths join keys and list indexes with dots (`args.items.0`); DRF's messages name rules, not values.
    Errors of no one field (`non_field_errors`) are their parent's. An interface whose callers name the
    fields otherwise (MCP's `name`, `arguments`, `_meta.…`) passes `top_level`: the first key's own path,
    and a key it does not name is the whole request's. The REST envelope and the MCP endpoint both use it.
    """
    return list(_drf_errors(detail, "", top_level))


def _drf_errors(detail: Any, path: str, top_level: Mapping[str, str] | None) -> Iterator[FieldError]:
    if isinstance(detail, Mapping):
        for key, value in detail.items():
            if key == DRF_NON_FIELD_ERRORS:
                part = ""
            elif top_level is not None and not path:
                part = top_level.get(str(key), "")
            else:
                part = str(key)
            yield from _drf_errors(value, _join(path, part), top_level)
    elif isinstance(detail, list):
        if all(isinstance(item, str) for item in detail):
            yield from (FieldError(path=path, message=str(item)) for item in detail)
        else:
            for index, item in enumerate(detail):
                if item:
                    yield from _drf_errors(item, _join(path, str(index)), top_level)
    else:
        yield FieldError(path=path, message=str(detail))


def _join(path: str, part: str) -> str:
    if not part:
        return path
    return f"{path}.{part}" if path else part


def full_clean_or_refuse(instance: Model, *, exclude: Iterable[str] | None = None) -> None:
    """`instance.full_clean()`, its refusal as an AppError: every message in the safe message, each on its field."""
    try:
        instance.full_clean(exclude=exclude)
    except ValidationError as error:
        raise AppError(" ".join(error.messages), field_errors=field_errors_of(error)) from None


def _by_path(errors: Iterable[FieldError]) -> list[FieldError]:
    grouped: dict[str, list[FieldError]] = {}
    for error in errors:
        grouped.setdefault(error.path, []).append(error)
    return [error for same_path in grouped.values() for error in same_path]


def _as_dicts(errors: Iterable[FieldError]) -> list[dict[str, str]]:
    return [{"path": error.path, "message": error.message} for error in errors]


def add_app_error_to_form(form: forms.BaseForm, error: AppError, *, field: str | None = None) -> None:
    """Show a service's refusal on a form: each field error on the field it names, the rest on `field`.

    A path names a form field by its last segment (`credentials.api_key` is
    the form's `api_key`); a path the form does not have, and a refusal
    without field errors, go to `field` (None: the whole form).
    """
    if not error.field_errors:
        form.add_error(field, error.safe_message)
        return
    for field_error in error.field_errors:
        name = field_error.path.rsplit(".", 1)[-1]
        form.add_error(name if name and name in form.fields else field, field_error.message)


@contextmanager
def command_errors(prefix: str = "") -> Iterator[None]:
    """In a management command: an AppError ends the command as a CommandError with its safe message."""
    try:
        yield
    except AppError as error:
        raise CommandError(f"{prefix}{error}") from None
