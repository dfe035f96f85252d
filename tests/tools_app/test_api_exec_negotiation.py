"""The exec endpoint's plain-Accept negotiation (core/api/negotiation.py) answers exactly as DRF's does.

Every request is sent twice through the whole stack (middleware included):
once as served, once with DRF's DefaultContentNegotiation in its place.
Status, headers and body must match, once the per-call values (ids, times,
the clock's reading) are set aside. A spy records whether the shortcut chose
the renderer, so each case also proves it exercised the path it is meant to.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.response import Response

from core.api.negotiation import PlainAcceptNegotiation
from policies_app.governance import governance_bump
from policies_app.models import ServiceAccount
from policies_app.services import delegation_create, delegation_revoke
from tests.factories import MembershipFactory, TenantFactory, ToolPolicyFactory, UserFactory, service_account_with_key
from tests.support.api import enable_tools
from tools_app.api import views
from tools_app.models import Tool, ToolInvocation

pytestmark = pytest.mark.django_db

URL = "/api/v1/tools/exec"
JSON = "application/json"
PER_CALL = {"tool_call_id", "started_at", "ended_at", "value"}
UNCOMPARED_HEADERS = {"X-Request-ID", "Content-Length"}


@pytest.fixture
def keys():
    tenant = TenantFactory(slug="acme")
    enable_tools("core__get_current_time", "core__wait")
    Tool.objects.filter(pk="core__wait").update(is_enabled=False)
    governance_bump()
    ToolPolicyFactory(tenant=tenant, allowed_tools=["core__get_current_time", "core__wait"])
    _account, key = service_account_with_key(tenant, name="agent")
    _reader, reader_key = service_account_with_key(tenant, name="reader", scopes=("connections:manage",))
    return {"exec": key, "no scope": reader_key}


@pytest.fixture
def served_by(monkeypatch):
    """How the renderer of each negotiation was chosen: 'plain' (the shortcut) or 'drf' (DRF's parsing)."""
    answers: list[str] = []
    original = PlainAcceptNegotiation.plain_choice

    def spy(self: PlainAcceptNegotiation, *args: Any) -> Any:
        choice = original(self, *args)
        answers.append("drf" if choice is None else "plain")
        return choice

    monkeypatch.setattr(PlainAcceptNegotiation, "plain_choice", spy)
    return answers


def send(body: bytes | str, *, method: str = "post", content_type: str = JSON, **headers: str):
    client = Client()
    return getattr(client, method)(URL, body, content_type=content_type, **headers)


def comparable(response) -> tuple[int, dict[str, str], Any]:
    headers = {name: value for name, value in response.headers.items() if name not in UNCOMPARED_HEADERS}
    try:
        body = response.json()
    except ValueError:
        return response.status_code, headers, response.content
    if isinstance(body, dict):
        body = {name: ("<per call>" if name in PER_CALL else value) for name, value in body.items()}
    return response.status_code, headers, body


def both_paths(monkeypatch, served_by, body_of, **request) -> tuple[tuple, tuple]:
    """(the answer as served, DRF's answer to the same request); `body_of(n)` gives the body of attempt n."""
    served = comparable(send(body_of(1), **request))
    with monkeypatch.context() as switched_off:
        switched_off.setattr(views.ToolExecView, "content_negotiation_class", DefaultContentNegotiation)
        by_drf = comparable(send(body_of(2), **request))
    return served, by_drf


def call(tool_id: str = "core__get_current_time", **fields: Any):
    """A body per attempt; a tool_call_id of its own each time, so the second is not a replay of the first."""

    def body_of(attempt: int) -> str:
        return json.dumps({"tool_id": tool_id, "tool_call_id": f"call_{attempt}", **fields})

    return body_of


def fixed(body: bytes | str):
    return lambda attempt: body


def bearer(key: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


# The shortcut chooses: every outcome of a call the runner decides...
RUNNER_CASES = {
    "ok": (call(args={"timezone": "UTC"}), {}),
    "ok, generated id": (fixed(json.dumps({"tool_id": "core__get_current_time"})), {}),
    "ok, charset and Accept": (call(), {"content_type": "application/json; charset=UTF-8", "HTTP_ACCEPT": "*/*"}),
    "Accept: application/json": (call(), {"HTTP_ACCEPT": JSON}),
    "lower-case scheme": (call(), {"scheme": "bearer"}),
    "unknown tool": (call("core__get_current_tme"), {}),
    "tool switched off": (call("core__wait", args={"ms": 1}), {}),
    "args against the tool's schema": (call(args={"timezone": 5}), {}),
    "connection for a tool that takes none": (call(connection_id="c1", grant_id="g1"), {}),
    "forged subject token": (call(), {"HTTP_X_TOOLGATE_SUBJECT": "tgs_forged"}),
    "empty subject token": (call(), {"HTTP_X_TOOLGATE_SUBJECT": ""}),
    "explicitly no connection declared": (call(connection_ids=[]), {}),
    "another charset": (call(), {"content_type": "application/json; charset=latin-1"}),
}

# ...and every refusal before the runner (nothing runs).
REFUSED_CASES = {
    "no key": (call(), {"no_auth": True}),
    "unknown key": (call(), {"key": "tg_abcdefgh_" + "x" * 32}),
    "Token scheme": (call(), {"scheme": "Token"}),
    "X-API-Key": (call(), {"no_auth": True, "HTTP_X_API_KEY": "whatever"}),
    "key without tools:exec": (call(), {"key_name": "no scope"}),
    "text/plain": (call(), {"content_type": "text/plain"}),
    "not JSON": (fixed(b"{nope"), {}),
    "duplicate keys": (fixed('{"tool_id": "a", "tool_id": "core__get_current_time"}'), {}),
    "an array": (fixed("[]"), {}),
    "empty body": (fixed(b""), {}),
    "unknown field": (call(tools="x"), {}),
    "args as a string": (call(args='{"timezone": "UTC"}'), {}),
    "connection without grant": (call(connection_id="c1"), {}),
    "over 64 KiB": (call(args={"padding": "x" * (64 * 1024)}), {}),
    "NUL in a string": (call(run_id="r\u0000"), {}),
}

# Left to DRF's negotiation: any other Accept.
NEGOTIATED_CASES = {
    "Accept: text/html": (call(), {"HTTP_ACCEPT": "text/html"}),
    "Accept with indent": (call(), {"HTTP_ACCEPT": "application/json; indent=4"}),
    "Accept: application/*": (call(), {"HTTP_ACCEPT": "application/*"}),
    "Accept: a list": (call(), {"HTTP_ACCEPT": "text/html, application/json;q=0.9"}),
    "Accept: text/html, no key": (call(), {"HTTP_ACCEPT": "text/html", "no_auth": True}),
}


def request_options(keys: dict[str, str], options: dict[str, Any]) -> dict[str, str]:
    options = dict(options)
    key = options.pop("key", None) or keys[options.pop("key_name", "exec")]
    scheme = options.pop("scheme", "Bearer")
    if not options.pop("no_auth", False):
        options["HTTP_AUTHORIZATION"] = f"{scheme} {key}"
    return options


@pytest.mark.parametrize("case", RUNNER_CASES)
def test_a_call_is_answered_as_drfs_negotiation_answers_it(case, keys, served_by, monkeypatch):
    body_of, options = RUNNER_CASES[case]

    served, by_drf = both_paths(monkeypatch, served_by, body_of, **request_options(keys, options))

    assert served_by == ["plain"]
    assert served == by_drf


@pytest.mark.parametrize("case", REFUSED_CASES)
def test_a_refusal_is_answered_as_drfs_negotiation_answers_it_and_nothing_runs(case, keys, served_by, monkeypatch):
    body_of, options = REFUSED_CASES[case]
    rows_before = ToolInvocation.objects.count()

    served, by_drf = both_paths(monkeypatch, served_by, body_of, **request_options(keys, options))

    assert served_by == ["plain"]
    assert served == by_drf
    assert served[0] >= 400
    assert ToolInvocation.objects.count() == rows_before


@pytest.mark.parametrize("case", NEGOTIATED_CASES)
def test_any_other_accept_is_left_to_drfs_negotiation(case, keys, served_by, monkeypatch):
    body_of, options = NEGOTIATED_CASES[case]

    served, by_drf = both_paths(monkeypatch, served_by, body_of, **request_options(keys, options))

    assert set(served_by) == {"drf"}
    assert served == by_drf


def test_a_get_is_refused_with_the_method_not_allowed_envelope(keys, served_by):
    response = send("", method="get", **bearer(keys["exec"]))

    assert served_by == ["plain"]
    assert response.status_code == 405
    assert response.json()["error_code"] == "method_not_allowed"


def test_a_call_signs_the_caller_in(keys, served_by):
    ServiceAccount.objects.filter(name="agent").update(last_used_at=None)
    governance_bump()

    response = send(call()(1), **bearer(keys["exec"]))

    assert (served_by, response.status_code) == (["plain"], 200)
    assert ServiceAccount.objects.get(name="agent").last_used_at is not None
    row = ToolInvocation.objects.get(tool_call_id="call_1")
    assert (row.service_account.name, row.executed) == ("agent", True)


def test_an_error_inside_the_call_is_answered_by_the_api_handler(keys, served_by, monkeypatch):
    calls = []

    def failing_exec(**kwargs: Any):
        calls.append(kwargs)
        raise RuntimeError("boom")

    monkeypatch.setattr(views, "tool_exec", failing_exec)

    response = send(call()(1), **bearer(keys["exec"]))

    assert served_by == ["plain"]
    assert len(calls) == 1
    assert response.status_code == 500
    assert response.json() == {"error_code": "internal", "safe_message": "internal error"}


def test_a_call_on_a_persons_behalf_is_authorized(keys, served_by):
    account = ServiceAccount.objects.get(name="agent")
    person = MembershipFactory(tenant=account.tenant, user=UserFactory(username="alice")).user
    delegation, token = delegation_create(tenant=account.tenant, user=person, service_account=account)

    allowed = send(call()(1), **bearer(keys["exec"]), HTTP_X_TOOLGATE_SUBJECT=token)
    delegation_revoke(delegation=delegation)
    refused = send(call()(2), **bearer(keys["exec"]), HTTP_X_TOOLGATE_SUBJECT=token)

    assert served_by == ["plain", "plain"]
    assert allowed.status_code == 200
    assert ToolInvocation.objects.get(tool_call_id="call_1").subject_id == f"user:{person.pk}"
    assert (refused.status_code, refused.json()["error_code"]) == (403, "authz_denied")


@pytest.mark.parametrize("accept", ["", "*/*", JSON, "application/json; indent=4", "text/html, application/json;q=0.9"])
def test_a_calls_answer_is_rendered_as_drfs_response_renders_it(accept, keys, monkeypatch):
    options = {"HTTP_ACCEPT": accept, **bearer(keys["exec"])} if accept else bearer(keys["exec"])
    served = send(call()(1), **options)
    with monkeypatch.context() as switched_off:
        switched_off.setattr(views, "plain_json_answer", lambda request, body: Response(body))
        by_response = send(call()(2), **options)

    assert served.status_code == by_response.status_code == 200
    assert comparable(served) == comparable(by_response)
    assert served["Content-Length"] == by_response["Content-Length"]
    assert (b"\n" in served.content) == (b"\n" in by_response.content) == accept.endswith("indent=4")
