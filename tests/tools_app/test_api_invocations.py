"""GET /api/v1/invocations and /api/v1/invocations/{tool_call_id}: the tenant's audit rows."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from policies_app.governance import governance_bump
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import api_client
from tools_app.models import Tool, ToolInvocation

pytestmark = pytest.mark.django_db

CANARY = "canary-91b2c4"
ROW_FIELDS = {
    "tool_call_id",
    "state",
    "run_id",
    "tool_id",
    "service_account",
    "connection_id",
    "subject_id",
    "decision",
    "ok",
    "error_code",
    "started_at",
    "ended_at",
    "duration_ms",
    "result_bytes",
}


def exec_call(key: str, **body) -> dict:
    return api_client(key).post("/api/v1/tools/exec", body, format="json").json()


@pytest.fixture
def acme():
    """Tenant acme's key, after three calls: two runs of the clock (one in run r1) and a denied wait."""
    call_command("sync_tools", stdout=io.StringIO())
    Tool.objects.filter(pk="core__get_current_time").update(is_enabled=True)
    governance_bump()
    tenant = TenantFactory(slug="acme")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["core__get_current_time"])
    _account, key = service_account_with_key(tenant, name="agent")
    exec_call(key, tool_id="core__get_current_time", args={"timezone": CANARY}, tool_call_id="a1", run_id="r1")
    exec_call(key, tool_id="core__get_current_time", args={"timezone": "UTC"}, tool_call_id="a2", run_id="r1")
    exec_call(key, tool_id="core__wait", args={"ms": 1}, tool_call_id="a3", run_id="r2")
    return key


def test_list_answers_the_tenants_rows_newest_first_without_values(acme):
    response = api_client(acme).get("/api/v1/invocations")

    assert response.status_code == 200
    body = response.json()
    assert (body["count"], body["next"], body["previous"]) == (3, None, None)
    assert [row["tool_call_id"] for row in body["results"]] == ["a3", "a2", "a1"]
    assert all(set(row) == ROW_FIELDS for row in body["results"])
    newest = body["results"][0]
    assert {name: newest[name] for name in ROW_FIELDS - {"started_at", "ended_at", "duration_ms"}} == {
        "tool_call_id": "a3",
        "state": "done",
        "run_id": "r2",
        "tool_id": "core__wait",
        "service_account": "agent",
        "connection_id": None,
        "subject_id": None,
        "decision": "deny",
        "ok": False,
        "error_code": "policy_denied",
        "result_bytes": None,
    }
    assert body["results"][1]["ok"] is True
    assert body["results"][1]["result_bytes"] > 0
    assert CANARY not in response.content.decode()
    assert "iso" not in response.content.decode()  # no result values either


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"run_id": "r1"}, ["a2", "a1"]),
        ({"tool_id": "core__wait"}, ["a3"]),
        ({"ok": "true"}, ["a2"]),
        ({"ok": "false"}, ["a3", "a1"]),
        ({"run_id": "r1", "ok": "false"}, ["a1"]),
        ({"run_id": "nope"}, []),
    ],
)
def test_list_filters(acme, query, expected):
    response = api_client(acme).get("/api/v1/invocations", query)

    assert [row["tool_call_id"] for row in response.json()["results"]] == expected


@pytest.mark.parametrize("value", ["yes", "1", "True", CANARY])
def test_ok_filter_other_than_true_or_false_answers_422(acme, value):
    response = api_client(acme).get("/api/v1/invocations", {"ok": value})

    assert response.status_code == 422
    assert response.json() == {
        "error_code": "validation",
        "safe_message": "the request is invalid",
        "errors": [{"path": "ok", "message": "must be true or false"}],
    }


def test_list_is_paginated(acme):
    first = api_client(acme).get("/api/v1/invocations", {"limit": 2}).json()
    second = api_client(acme).get("/api/v1/invocations", {"limit": 2, "offset": 2}).json()

    assert [row["tool_call_id"] for row in first["results"]] == ["a3", "a2"]
    assert first["next"] == "http://testserver/api/v1/invocations?limit=2&offset=2"
    assert [row["tool_call_id"] for row in second["results"]] == ["a1"]
    assert (second["count"], second["next"]) == (3, None)


def test_detail_answers_the_row(acme):
    response = api_client(acme).get("/api/v1/invocations/a2")

    assert response.status_code == 200
    row = response.json()
    assert set(row) == ROW_FIELDS
    assert (row["tool_call_id"], row["run_id"], row["ok"], row["decision"]) == ("a2", "r1", True, "allow")
    assert json.dumps(row).count("UTC") == 0


def test_detail_of_an_unknown_id_answers_404(acme):
    response = api_client(acme).get("/api/v1/invocations/nope")

    assert response.status_code == 404
    assert response.json() == {"error_code": "not_found", "safe_message": "no such invocation"}


@pytest.mark.parametrize("reference", ["%00", "a2%00", "a" * 129, "a2.json", "%E2%80%AE", "a2%20"])
def test_detail_of_an_id_that_cannot_be_a_tool_call_id_answers_404_without_a_query(acme, reference):
    # PostgreSQL refuses a NUL in a query parameter with an error: such ids must never reach it.
    with CaptureQueriesContext(connection) as queries:
        response = api_client(acme).get(f"/api/v1/invocations/{reference}")

    assert response.status_code == 404
    assert response.json() == {"error_code": "not_found", "safe_message": "no such invocation"}
    assert not [query for query in queries if "tools_app_toolinvocation" in query["sql"]]


def test_another_tenant_never_sees_these_invocations(acme):
    other_tenant = TenantFactory(slug="globex")
    _account, other_key = service_account_with_key(other_tenant, name="agent")
    exec_call(other_key, tool_id="core__get_current_time", tool_call_id="b1")  # denied: globex has no policy

    listed = api_client(other_key).get("/api/v1/invocations")
    detail = api_client(other_key).get("/api/v1/invocations/a2")

    assert [row["tool_call_id"] for row in listed.json()["results"]] == ["b1"]
    assert listed.json()["count"] == 1
    assert detail.status_code == 404
    assert detail.json()["error_code"] == "not_found"
    assert ToolInvocation.objects.filter(tool_call_id="a2").exists()


def test_invocations_need_the_tools_exec_scope(acme):
    _account, manage_key = service_account_with_key(TenantFactory(slug="acme"), scopes=("connections:manage",))

    listed = api_client(manage_key).get("/api/v1/invocations")
    detail = api_client(manage_key).get("/api/v1/invocations/a2")

    assert (listed.status_code, detail.status_code) == (403, 403)
    assert detail.json()["error_code"] == "forbidden"


# --- whose rows: the caller's own, or with invocations:read the tenant's -----------


def test_another_service_account_of_the_tenant_reads_only_its_own_rows(acme):
    # given a second tools:exec account of acme, with one call of its own
    _other, other_key = service_account_with_key(TenantFactory(slug="acme"), name="other")
    exec_call(other_key, tool_id="core__get_current_time", tool_call_id="b1")

    # when it reads the invocations
    listed = api_client(other_key).get("/api/v1/invocations")
    filtered = api_client(other_key).get("/api/v1/invocations", {"run_id": "r1"})
    detail = api_client(other_key).get("/api/v1/invocations/a2")

    # then it sees its own row only; agent's rows are not found, as another tenant's would be
    assert [row["tool_call_id"] for row in listed.json()["results"]] == ["b1"]
    assert listed.json()["count"] == 1
    assert filtered.json()["results"] == []
    assert (detail.status_code, detail.json()) == (
        404,
        {"error_code": "not_found", "safe_message": "no such invocation"},
    )
    # and agent still reads its own
    assert [row["tool_call_id"] for row in api_client(acme).get("/api/v1/invocations").json()["results"]] == [
        "a3",
        "a2",
        "a1",
    ]
    assert api_client(acme).get("/api/v1/invocations/b1").status_code == 404


@pytest.mark.parametrize(
    "scopes", [("tools:exec", "invocations:read"), ("invocations:read",)], ids=["with-exec", "alone"]
)
def test_invocations_read_reads_every_row_of_the_tenant_and_no_other(acme, scopes):
    _auditor, auditor_key = service_account_with_key(TenantFactory(slug="acme"), name="auditor", scopes=scopes)
    globex_key = service_account_with_key(TenantFactory(slug="globex"), name="agent")[1]
    exec_call(globex_key, tool_id="core__get_current_time", tool_call_id="g1")

    listed = api_client(auditor_key).get("/api/v1/invocations")
    detail = api_client(auditor_key).get("/api/v1/invocations/a2")

    assert listed.status_code == 200
    assert [(row["tool_call_id"], row["service_account"]) for row in listed.json()["results"]] == [
        ("a3", "agent"),
        ("a2", "agent"),
        ("a1", "agent"),
    ]
    assert (detail.status_code, detail.json()["tool_call_id"]) == (200, "a2")
    assert api_client(auditor_key).get("/api/v1/invocations/g1").status_code == 404


def test_invocations_read_alone_reads_but_runs_nothing(acme):
    _auditor, auditor_key = service_account_with_key(
        TenantFactory(slug="acme"), name="auditor", scopes=("invocations:read",)
    )

    ran = api_client(auditor_key).post("/api/v1/tools/exec", {"tool_id": "core__get_current_time"}, format="json")
    catalog = api_client(auditor_key).get("/api/v1/tools")

    assert (ran.status_code, ran.json()["error_code"]) == (403, "forbidden")
    assert catalog.status_code == 403
    assert not ToolInvocation.objects.filter(service_account__name="auditor").exists()


def test_a_missing_scope_names_both_that_would_do(acme):
    _account, manage_key = service_account_with_key(TenantFactory(slug="acme"), scopes=("connections:manage",))

    refused = api_client(manage_key).get("/api/v1/invocations")

    assert refused.json() == {
        "error_code": "forbidden",
        "safe_message": "the API key lacks the tools:exec or invocations:read scope",
    }
