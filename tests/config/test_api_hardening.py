"""Every error under /api/ is the contract's envelope, and hostile input never breaks the API.

Each hostile request is answered with a 4xx envelope, and the same client's next
normal call still answers 200: no state of the process was damaged.
"""

from __future__ import annotations

import io
import json
import logging
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core.exceptions import RequestDataTooBig
from django.core.management import call_command
from django.http import Http404
from django.test import RequestFactory
from django.utils import timezone
from rest_framework.exceptions import ParseError
from rest_framework.test import APIClient

from core.api import handlers as api
from core.api import parser
from policies_app.governance import governance_bump
from policies_app.models import ServiceAccount
from policies_app.services import service_account_revoke
from runner import strict_json
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tools_app.api.serializers import ID_MESSAGE
from tools_app.models import Tool, ToolInvocation

pytestmark = pytest.mark.django_db

EXEC = "/api/v1/tools/exec"
NORMAL_CALL = {"tool_id": "core__get_current_time", "args": {}}
CANARY = "canary-0c4f7e"


@pytest.fixture
def key():
    call_command("sync_tools", stdout=io.StringIO())
    Tool.objects.filter(pk="core__get_current_time").update(is_enabled=True)
    governance_bump()
    tenant = TenantFactory(slug="acme")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["core__get_current_time"])
    _account, clear_key = service_account_with_key(tenant, name="agent")
    return clear_key


def authorised(key: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


def post_raw(client: APIClient, key: str, body: bytes, content_type: str = "application/json"):
    return client.generic("POST", EXEC, body, content_type=content_type, **authorised(key))


def assert_envelope(response, status: int, error_code: str) -> dict:
    assert response.status_code == status
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["error_code"] == error_code
    assert isinstance(body["safe_message"], str)
    assert body["safe_message"]
    return body


# --- hostile bodies -----------------------------------------------------------------------------

HOSTILE_BODIES = [
    pytest.param(
        b"[" * 10_000 + b"]" * 10_000, 400, "invalid_json", "JSON nests deeper than 32 levels", id="deep-array"
    ),
    pytest.param(
        b'{"tool_id": "x", "args": ' + b'{"a":' * 10_000 + b"1" + b"}" * 10_001,
        400,
        "invalid_json",
        "JSON nests deeper than 32 levels",
        id="deep-object",
    ),
    pytest.param(
        json.dumps({"tool_id": "core__get_current_time", "args": {"pad": "x" * (65 * 1024)}}).encode(),
        413,
        "validation",
        "request body exceeds 65536 bytes",
        id="65-kib",
    ),
    pytest.param(
        b'{"tool_id": "core__get_current_time", "tool_id": "core__wait"}',
        400,
        "invalid_json",
        "duplicate key in a JSON object",
        id="duplicate-key",
    ),
    pytest.param(
        b'{"tool_id": "core__get_current_time", "args": {"a": [{"b": 1, "b": 2}]}}',
        400,
        "invalid_json",
        "duplicate key in a JSON object",
        id="nested-duplicate-key",
    ),
    pytest.param(
        b'{"tool_id": "core__get_current_time", "args": {"timezone": "\\ud800"}}',
        400,
        "invalid_json",
        "JSON strings must not contain NUL characters or unpaired surrogates",
        id="lone-surrogate",
    ),
    pytest.param(
        b'{"tool_id": "core__get_current_time", "args": {"\\udfff": 1}}',
        400,
        "invalid_json",
        "JSON strings must not contain NUL characters or unpaired surrogates",
        id="lone-surrogate-key",
    ),
    pytest.param(
        b'{"tool_id": "core__get_current_time", "args": {"x": ["\\u0000"]}}',
        400,
        "invalid_json",
        "JSON strings must not contain NUL characters or unpaired surrogates",
        id="nul",
    ),
    pytest.param(
        b'{"tool_id": "core__get_current_\xff\xfe"}', 400, "invalid_json", "request body is not valid UTF-8", id="utf8"
    ),
    pytest.param(b"[]", 400, "invalid_json", "request body must be a JSON object", id="array"),
    pytest.param(b'"x"', 400, "invalid_json", "request body must be a JSON object", id="string"),
    pytest.param(b"1", 400, "invalid_json", "request body must be a JSON object", id="number"),
    pytest.param(b"null", 400, "invalid_json", "request body must be a JSON object", id="null"),
    pytest.param(b"", 400, "invalid_json", "request body is empty", id="empty"),
    pytest.param(b"{", 400, "invalid_json", "request body is not valid JSON", id="truncated"),
    pytest.param(
        b'{"tool_id": "core__get_current_time", "args": {"n": NaN}}',
        400,
        "invalid_json",
        "NaN and Infinity are not valid JSON numbers",
        id="nan",
    ),
    pytest.param(
        b'{"tool_id": "core__get_current_time", "args": {"n": -Infinity}}',
        400,
        "invalid_json",
        "NaN and Infinity are not valid JSON numbers",
        id="infinity",
    ),
    pytest.param(
        b'{"tool_id": "core__get_current_time", "args": {"n": 1e999}}',
        400,
        "invalid_json",
        "NaN and Infinity are not valid JSON numbers",
        id="overflowing-float",
    ),
    pytest.param(
        b'{"tool_id": "core__get_current_time", "args": {"n": ' + b"9" * 5000 + b"}}",
        400,
        "invalid_json",
        "request body is not valid JSON",
        id="huge-integer",
    ),
]


@pytest.mark.parametrize(("body", "status", "error_code", "message"), HOSTILE_BODIES)
def test_hostile_body_answers_4xx_and_the_next_call_still_works(key, body, status, error_code, message):
    client = APIClient()

    response = post_raw(client, key, body)

    assert assert_envelope(response, status, error_code) == {"error_code": error_code, "safe_message": message}
    assert ToolInvocation.objects.count() == 0
    assert client.post(EXEC, NORMAL_CALL, format="json", **authorised(key)).status_code == 200


def test_nine_kib_of_args_answer_422_and_the_next_call_still_works(key):
    client = APIClient()

    response = client.post(
        EXEC, {"tool_id": "core__get_current_time", "args": {"pad": "x" * 9 * 1024}}, format="json", **authorised(key)
    )

    body = assert_envelope(response, 422, "validation")
    assert body["errors"] == [{"path": "args", "message": "args must be at most 8192 bytes serialized"}]
    assert client.post(EXEC, NORMAL_CALL, format="json", **authorised(key)).status_code == 200


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
def test_wrong_content_type_answers_415_without_echoing_it(key, content_type):
    client = APIClient()

    response = post_raw(client, key, json.dumps(NORMAL_CALL).encode(), content_type=f"{content_type}; x={CANARY}")

    body = assert_envelope(response, 415, "unsupported_media_type")
    assert body == {
        "error_code": "unsupported_media_type",
        "safe_message": "unsupported media type; send application/json",
    }
    assert client.post(EXEC, NORMAL_CALL, format="json", **authorised(key)).status_code == 200


def test_json_with_a_charset_parameter_is_accepted(key):
    response = post_raw(APIClient(), key, json.dumps(NORMAL_CALL).encode(), "application/json; charset=utf-8")

    assert response.status_code == 200


# --- the parser on its own ----------------------------------------------------------------------


class _Request:
    def __init__(self, content_length: str) -> None:
        self.META = {"CONTENT_LENGTH": content_length}


def test_parser_refuses_a_declared_length_over_the_limit_without_reading():
    stream = io.BytesIO(b"{}")

    with pytest.raises(parser.RequestBodyTooLarge):
        parser.HardenedJSONParser().parse(stream, parser_context={"request": _Request(str(64 * 1024 + 1))})
    assert stream.tell() == 0


def test_parser_counts_the_bytes_read_when_the_length_header_lies():
    body = json.dumps({"pad": "x" * (64 * 1024)}).encode()

    with pytest.raises(parser.RequestBodyTooLarge):
        parser.HardenedJSONParser().parse(io.BytesIO(body), parser_context={"request": _Request("10")})


@pytest.mark.parametrize(
    ("text", "too_deep"),
    [
        ("[" * 32 + "]" * 32, False),
        ("[" * 33 + "]" * 33, True),
        ('{"a": "' + "[" * 100 + '"}', False),  # brackets inside a string do not nest
        ('{"a": "\\"' + "[" * 100 + '"}', False),  # an escaped quote does not end the string
        ('{"a": "\\\\"' + ", " + "[" * 40, True),  # an escaped backslash does not escape the quote
        ('"\\u005c"' + "[" * 40, True),
    ],
)
def test_depth_scanner_follows_strings_and_escapes(text, too_deep):
    assert strict_json.json_depth_exceeds(text, 32) is too_deep


@pytest.mark.parametrize(
    ("text", "clean"),
    [
        ('{"a": "plain", "b": ["x", {"c": 1.5}]}', True),
        ('{"a": "\\n\\t\\"\\\\\\/\\b\\f\\r"}', True),  # escapes that make neither NUL nor a surrogate
        ('{"a": "\\\\u0000"}', True),  # an escaped backslash before u: no escape, the full look says clean
        ('{"a": "\\u00e9\\ud83d\\ude00"}', True),  # a paired surrogate escape
        ('{"a": "\\u0000"}', False),
        ('{"\\u0000": 1}', False),
        ('{"a": ["ok", "\\udc00"]}', False),
        ('{"a": "\ud800"}', False),  # a raw lone surrogate (text from a JSON string, not from UTF-8 bytes)
    ],
)
def test_strict_loads_refuses_nul_and_lone_surrogates_whether_escaped_or_raw(text, clean):
    if clean:
        assert strict_json.loads(text) == json.loads(text)
    else:
        with pytest.raises(strict_json.StrictJsonError, match="NUL characters or unpaired surrogates"):
            strict_json.loads(text)


def test_parser_accepts_the_deepest_allowed_document_and_no_deeper():
    deepest = {"a": json.loads("[" * 31 + "]" * 31)}  # the object is level 1

    assert parser.parse_json_object(json.dumps(deepest).encode()) == deepest
    with pytest.raises(ParseError):
        parser.parse_json_object(json.dumps({"a": json.loads("[" * 32 + "]" * 32)}).encode())


# --- authentication and scopes ------------------------------------------------------------------


def test_missing_key_answers_401_with_the_bearer_challenge():
    response = APIClient().post(EXEC, NORMAL_CALL, format="json")

    body = assert_envelope(response, 401, "unauthenticated")
    assert body == {
        "error_code": "unauthenticated",
        "safe_message": "no API key: send `Authorization: Bearer <api key>`",
    }
    assert response["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize(
    "header",
    [
        "Bearer",
        "Bearer ",
        "Bearer a b",
        "Bearer tg_short",
        "Bearer tg_000000000000_" + "a" * 43,  # well-formed, unknown
    ],
)
def test_malformed_or_unknown_key_answers_401_invalid_api_key(key, header):
    response = APIClient().post(EXEC, NORMAL_CALL, format="json", HTTP_AUTHORIZATION=header)

    assert assert_envelope(response, 401, "unauthenticated") == {
        "error_code": "unauthenticated",
        "safe_message": "invalid API key",
    }
    assert response["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize("scheme", ["Token {key}", "{key}", "Basic dXNlcjpwYXNz", "bearer-ish {key}"])
def test_another_scheme_is_told_to_use_bearer_even_with_a_valid_key(key, scheme):
    response = APIClient().post(EXEC, NORMAL_CALL, format="json", HTTP_AUTHORIZATION=scheme.format(key=key))

    assert assert_envelope(response, 401, "unauthenticated")["safe_message"] == (
        "send the API key as `Authorization: Bearer <api key>`"
    )
    assert key not in response.content.decode()


def test_an_x_api_key_header_is_told_where_the_key_goes(key):
    response = APIClient().post(EXEC, NORMAL_CALL, format="json", HTTP_X_API_KEY=key)

    assert assert_envelope(response, 401, "unauthenticated")["safe_message"] == (
        "the X-API-Key header is not read; send the key as `Authorization: Bearer <api key>`"
    )


def test_non_ascii_key_answers_401(key):
    response = APIClient().generic(
        "POST",
        EXEC,
        b"{}",
        content_type="application/json",
        HTTP_AUTHORIZATION="Bearer tg_é".encode().decode("latin-1"),
    )

    assert_envelope(response, 401, "unauthenticated")


def test_unknown_and_wrong_secret_keys_get_identical_answers(key):
    prefix = key.split("_")[1]
    wrong_secret = f"tg_{prefix}_{'A' * 43}"
    unknown_prefix = f"tg_{'0' * 12}_{key.split('_', 2)[2]}"

    wrong = APIClient().get("/api/v1/tools", HTTP_AUTHORIZATION=f"Bearer {wrong_secret}")
    unknown = APIClient().get("/api/v1/tools", HTTP_AUTHORIZATION=f"Bearer {unknown_prefix}")

    assert (wrong.status_code, unknown.status_code) == (401, 401)
    assert wrong.content == unknown.content
    assert wrong["WWW-Authenticate"] == unknown["WWW-Authenticate"] == "Bearer"


def test_revoked_key_answers_401_on_the_next_call(key):
    client = APIClient()
    assert client.get("/api/v1/tools", **authorised(key)).status_code == 200
    service_account_revoke(account=ServiceAccount.objects.get(name="agent"))

    response = client.get("/api/v1/tools", **authorised(key))

    assert assert_envelope(response, 401, "unauthenticated")["safe_message"] == "invalid API key"


def test_key_without_tools_exec_answers_403_and_runs_nothing():
    _account, manage_key = service_account_with_key(TenantFactory(), scopes=("connections:manage",))

    response = APIClient().post(EXEC, NORMAL_CALL, format="json", **authorised(manage_key))

    assert assert_envelope(response, 403, "forbidden") == {
        "error_code": "forbidden",
        "safe_message": "the API key lacks the tools:exec scope",
    }
    assert ToolInvocation.objects.count() == 0


def test_last_use_is_written_at_most_once_a_minute(key):
    client = APIClient()
    account = ServiceAccount.objects.get(name="agent")
    start = timezone.now()

    with time_machine.travel(start, tick=False):
        client.get("/api/v1/tools", **authorised(key))
    with time_machine.travel(start + timedelta(seconds=30), tick=False):
        client.get("/api/v1/tools", **authorised(key))
    account.refresh_from_db()
    first_use = account.last_used_at
    with time_machine.travel(start + timedelta(seconds=61), tick=False):
        client.get("/api/v1/tools", **authorised(key))
    account.refresh_from_db()

    assert first_use == start
    assert account.last_used_at == start + timedelta(seconds=61)


def test_fairness_throttle_answers_429_envelope_with_retry_after(key, settings):
    settings.TOOLGATE_API_RATE_PER_SECOND = 2
    client = APIClient()

    with time_machine.travel(datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC), tick=False):  # one one-second window
        statuses = [client.get("/api/v1/tools", **authorised(key)).status_code for _ in range(2)]
        response = client.get("/api/v1/tools", **authorised(key))

    assert statuses == [200, 200]
    assert assert_envelope(response, 429, "rate_limited") == {
        "error_code": "rate_limited",
        "safe_message": "too many requests; retry later",
    }
    assert response["Retry-After"] == "1"


# --- routes, methods and unexpected failures -----------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/v1/nope"),
        ("post", "/api/v1/nope"),
        ("get", "/api/nope"),
        ("get", "/api/v1/nope/"),
        ("delete", "/api/v1/invocations/a/b"),
    ],
)
def test_unknown_api_route_answers_404_envelope(key, method, path):
    response = getattr(APIClient(), method)(path, **authorised(key))

    assert assert_envelope(response, 404, "not_found") == {
        "error_code": "not_found",
        "safe_message": "no such API endpoint",
    }


@pytest.mark.parametrize(
    ("method", "path", "without"),
    [
        ("get", "/api/v1/tools/", "/api/v1/tools"),
        ("post", "/api/v1/tools/exec/", "/api/v1/tools/exec"),
        ("get", "/api/v1/invocations//", "/api/v1/invocations"),
    ],
)
def test_a_trailing_slash_answers_404_naming_the_path_without_it(key, method, path, without):
    response = getattr(APIClient(), method)(path, **authorised(key))

    assert assert_envelope(response, 404, "not_found") == {
        "error_code": "not_found",
        "safe_message": f"no such API endpoint; API paths take no trailing slash: {without}",
    }


def test_unknown_api_route_answers_json_even_with_debug(settings):
    settings.DEBUG = True

    response = APIClient().get("/api/v2/tools")

    assert_envelope(response, 404, "not_found")


@pytest.mark.parametrize(
    ("method", "path"), [("get", EXEC), ("delete", "/api/v1/tools"), ("put", "/api/v1/invocations")]
)
def test_wrong_method_answers_405_envelope(key, method, path):
    response = getattr(APIClient(), method)(path, **authorised(key))

    assert assert_envelope(response, 405, "method_not_allowed") == {
        "error_code": "method_not_allowed",
        "safe_message": "method not allowed on this resource",
    }


def test_html_only_accept_header_answers_406_envelope_in_json(key):
    response = APIClient().get("/api/v1/tools", HTTP_ACCEPT="text/html", **authorised(key))

    assert_envelope(response, 406, "not_acceptable")


def test_unexpected_exception_answers_500_envelope_and_logs_the_type_only(key, monkeypatch, caplog):
    def explode(**kwargs):
        raise RuntimeError(f"secret detail {CANARY}")

    monkeypatch.setattr("tools_app.api.views.tool_catalog", explode)

    with caplog.at_level(logging.ERROR, logger="core.api.handlers"):
        response = APIClient().get("/api/v1/tools", **authorised(key))

    assert response.status_code == 500
    assert response.json() == {"error_code": "internal", "safe_message": "internal error"}
    assert [record.getMessage() for record in caplog.records if record.name == "core.api.handlers"] == [
        "unhandled RuntimeError in ToolCatalogView"
    ]
    assert CANARY not in caplog.text
    assert CANARY not in response.content.decode()


def test_django_level_handlers_answer_envelopes_for_api_paths_only():
    factory = RequestFactory()

    api_error = api.server_error(factory.get("/api/v1/tools"))
    page_error = api.server_error(factory.get("/connections/"))
    api_forbidden = api.permission_denied(factory.get("/api/v1/tools"), PermissionError())
    api_bad = api.bad_request(factory.get("/api/v1/tools"), ValueError())
    api_too_big = api.bad_request(factory.post("/api/v1/tools/exec"), RequestDataTooBig())
    api_missing = api.page_not_found(factory.get("/api/v1/x"), Http404())

    assert (api_error.status_code, json.loads(api_error.content)) == (
        500,
        {"error_code": "internal", "safe_message": "internal error"},
    )
    assert page_error.status_code == 500
    assert page_error["Content-Type"].startswith("text/html")
    assert (api_forbidden.status_code, json.loads(api_forbidden.content)["error_code"]) == (403, "forbidden")
    assert (api_bad.status_code, json.loads(api_bad.content)["error_code"]) == (400, "bad_request")
    assert (api_too_big.status_code, json.loads(api_too_big.content)["error_code"]) == (413, "validation")
    assert (api_missing.status_code, json.loads(api_missing.content)["error_code"]) == (404, "not_found")


# --- no coercion: what the schema says is what the API takes ---------------------------


@pytest.mark.parametrize(
    ("body", "path", "message"),
    [
        ({"tool_id": 1}, "tool_id", "must be a string"),
        ({"tool_id": "core__get_current_time", "tool_call_id": 5}, "tool_call_id", ID_MESSAGE),
        ({"tool_id": "core__get_current_time", "run_id": 5.0}, "run_id", ID_MESSAGE),
        ({"tool_id": "core__get_current_time", "connection_id": "c", "grant_id": 0}, "grant_id", "must be a string"),
        ({"tool_id": "core__get_current_time", "connection_ids": [7]}, "connection_ids.0", "must be a string"),
    ],
    ids=["tool_id-int", "tool_call_id-int", "run_id-float", "grant_id-zero", "connection_ids-int"],
)
def test_numbers_are_not_taken_for_strings(key, body, path, message):
    response = APIClient().post(EXEC, body, format="json", **authorised(key))

    assert assert_envelope(response, 422, "validation")["errors"] == [{"path": path, "message": message}]
    assert ToolInvocation.objects.count() == 0


@pytest.mark.parametrize("url", ["/api/v1/invocations", "/api/v1/connections", "/api/v1/grants"])
@pytest.mark.parametrize(
    ("query", "path", "message"),
    [
        ("offset=null", "offset", "must be a whole number from 0 to 1000000000"),
        ("offset=-1", "offset", "must be a whole number from 0 to 1000000000"),
        ("offset=1e3", "offset", "must be a whole number from 0 to 1000000000"),
        ("offset=99999999999", "offset", "must be a whole number from 0 to 1000000000"),
        ("limit=0", "limit", "must be a whole number from 1 to 200"),
        ("limit=201", "limit", "must be a whole number from 1 to 200"),
        ("limit=", "limit", "must be a whole number from 1 to 200"),
        ("limit=%2B5", "limit", "must be a whole number from 1 to 200"),
    ],
)
def test_pagination_parameters_are_refused_rather_than_defaulted(url, query, path, message):
    _account, manage_key = service_account_with_key(TenantFactory(), scopes=("tools:exec", "connections:manage"))

    response = APIClient().get(f"{url}?{query}", **authorised(manage_key))

    assert assert_envelope(response, 422, "validation")["errors"] == [{"path": path, "message": message}]


@pytest.mark.parametrize(
    ("url", "path", "message"),
    [
        (
            "/api/v1/tools?fromat=openai",
            "fromat",  # a typo of a declared name is named; anything else is not echoed
            "unknown query parameter (did you mean 'format'?); this operation takes: format, tags, toolset, q, limit",
        ),
        (
            "/api/v1/invocations?limt=2",
            "limt",
            "unknown query parameter (did you mean 'limit'?); "
            "this operation takes: run_id, tool_id, ok, subject_id, limit, offset",
        ),
        (
            "/api/v1/connections?page=2",
            "(unknown field)",
            "unknown query parameter; this operation takes: limit, offset",
        ),
        ("/api/v1/grants?page=2", "(unknown field)", "unknown query parameter; this operation takes: limit, offset"),
    ],
)
def test_unknown_query_parameters_are_refused_by_name_only_when_they_are_a_typo(url, path, message):
    _account, manage_key = service_account_with_key(TenantFactory(), scopes=("tools:exec", "connections:manage"))

    response = APIClient().get(url, **authorised(manage_key))

    assert assert_envelope(response, 422, "validation")["errors"] == [{"path": path, "message": message}]


def test_an_empty_query_value_is_a_value_not_an_absence(key):
    response = APIClient().get("/api/v1/tools?format=", **authorised(key))

    assert assert_envelope(response, 422, "validation")["errors"] == [
        {"path": "format", "message": "must be openai, openai_responses or anthropic"}
    ]
