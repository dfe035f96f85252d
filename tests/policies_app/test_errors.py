"""The application error and its one translation per interface (core/errors.py)."""

from __future__ import annotations

import pytest
from django import forms
from django.core.management import CommandError

from core.errors import ERROR_STATUS, AppError, add_app_error_to_form, command_errors, drf_field_errors
from runner.errors import ToolgateError
from runner.types import ErrorCode, FieldError


def test_a_validation_refusal_answers_like_every_invalid_request():
    error = AppError("the connection is not valid", field_errors=[("provider", "unknown provider")])

    assert isinstance(error, ToolgateError)
    assert str(error) == "the connection is not valid"
    assert error.status == 422
    assert error.body() == {
        "error_code": "validation",
        "safe_message": "the request is invalid",
        "errors": [{"path": "provider", "message": "unknown provider"}],
    }


def test_errors_of_one_path_stand_together_where_the_path_first_appears():
    error = AppError("refused", field_errors=[("a", "1"), ("b", "2"), ("a", "3")])

    assert [(item["path"], item["message"]) for item in error.body()["errors"]] == [("a", "1"), ("a", "3"), ("b", "2")]


def test_a_refusal_without_field_errors_is_one_of_the_whole_request():
    assert AppError("a connection is revoked").body()["errors"] == [{"path": "", "message": "a connection is revoked"}]


def test_other_codes_keep_their_message_and_take_their_status_from_the_one_table():
    error = AppError("only an owner may decide", code="forbidden")

    assert error.body() == {"error_code": "forbidden", "safe_message": "only an owner may decide"}
    assert error.status == ERROR_STATUS["forbidden"] == 403
    assert AppError("?", code="no_such_code").status == 500


def test_extra_fields_keep_their_order_and_the_code_and_message_are_the_errors():
    extra = {"tool_call_id": "c1", "tool_id": "t", "ok": False, "error_code": "rate_limited", "safe_message": "slow"}
    error = AppError("slow", code=ErrorCode.RATE_LIMITED, extra=extra, retry_after_s=3)

    assert list(error.body()) == ["tool_call_id", "tool_id", "ok", "error_code", "safe_message"]
    assert error.body() == extra
    assert (error.status, error.retry_after_s) == (429, 3)


class _ConnectionForm(forms.Form):
    provider = forms.CharField()
    api_key = forms.CharField()


def test_the_form_helper_puts_each_field_error_on_the_field_its_path_ends_with():
    form = _ConnectionForm(data={"provider": "github", "api_key": "k"})
    assert form.is_valid()
    error = AppError(
        "refused",
        field_errors=[
            FieldError(path="credentials.api_key", message="too short"),
            ("scopes.0", "too long"),
            ("provider", "unknown provider"),
        ],
    )

    add_app_error_to_form(form, error)

    assert form.errors == {"api_key": ["too short"], "__all__": ["too long"], "provider": ["unknown provider"]}


def test_the_form_helper_puts_a_refusal_without_field_errors_on_the_field_it_is_given():
    form = _ConnectionForm(data={"provider": "github", "api_key": "k"})
    assert form.is_valid()

    add_app_error_to_form(form, AppError("webhook URL refused: private address"), field="provider")

    assert form.errors == {"provider": ["webhook URL refused: private address"]}


def test_commands_end_with_the_safe_message_and_their_prefix():
    with (
        pytest.raises(CommandError, match=r"^tenant 'x' refused: slug is invalid$"),
        command_errors("tenant 'x' refused: "),
    ):
        raise AppError("slug is invalid")


DRF_DETAIL = {
    "non_field_errors": ["give a connection with its grant"],
    "tool_id": ["This field is required."],
    "connection_ids": {1: ["Must be a valid UUID."]},
    "args": [{}, {"when": ["Enter a valid date."], "non_field_errors": ["too early"]}],
}


def test_drf_error_detail_becomes_field_errors_at_dotted_paths():
    assert drf_field_errors(DRF_DETAIL) == [
        FieldError(path="", message="give a connection with its grant"),
        FieldError(path="tool_id", message="This field is required."),
        FieldError(path="connection_ids.1", message="Must be a valid UUID."),
        FieldError(path="args.1.when", message="Enter a valid date."),
        FieldError(path="args.1", message="too early"),  # no one field's: its parent's
    ]


def test_an_interface_names_the_top_level_fields_its_own_way():
    # MCP's paths: a key the mapping does not name is the whole call's.
    errors = drf_field_errors(DRF_DETAIL, top_level={"tool_id": "name", "args": "arguments"})

    assert [error.path for error in errors] == ["", "name", "", "arguments.1.when", "arguments.1"]
