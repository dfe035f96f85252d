"""The github tools end to end: REST API -> runner -> broker -> a loopback GitHub on a real socket.

What GitHub sees is asserted on the wire (method, path, body, the exact
Authorization header); what the caller sees is asserted on the response. Every
test also proves the credential appears nowhere it could leak to: the HTTP
response, the audit rows (every column), the connection events and the logs
captured at DEBUG.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import socket

import pytest
from django.conf import settings

from config.runtime import runtime
from connections_app.models import Connection, ConnectionEvent
from policies_app import governance
from policies_app.models import ApprovalRequest
from policies_app.services import approval_decide
from runner.pipeline import CREDENTIAL_IN_OUTPUT
from tests.factories import ConnectionFactory, GrantFactory
from tests.support.loopback import json_answer
from tools_app.models import ToolInvocation

pytestmark = pytest.mark.django_db

TOKEN = "ghp_e2eToken0123456789abcdefABCDEF01"
USERNAME = "octocat"
PASSWORD = "app-password-9f8e7d6c5b4a"
BASIC = base64.b64encode(f"{USERNAME}:{PASSWORD}".encode()).decode()
USER = {"login": "octocat", "id": 583231, "name": "The Octocat", "html_url": "https://github.com/octocat"}
API_KEY = ("api_key", {"api_key": TOKEN}, (TOKEN,))
APP_PASSWORD = ("app_password", {"username": USERNAME, "password": PASSWORD}, (PASSWORD, BASIC))


@pytest.fixture(autouse=True)
def debug_logs(caplog):
    """Everything logged at DEBUG and above, from every logger that propagates to the root."""
    caplog.set_level(logging.DEBUG)
    return caplog


def granted(account, credential_type: str = "api_key", credentials: dict | None = None):
    connection = ConnectionFactory(
        tenant=account.tenant, credential_type=credential_type, credentials=credentials or {"api_key": TOKEN}
    )
    return connection, GrantFactory(service_account=account, connections=[connection])


def assert_nowhere(secrets, response, caplog) -> None:
    """None of `secrets` in the response, any audit column, any connection event or any log record."""
    assert any(record.name == "toolgate.events" for record in caplog.records)  # DEBUG capture is live
    places = {
        "response": response.content.decode(),
        "tool invocations": repr(list(ToolInvocation.objects.values())),
        "connection events": repr(list(ConnectionEvent.objects.values())),
        "logs": caplog.text + repr([(record.msg, record.args) for record in caplog.records]),
    }
    assert [(place, secret) for place, text in places.items() for secret in secrets if secret in text] == []


def test_get_user_sends_the_bearer_token_and_answers_only_allowlisted_fields(github, caller, call_tool, caplog):
    # given GitHub answers more than the allowlist names
    account, _key = caller
    connection, grant = granted(account)
    github.route(
        "GET",
        "/user",
        json={
            **USER,
            "email": "octocat@github.example",
            "access_token": "ghp_upstreamTokenLookingField0123456789",
            "plan": {"name": "pro", "private_repos": 73914062519},  # a number no timestamp or id in a log line holds
            "site_admin": False,
        },
    )

    # when
    response = call_tool(connection, grant, tool_call_id="c1")

    # then
    assert response.status_code == 200
    assert response.json()["value"] == USER
    assert [(request.method, request.path) for request in github.requests] == [("GET", "/user")]
    assert github.requests[0].headers["authorization"] == f"Bearer {TOKEN}"
    row = ToolInvocation.objects.get(tool_call_id="c1")
    assert (row.ok, row.executed, row.result, row.connection_id) == (True, True, USER, str(connection.pk))
    assert Connection.objects.get(pk=connection.pk).last_used_at is not None
    assert_nowhere((TOKEN, "octocat@github.example", "ghp_upstreamTokenLookingField", "73914062519"), response, caplog)


def test_a_warm_call_with_a_connection_costs_no_query_more_than_one_without(
    github, caller, call_tool, monkeypatch, django_assert_num_queries
):
    # given the key, policy, grant and connection rows cached by a first call, and no staleness re-read due
    monkeypatch.setattr(governance, "MAX_STALENESS_S", 3600.0)
    account, _key = caller
    connection, grant = granted(account)
    github.route("GET", "/user", json=USER)
    assert call_tool(connection, grant).status_code == 200
    generation_reads = 0 if settings.REDIS_URL else 2

    # when / then: no read of the grant or the connection, no last-use write within the minute
    with django_assert_num_queries(generation_reads + 1) as captured:
        assert call_tool(connection, grant).status_code == 200

    # one statement: the audit row (on PostgreSQL with its tool_call_id claim in a CTE before it)
    assert 'INSERT INTO "tools_app_toolinvocation"' in captured.captured_queries[-1]["sql"]
    assert len(github.requests) == 2


def test_credential_echoed_into_a_field_outside_the_allowlist_is_stripped(github, caller, call_tool, caplog):
    account, _key = caller
    connection, grant = granted(account)
    github.handle("GET", "/user", lambda request: json_answer(200, {**USER, "bio": request.headers["authorization"]}))

    response = call_tool(connection, grant)

    assert response.status_code == 200
    assert response.json()["value"] == USER
    assert_nowhere((TOKEN,), response, caplog)


@pytest.mark.parametrize(
    "case",
    [
        (API_KEY, lambda request: {"name": request.headers["authorization"]}),
        (API_KEY, lambda request: {"html_url": f"https://github.com/octocat?t={TOKEN}"}),
        (APP_PASSWORD, lambda request: {"name": request.headers["authorization"]}),
        (APP_PASSWORD, lambda request: {"login": PASSWORD}),
    ],
    ids=["bearer-header-in-name", "token-in-html_url", "basic-header-in-name", "password-in-login"],
)
def test_credential_echoed_into_an_allowlisted_field_withholds_the_whole_output(
    github, caller, call_tool, caplog, case
):
    # given a GitHub that reflects the credential into a field the allowlist lets through (and one it does not)
    (credential_type, credentials, secrets), echo = case
    account, _key = caller
    connection, grant = granted(account, credential_type, credentials)
    github.handle(
        "GET",
        "/user",
        lambda request: json_answer(200, {**USER, **echo(request), "bio": request.headers["authorization"]}),
    )

    # when
    response = call_tool(connection, grant, tool_call_id="c1")

    # then: the tool ran (GitHub was called), but nothing of its answer leaves
    assert response.status_code == 500
    assert response.json() == {
        "tool_call_id": "c1",
        "tool_id": "github__get_user",
        "ok": False,
        "error_code": "redaction_failed",
        "safe_message": CREDENTIAL_IN_OUTPUT,
    }
    assert len(github.requests) == 1
    row = ToolInvocation.objects.get(tool_call_id="c1")
    assert (row.ok, row.executed, row.error_code, row.result) == (False, True, "redaction_failed", None)
    assert [record.levelname for record in caplog.records if record.name == "runner.pipeline"] == ["WARNING"]
    assert_nowhere(secrets, response, caplog)


def test_create_issue_posts_the_body_with_the_token_and_answers_number_and_url(github, caller, call_tool, caplog):
    account, _key = caller
    connection, grant = granted(account)
    issue_url = "https://github.com/octo-org/hello-world/issues/42"
    github.route(
        "POST",
        "/repos/octo-org/hello-world/issues",
        status=201,
        json={
            "number": 42,
            "html_url": issue_url,
            "id": 1,
            "node_id": "I_kwDOA",
            "user": {"login": "octocat", "id": 583231},
            "body": "Steps to reproduce",
        },
    )

    issue = {"owner": "octo-org", "repo": "hello-world", "title": "Crash on start", "body": "Steps to reproduce"}
    # the tool requires confirmation: a person approves the call, then the caller repeats it
    asked = call_tool(connection, grant, tool_id="github__create_issue", args=issue, tool_call_id="c1")
    approval_decide(approval=ApprovalRequest.objects.get(), approve=True, decided_by=None, decided_by_name="os:ops")
    response = call_tool(connection, grant, tool_id="github__create_issue", args=issue, tool_call_id="c1")

    assert asked.status_code == 202
    assert response.status_code == 200
    assert response.json()["value"] == {"number": 42, "html_url": issue_url}
    [request] = github.requests
    assert (request.method, request.path) == ("POST", "/repos/octo-org/hello-world/issues")
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    assert request.json() == {"title": "Crash on start", "body": "Steps to reproduce"}
    assert ToolInvocation.objects.get(tool_call_id="c1", executed=True).result == {"number": 42, "html_url": issue_url}
    assert_nowhere((TOKEN,), response, caplog)


def test_app_password_connection_sends_basic_auth(github, caller, call_tool, caplog):
    credential_type, credentials, secrets = APP_PASSWORD
    account, _key = caller
    connection, grant = granted(account, credential_type, credentials)
    github.route("GET", "/user", json=USER)

    response = call_tool(connection, grant)

    assert response.status_code == 200
    assert response.json()["value"] == USER
    assert [request.headers["authorization"] for request in github.requests] == [f"Basic {BASIC}"]
    assert_nowhere(secrets, response, caplog)


def test_github_refusing_the_token_answers_502_execution_with_a_safe_message(github, caller, call_tool, caplog):
    # given GitHub answers 401 and quotes the credential back in its error body
    account, _key = caller
    connection, grant = granted(account)
    github.handle(
        "GET",
        "/user",
        lambda request: json_answer(401, {"message": "Bad credentials", "received": request.headers["authorization"]}),
    )

    response = call_tool(connection, grant, tool_call_id="c1")

    assert response.status_code == 502
    assert response.json() == {
        "tool_call_id": "c1",
        "tool_id": "github__get_user",
        "ok": False,
        "error_code": "execution",
        "safe_message": "GitHub rejected the connection's credentials",
    }
    assert [request.headers["authorization"] for request in github.requests] == [f"Bearer {TOKEN}"]
    row = ToolInvocation.objects.get(tool_call_id="c1")
    assert (row.ok, row.executed, row.error_code) == (False, True, "execution")
    assert_nowhere((TOKEN, "Bad credentials"), response, caplog)


def test_an_unreachable_github_is_logged_with_provider_and_host_once_with_the_request_id(settings, caller, call_tool):
    # given GitHub's URL points at a closed loopback port, with a userinfo that must never be logged
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings.TOOLGATE_GITHUB_API_URL = f"http://urluser:urlsecret-55aa@127.0.0.1:{port}/api"
    runtime.cache_clear()
    account, _key = caller
    connection, grant = granted(account)
    (handler,) = [h for h in logging.getLogger().handlers if type(h) is logging.StreamHandler]
    buffer = io.StringIO()
    previous = handler.setStream(buffer)
    try:
        # when
        response = call_tool(connection, grant, tool_call_id="c1")
    finally:
        handler.setStream(previous)
        runtime.cache_clear()

    # then the caller gets the same safe answer as before, and operators one line naming github and the host
    assert response.status_code == 502
    assert response.json()["safe_message"] == "upstream request failed (ConnectError)"
    lines = [json.loads(line) for line in buffer.getvalue().splitlines()]
    failed = [line for line in lines if "upstream github" in line["event"]]
    assert [line["event"] for line in failed] == [
        f"tool github__get_user: upstream github at 127.0.0.1:{port} failed: upstream request failed (ConnectError)"
    ]
    assert failed[0]["request_id"] == response["X-Request-ID"]
    # and nothing else about it: the request's own line, no traceless "Bad Gateway" line without a request id
    assert [line["status"] for line in lines if line["event"] == "request"] == [502]
    assert all(line.get("request_id") == response["X-Request-ID"] for line in lines), lines
    assert not any(secret in buffer.getvalue() for secret in ("urlsecret-55aa", "urluser", TOKEN))
