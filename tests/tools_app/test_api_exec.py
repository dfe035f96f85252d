"""POST /api/v1/tools/exec against the real runtime: every outcome the API can produce.

Policies, tools, connections and grants are real rows. Calls that reach GitHub
are tested against a loopback server in tests/connections_app.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIRequestFactory

from connections_app.services import connection_revoke
from core.errors import ERROR_STATUS
from policies_app import governance
from policies_app.governance import governance_cache
from policies_app.models import ApprovalRequest, ServiceAccount
from runner.defaults import SystemClock
from runner.grants import GRANT_REFUSED, NOT_GRANTED
from runner.pipeline import ToolRunner
from runner.types import ErrorCode, FieldError
from tests.factories import ConnectionFactory, GrantFactory, TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import api_client, enable_tools
from tests.support.rate_window import room_in_the_rate_window
from tools_app.api.views import ToolExecView
from tools_app.models import ToolInvocation

pytestmark = pytest.mark.django_db

URL = "/api/v1/tools/exec"
CANARY = "canary-7f3a9c"


@pytest.fixture
def tenant():
    return TenantFactory(slug="acme")


@pytest.fixture
def caller(tenant):
    """A tools:exec service account whose tenant policy allows the two core tools, both enabled."""
    enable_tools("core__get_current_time", "core__wait")
    account, key = service_account_with_key(tenant, name="agent")
    policy = ToolPolicyFactory(tenant=tenant, allowed_tools=["core__get_current_time", "core__wait"])
    return account, key, policy


def exec_call(key: str, **body):
    return api_client(key).post(URL, body, format="json")


def executed_rows(tool_call_id: str) -> int:
    return ToolInvocation.objects.filter(tool_call_id=tool_call_id, executed=True).count()


# --- success ---------------------------------------------------------------------------


def test_exec_runs_the_tool_and_answers_the_contract_body(caller):
    _account, key, _policy = caller

    response = exec_call(
        key, tool_id="core__get_current_time", args={"timezone": "Europe/Paris"}, tool_call_id="call_1", run_id="r9"
    )

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"tool_call_id", "tool_id", "ok", "value", "started_at", "ended_at"}
    assert (body["tool_call_id"], body["tool_id"], body["ok"]) == ("call_1", "core__get_current_time", True)
    assert set(body["value"]) == {"iso", "epoch_ms", "timezone"}
    assert body["value"]["timezone"] == "Europe/Paris"
    row = ToolInvocation.objects.get(tool_call_id="call_1")
    assert (row.run_id, row.ok, row.executed, row.decision) == ("r9", True, True, "allow")


def test_exec_without_tool_call_id_generates_one(caller):
    _account, key, _policy = caller

    response = exec_call(key, tool_id="core__get_current_time")

    assert response.status_code == 200
    generated = response.json()["tool_call_id"]
    assert generated.startswith("call_")
    assert ToolInvocation.objects.filter(tool_call_id=generated, ok=True).count() == 1


def test_exec_of_a_caller_records_its_last_use(caller):
    account, key, _policy = caller
    assert account.last_used_at is None

    exec_call(key, tool_id="core__get_current_time")

    account.refresh_from_db()
    assert account.last_used_at is not None


# --- the hot path's database work --------------------------------------------

# Without Redis (the embedded default) the generation is read by the key lookup and again by
# the runner on every request; with Redis a push replaces both reads.
GENERATION_READS = 0 if settings.REDIS_URL else 2


@pytest.fixture
def warm(caller, monkeypatch):
    """A caller whose key, policy and switches are cached, and no staleness re-read due during the test."""
    monkeypatch.setattr(governance, "MAX_STALENESS_S", 3600.0)
    _account, key, _policy = caller
    assert exec_call(key, tool_id="core__get_current_time").status_code == 200
    return key


def test_a_warm_call_without_a_tool_call_id_is_one_insert(warm, django_assert_num_queries):
    with django_assert_num_queries(GENERATION_READS + 1) as captured:
        response = exec_call(warm, tool_id="core__get_current_time")

    assert response.status_code == 200
    audit_write = captured.captured_queries[-1]["sql"]
    if connection.vendor == "postgresql":
        # the claim of the call's id rides in the same statement (the audit table is partitioned there)
        assert audit_write.startswith('WITH claim AS (INSERT INTO "tools_app_toolcallclaim"')
    assert 'INSERT INTO "tools_app_toolinvocation"' in audit_write


@pytest.mark.skipif(connection.vendor != "postgresql", reason="prepared statements are PostgreSQL's")
def test_postgresql_keeps_the_audit_inserts_prepared_and_each_row_as_sent(warm):
    for number in range(6):
        exec_call(warm, tool_id="core__get_current_time")
        exec_call(warm, tool_id="core__get_current_time", tool_call_id=f"prepared-{number}")

    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [statement for (statement,) in cursor.fetchall()]
    claimed_first = [s for s in prepared if "tools_app_toolcallclaim" in s and 'RETURNING "id"' in s]
    claimed_with_row = [s for s in prepared if "tools_app_toolcallclaim" in s and 'RETURNING "id"' not in s]
    assert len(claimed_first) == len(claimed_with_row) == 1, prepared
    rows = ToolInvocation.objects.filter(tool_call_id__startswith="prepared-").order_by("tool_call_id")
    assert [(row.tool_call_id, row.ok, row.state, row.result is not None) for row in rows] == [
        (f"prepared-{number}", True, ToolInvocation.State.DONE, True) for number in range(6)
    ]


def test_a_warm_call_with_a_tool_call_id_claims_then_finishes_its_row(warm, django_assert_num_queries):
    # the claim's INSERT runs under a savepoint here because tests run inside a transaction;
    # a web request runs in autocommit, where it is the INSERT alone: two round trips in all.
    # On PostgreSQL that INSERT is one statement writing the claim and the pending row together.
    with django_assert_num_queries(GENERATION_READS + 4) as captured:
        response = exec_call(warm, tool_id="core__get_current_time", tool_call_id="pinned-1")

    assert response.status_code == 200
    statements = [query["sql"].split(" ", 1)[0] for query in captured.captured_queries[GENERATION_READS:]]
    claim = "WITH" if connection.vendor == "postgresql" else "INSERT"
    assert statements == ["SAVEPOINT", claim, "RELEASE", "UPDATE"]


def test_a_cold_call_loads_key_policy_and_switches_once(caller, django_assert_max_num_queries):
    _account, key, _policy = caller
    governance.governance_cache.clear()

    with django_assert_max_num_queries(7):  # generation, key, last use, policy, switches, audit
        assert exec_call(key, tool_id="core__get_current_time").status_code == 200


# --- refusals of the runner, one per contract code --------------------------------------


def test_unknown_tool_answers_404_unavailable(caller):
    _account, key, _policy = caller

    response = exec_call(key, tool_id="core__get_curent_time", tool_call_id="c1")

    assert response.status_code == 404
    assert response.json() == {
        "tool_call_id": "c1",
        "tool_id": "core__get_curent_time",
        "ok": False,
        "error_code": "unavailable",
        "safe_message": "no such tool; did you mean 'core__get_current_time'?",
    }


def test_disabled_tool_answers_403_policy_denied(caller):
    _account, key, _policy = caller

    response = exec_call(key, tool_id="github__create_issue", tool_call_id="c1")

    assert response.status_code == 403
    assert response.json()["error_code"] == "policy_denied"
    assert response.json()["safe_message"] == "tool is disabled"


def test_tool_outside_the_policy_answers_403_policy_denied(caller):
    _account, key, policy = caller
    policy.allowed_tools = ["core__wait"]
    policy.save()

    response = exec_call(key, tool_id="core__get_current_time", tool_call_id="c1")

    assert response.status_code == 403
    assert response.json() == {
        "tool_call_id": "c1",
        "tool_id": "core__get_current_time",
        "ok": False,
        "error_code": "policy_denied",
        "safe_message": "tool is not allowed by the caller's policy",
    }
    assert executed_rows("c1") == 0


def test_approval_required_answers_202_with_the_pending_approval(caller):
    account, key, policy = caller
    policy.require_approval_for_effects = ["read_only"]
    policy.save()

    response = exec_call(key, tool_id="core__get_current_time", tool_call_id="c1")

    assert response.status_code == 202
    body = response.json()
    approval = ApprovalRequest.objects.get()
    assert body["error_code"] == "approval_required"
    assert body["approval_id"] == str(approval.pk)
    assert (approval.tool_call_id, approval.service_account_id, approval.status) == ("c1", account.pk, "pending")
    assert executed_rows("c1") == 0


def test_spent_rate_budget_answers_429_with_retry_after(caller):
    _account, key, policy = caller
    policy.rate_limit_per_minute = 1
    policy.save()
    room_in_the_rate_window()
    first = exec_call(key, tool_id="core__get_current_time", tool_call_id="c1")

    second = exec_call(key, tool_id="core__get_current_time", tool_call_id="c2")

    assert first.status_code == 200
    assert second.status_code == 429
    assert second.json()["error_code"] == "rate_limited"
    assert 1 <= int(second["Retry-After"]) <= 60
    assert executed_rows("c2") == 0


def test_repeat_answers_the_recorded_response_and_runs_once(caller):
    _account, key, _policy = caller
    first = exec_call(key, tool_id="core__get_current_time", args={"timezone": "UTC"}, tool_call_id="c1")

    repeat = exec_call(key, tool_id="core__get_current_time", args={"timezone": "UTC"}, tool_call_id="c1")

    assert repeat.status_code == 200
    assert repeat.content == first.content  # the recorded answer, byte for byte: its ended_at too
    assert executed_rows("c1") == 1


def test_reused_tool_call_id_with_other_args_answers_409_idempotency_conflict(caller):
    _account, key, _policy = caller
    exec_call(key, tool_id="core__get_current_time", args={"timezone": "UTC"}, tool_call_id="c1")

    conflict = exec_call(key, tool_id="core__get_current_time", args={"timezone": "Asia/Tokyo"}, tool_call_id="c1")

    assert conflict.status_code == 409
    assert conflict.json()["error_code"] == "idempotency_conflict"
    assert executed_rows("c1") == 1


def test_args_failing_the_tool_schema_answer_422_without_echoing_them(caller):
    _account, key, _policy = caller

    response = exec_call(key, tool_id="core__get_current_time", args={"timezone": f"Mars/{CANARY}"})

    assert response.status_code == 422
    body = response.json()
    assert body["error_code"] == "validation"
    assert [error["path"] for error in body["errors"]] == ["timezone"]
    assert CANARY not in response.content.decode()


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        (
            {"tool_id": "core__get_current_time", "args": {"sk_live_ABCDEF123": 2}},
            [
                {
                    "path": "(unknown field)",
                    "message": "unknown field; the tool's input_schema lists the fields it accepts",
                }
            ],
        ),
        (
            {"tool_id": "core__get_current_time", "args": {"timezone": "UTC", "sk_live_ABCDEF123": "x"}},
            [
                {
                    "path": "(unknown field)",
                    "message": "unknown field; the tool's input_schema lists the fields it accepts",
                }
            ],
        ),
        (
            {"tool_id": "core__get_current_time", "sk_live_ABCDEF123": 2},
            [
                {
                    "path": "(unknown field)",
                    "message": "unknown field; the fields are: "
                    "tool_id, args, tool_call_id, run_id, connection_id, connection_ids, grant_id",
                }
            ],
        ),
    ],
    ids=["arg-key", "arg-key-beside-a-valid-one", "top-level-key"],
)
def test_unknown_keys_are_reported_without_echoing_them(caller, body, errors):
    # A secret pasted as a key must not come back in the error.
    _account, key, _policy = caller

    response = api_client(key).post(URL, body, format="json")

    assert response.status_code == 422
    assert response.json()["errors"] == errors
    assert "sk_live" not in response.content.decode()
    assert "sk_live" not in str(list(ToolInvocation.objects.values()))


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (
            {"tool_id": "core__get_current_time", "argz": {}},
            {
                "path": "argz",
                "message": "unknown field (did you mean 'args'?); the fields are: "
                "tool_id, args, tool_call_id, run_id, connection_id, connection_ids, grant_id",
            },
        ),
        (
            {"tool_id": "core__get_current_time", "args": {"timezon": "UTC"}},
            {
                "path": "timezon",
                "message": "unknown field (did you mean 'timezone'?); "
                "the tool's input_schema lists the fields it accepts",
            },
        ),
        (
            {"tool_id": "core__get_current_time", "args": '{"timezone": "UTC"}'},
            {
                "path": "args",
                "message": "must be a JSON object, not a string holding one: parse the string and send the object "
                "itself (OpenAI's function.arguments is such a string)",
            },
        ),
        (
            {"tool_id": "core__get_current_time", "args": "UTC"},
            {"path": "args", "message": "must be an object (a JSON dictionary)"},
        ),
        ({"tool_id": 7}, {"path": "tool_id", "message": "must be a string"}),
        ({"args": {}}, {"path": "tool_id", "message": "required"}),
        (
            {"tool_id": "core__get_current_time", "args": {"timezone": 7}},
            {"path": "timezone", "message": "must be a string, not a number"},
        ),
    ],
    ids=[
        "typo-in-a-field",
        "typo-in-an-arg",
        "openai-arguments-string",
        "args-a-string",
        "id-a-number",
        "no-id",
        "arg-a-number",
    ],
)
def test_mistakes_are_answered_in_one_plain_wording_that_says_what_to_send(caller, body, error):
    _account, key, _policy = caller

    response = api_client(key).post(URL, body, format="json")

    assert response.status_code == 422
    assert response.json()["errors"] == [error]


def test_tool_running_past_its_budget_answers_504_timeout(caller):
    _account, key, policy = caller
    policy.max_runtime_ms = 50
    policy.save()

    response = exec_call(key, tool_id="core__wait", args={"ms": 2000}, tool_call_id="c1")

    assert response.status_code == 504
    assert response.json()["error_code"] == "timeout"
    assert response.json()["safe_message"] == "the tool ran past its 50 ms budget"


def test_result_over_the_byte_budget_answers_502_result_too_large(caller):
    _account, key, policy = caller
    policy.max_result_bytes = 10
    policy.save()

    response = exec_call(key, tool_id="core__get_current_time", tool_call_id="c1")

    assert response.status_code == 502
    assert response.json()["error_code"] == "result_too_large"
    assert "value" not in response.json()


# --- connections ----------------------------------------------------------------------------


@pytest.fixture
def github_caller(caller):
    account, key, policy = caller
    enable_tools("core__get_current_time", "core__wait", "github__get_user")
    policy.allowed_tools = [*policy.allowed_tools, "github__get_user"]
    policy.save()
    return account, key


def test_connection_without_grant_answers_422_before_the_runner(github_caller):
    _account, key = github_caller

    response = exec_call(key, tool_id="github__get_user", connection_id=str(uuid.uuid4()), tool_call_id="c1")

    assert response.status_code == 422
    assert response.json() == {
        "error_code": "validation",
        "safe_message": "the request is invalid",
        "errors": [{"path": "grant_id", "message": "required whenever connection_id is given"}],
    }
    assert ToolInvocation.objects.count() == 0


def test_connection_outside_the_grant_answers_403_policy_denied(github_caller):
    account, key = github_caller
    grant = GrantFactory(service_account=account, connections=[ConnectionFactory(tenant=account.tenant)])

    response = exec_call(
        key, tool_id="github__get_user", connection_id=str(uuid.uuid4()), grant_id=str(grant.pk), tool_call_id="c1"
    )

    assert response.status_code == 403
    assert response.json()["error_code"] == "policy_denied"
    assert response.json()["safe_message"] == NOT_GRANTED


def test_another_callers_grant_answers_403_policy_denied(github_caller, tenant):
    _account, key = github_caller
    other, _other_key = service_account_with_key(tenant, name="other")
    connection = ConnectionFactory(tenant=tenant)
    connection_id = str(connection.pk)
    grant = GrantFactory(service_account=other, connections=[connection])

    response = exec_call(key, tool_id="github__get_user", connection_id=connection_id, grant_id=str(grant.pk))

    assert response.status_code == 403
    assert response.json()["safe_message"] == GRANT_REFUSED


def test_granted_but_revoked_connection_answers_409_connection_unavailable(github_caller):
    account, key = github_caller
    connection = ConnectionFactory(tenant=account.tenant)
    connection_id = str(connection.pk)
    grant = GrantFactory(service_account=account, connections=[connection])
    connection_revoke(connection=connection)

    response = exec_call(
        key,
        tool_id="github__get_user",
        connection_id=connection_id,  # no connection_ids: the default [connection_id] applies
        grant_id=str(grant.pk),
        tool_call_id="c1",
    )

    assert response.status_code == 409
    assert response.json()["error_code"] == "connection_unavailable"
    assert response.json()["safe_message"] == "connection has been revoked"


def test_an_explicit_empty_connection_ids_declares_no_connection_so_a_named_one_is_refused(github_caller):
    # given a granted, usable connection
    account, key = github_caller
    connection = ConnectionFactory(tenant=account.tenant)
    grant = GrantFactory(service_account=account, connections=[connection])

    # when the call declares no connection for its run but names one
    response = exec_call(
        key,
        tool_id="github__get_user",
        connection_id=str(connection.pk),
        connection_ids=[],
        grant_id=str(grant.pk),
        tool_call_id="c1",
    )

    # then grant ∩ declared is empty: refused before the broker ever touched the connection
    assert (response.status_code, response.json()["error_code"]) == (403, "policy_denied")
    assert response.json()["safe_message"] == NOT_GRANTED
    connection.refresh_from_db()
    assert connection.last_used_at is None


def test_connection_tool_without_a_connection_answers_422(github_caller):
    _account, key = github_caller

    response = exec_call(key, tool_id="github__get_user", tool_call_id="c1")

    assert response.status_code == 422
    assert response.json()["errors"] == [{"path": "connection_id", "message": "this tool needs a connection_id"}]
    assert response.json()["tool_call_id"] == "c1"


def test_connection_given_to_a_tool_that_takes_none_answers_422(github_caller):
    account, key = github_caller
    connection = ConnectionFactory(tenant=account.tenant)
    connection_id = str(connection.pk)
    grant = GrantFactory(service_account=account, connections=[connection])

    response = exec_call(key, tool_id="core__get_current_time", connection_id=connection_id, grant_id=str(grant.pk))

    assert response.status_code == 422
    assert response.json()["errors"] == [{"path": "connection_id", "message": "this tool takes no connection"}]


def test_expired_grant_answers_403_policy_denied(github_caller):
    account, key = github_caller
    connection = ConnectionFactory(tenant=account.tenant)
    connection_id = str(connection.pk)
    grant = GrantFactory(
        service_account=account, connections=[connection], expires_at=timezone.now() - timedelta(minutes=1)
    )

    response = exec_call(key, tool_id="github__get_user", connection_id=connection_id, grant_id=str(grant.pk))

    assert response.status_code == 403
    assert response.json()["safe_message"] == "the grant has expired; ask the tenant for a new one"


# --- request validation --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"args": {}}, "tool_id"),
        ({"tool_id": CANARY * 30}, "tool_id"),
        ({"tool_id": "core__get_current_time", "tool_call_id": f"{CANARY} bad"}, "tool_call_id"),
        ({"tool_id": "core__get_current_time", "tool_call_id": "c1\n"}, "tool_call_id"),
        ({"tool_id": "core__get_current_time", "run_id": f"{CANARY}/x"}, "run_id"),
        ({"tool_id": "core__get_current_time", "args": [CANARY]}, "args"),
        ({"tool_id": "core__get_current_time", "args": {"timezone": "x" * (9 * 1024)}}, "args"),
        ({"tool_id": "core__get_current_time", "connection_ids": [str(n) for n in range(33)]}, "connection_ids"),
        ({"tool_id": "core__get_current_time", "connection_ids": [CANARY * 10]}, "connection_ids.0"),
        ({"tool_id": "core__get_current_time", "extra": CANARY}, "(unknown field)"),
        ({"tool_id": "core__get_current_time", f"{CANARY} key!": 1}, "(unknown field)"),
    ],
)
def test_invalid_requests_answer_422_with_paths_and_no_values(caller, body, path):
    _account, key, _policy = caller

    response = api_client(key).post(URL, body, format="json")

    assert response.status_code == 422
    payload = response.json()
    assert payload["error_code"] == "validation"
    assert [error["path"] for error in payload["errors"]] == [path]
    assert CANARY not in response.content.decode()
    assert ToolInvocation.objects.count() == 0


def test_nine_kib_of_args_answer_422_naming_the_limit(caller):
    _account, key, _policy = caller

    response = exec_call(key, tool_id="core__get_current_time", args={"pad": "x" * (9 * 1024)})

    assert response.status_code == 422
    assert response.json()["errors"] == [{"path": "args", "message": "args must be at most 8192 bytes serialized"}]


# --- the status of every code, through the real view and exception handler -------------------


@pytest.mark.parametrize("code", list(ErrorCode))
def test_every_failure_code_answers_its_contract_status(code):
    tenant = TenantFactory()
    _account, key = service_account_with_key(tenant)
    refusal = {
        ErrorCode.APPROVAL_REQUIRED: {"approval_id": "a-1"},
        ErrorCode.VALIDATION: {"errors": (FieldError(path="x", message="bad"),)},
        ErrorCode.RATE_LIMITED: {"retry_after_s": 7},
    }.get(code, {})

    def refuse(call, proceed):
        return call.fail(code, "refused", **refusal)

    runner = ToolRunner([refuse], SystemClock())
    runtime = SimpleNamespace(runner=runner)
    view = ToolExecView.as_view(runtime_provider=lambda: runtime)
    request = APIRequestFactory().post(
        URL, {"tool_id": "core__x", "tool_call_id": "c1"}, format="json", HTTP_AUTHORIZATION=f"Bearer {key}"
    )

    response = view(request)

    assert response.status_code == ERROR_STATUS[code]
    expected = {"tool_call_id": "c1", "tool_id": "core__x", "ok": False, "error_code": code.value}
    assert {name: response.data[name] for name in expected} == expected
    assert response.data["safe_message"] == "refused"
    assert ("approval_id" in response.data) == (code is ErrorCode.APPROVAL_REQUIRED)
    assert ("errors" in response.data) == (code is ErrorCode.VALIDATION)
    assert response.get("Retry-After") == ("7" if code is ErrorCode.RATE_LIMITED else None)


def test_contract_statuses_of_the_table():
    assert {code.value: ERROR_STATUS[code] for code in ErrorCode} == {
        "unavailable": 404,
        "policy_denied": 403,
        "approval_required": 202,
        "rate_limited": 429,
        "idempotency_conflict": 409,
        "invalid_json": 400,
        "validation": 422,
        "connection_unavailable": 409,
        "auth_refresh_failed": 502,
        "timeout": 504,
        "cancelled": 499,
        "execution": 502,
        "output_invalid": 500,
        "redaction_failed": 500,
        "result_too_large": 502,
        "authz_denied": 403,
        "unavailable_dependency": 503,
        "tool_error": 200,
        "connection_required": 409,
        "input_required": 202,
    }


# --- the hot path's query budget ----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_warm_exec_takes_at_most_five_queries(django_assert_max_num_queries):
    # given a caller whose caches are warm after one call
    governance_cache.clear()
    tenant = TenantFactory(slug="budget")
    enable_tools("core__get_current_time")
    _account, key = service_account_with_key(tenant, name="agent")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["core__get_current_time"])
    client = api_client(key)
    assert (
        client.post(URL, {"tool_id": "core__get_current_time", "tool_call_id": "w0"}, format="json").status_code == 200
    )

    # when / then: generation read, idempotency claim (BEGIN, INSERT, COMMIT are counted on SQLite),
    # audit update; last_used_at was written by the first call and is not rewritten within the minute
    with django_assert_max_num_queries(5):
        response = client.post(URL, {"tool_id": "core__get_current_time", "tool_call_id": "w1"}, format="json")
    assert response.status_code == 200
    assert ServiceAccount.objects.filter(last_used_at__isnull=False).count() == 1
