"""Human approval end to end, as a new user meets it: REST -> runner -> approval -> operator -> repeat.

The GitHub tool runs against a loopback GitHub on a real socket, so "runs once"
is counted on the wire. `github__create_issue` requires confirmation in its
contract, so every call of it waits for a person whatever the policy says.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.db import connection as db
from django.utils import timezone

from config.runtime import runtime
from connections_app.models import Connection
from policies_app.approval_args import MAX_KEPT_ARGS_BYTES, approval_args_view
from policies_app.governance import governance_bump
from policies_app.models import ApprovalRequest, Approver
from policies_app.services import approval_decide
from policies_app.tasks import approval_expiry_sweep
from runner.types import ToolInvocationContext
from tests.factories import ConnectionFactory, GrantFactory, ToolPolicyFactory, UserFactory, service_account_with_key
from tests.support.api import api_client
from tools_app.models import ToolInvocation

pytestmark = pytest.mark.django_db

CANARY = "canary-7f3a9e1b-do-not-leak"
ISSUE = {"owner": "octo", "repo": "hello", "title": "Bug", "body": f"details {CANARY}"}


@pytest.fixture
def granted(caller):
    account, _key = caller
    connection = ConnectionFactory(tenant=account.tenant, label="Work GitHub", credentials={"api_key": "ghp_x" * 8})
    return connection, GrantFactory(service_account=account, connections=[connection])


@pytest.fixture
def create_issue(call_tool, granted):
    connection, grant = granted

    def call(tool_call_id: str = "c1", args: dict | None = None, **body):
        return call_tool(
            connection, grant, tool_id="github__create_issue", args=args or ISSUE, tool_call_id=tool_call_id, **body
        )

    return call


def _raw_args_column(approval_id) -> bytes | None:
    """The sealed-args column as the database holds it, read without the ORM."""
    with db.cursor() as cursor:
        cursor.execute(
            "SELECT args_sealed FROM policies_app_approvalrequest WHERE id = %s",
            [approval_id.hex if db.vendor == "sqlite" else str(approval_id)],
        )
        (value,) = cursor.fetchone()
    return None if value is None else bytes(value)


def test_an_invalid_call_is_refused_before_any_approval_exists(github, caller, call_tool, granted):
    connection, grant = granted
    _account, key = caller
    client = api_client(key)

    no_connection = client.post(
        "/api/v1/tools/exec", {"tool_id": "github__create_issue", "args": ISSUE, "tool_call_id": "c1"}, format="json"
    )
    bad_args = call_tool(connection, grant, tool_id="github__create_issue", args={"owner": "octo"}, tool_call_id="c2")

    assert (no_connection.status_code, no_connection.json()["error_code"]) == (422, "validation")
    assert (bad_args.status_code, bad_args.json()["error_code"]) == (422, "validation")
    assert ApprovalRequest.objects.count() == 0
    assert github.requests == []


def test_approve_then_the_repeat_runs_exactly_once(github, caller, create_issue):
    # given
    _account, key = caller
    github.route("POST", "/repos/octo/hello/issues", status=201, json={"number": 7, "html_url": "https://x/7"})
    first = create_issue()
    approval_id = first.json()["approval_id"]
    repeat = create_issue()
    polled = api_client(key).get(f"/api/v1/approvals/{approval_id}")

    # when an operator approves, and the caller repeats twice
    approval_decide(approval=ApprovalRequest.objects.get(), approve=True, decided_by=UserFactory(), reason="ok")
    ran = create_issue()
    replayed = create_issue()

    # then
    assert (first.status_code, first.json()["error_code"]) == (202, "approval_required")
    assert f"/api/v1/approvals/{approval_id}" in first.json()["safe_message"]
    assert (repeat.status_code, repeat.json()["approval_id"]) == (202, approval_id)
    assert polled.status_code == 200
    body = polled.json()
    assert (body["status"], body["tool_id"], body["tool_call_id"], body["decided_at"]) == (
        "pending",
        "github__create_issue",
        "c1",
        None,
    )
    assert (ran.status_code, ran.json()["value"]) == (200, {"number": 7, "html_url": "https://x/7"})
    assert (replayed.status_code, replayed.json()["value"]) == (200, ran.json()["value"])
    assert [(request.method, request.path) for request in github.requests] == [("POST", "/repos/octo/hello/issues")]
    approval = ApprovalRequest.objects.get()
    assert (approval.status, approval.consequence_level, approval.effect) == (
        "consumed",
        "medium",
        "external_side_effect",
    )
    final = api_client(key).get(f"/api/v1/approvals/{approval_id}").json()
    assert (final["status"], final["reason"], final["decided_at"] is not None) == ("consumed", "ok", True)


def _set_status(connection: Connection, status: str) -> None:
    """As the refresh sets it: the UPDATE and the generation bump that drops the broker's cached row."""
    Connection.objects.filter(pk=connection.pk).update(status=status)
    governance_bump()


def test_a_refused_repeat_does_not_consume_the_approval(github, caller, create_issue, granted):
    connection, _grant = granted
    github.route("POST", "/repos/octo/hello/issues", status=201, json={"number": 8, "html_url": "https://x/8"})
    create_issue()
    approval_decide(approval=ApprovalRequest.objects.get(), approve=True, decided_by=None, decided_by_name="os:ops")

    # the connection needs re-authorisation for a while: the approved repeat is refused by the broker
    _set_status(connection, Connection.Status.NEEDS_REAUTH)
    refused = create_issue()
    still = ApprovalRequest.objects.get().status
    _set_status(connection, Connection.Status.ACTIVE)
    ran = create_issue()

    assert (refused.status_code, refused.json()["error_code"]) == (409, "connection_unavailable")
    assert still == ApprovalRequest.Status.APPROVED
    assert ran.status_code == 200
    assert len(github.requests) == 1
    assert ApprovalRequest.objects.get().status == ApprovalRequest.Status.CONSUMED


def test_deny_answers_policy_denied_with_the_reason_and_nothing_runs(github, caller, create_issue):
    create_issue()
    approval_decide(
        approval=ApprovalRequest.objects.get(), approve=False, decided_by=UserFactory(), reason="wrong repo"
    )

    denied = create_issue()

    assert (denied.status_code, denied.json()["error_code"]) == (403, "policy_denied")
    assert denied.json()["safe_message"] == "the approval was denied (wrong repo)"
    assert github.requests == []
    assert not ToolInvocation.objects.filter(executed=True).exists()


def test_an_expired_request_is_refused_and_its_args_are_erased_by_the_sweep(github, caller, create_issue):
    first = create_issue()
    approval = ApprovalRequest.objects.get()
    ApprovalRequest.objects.filter(pk=approval.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    before_sweep = _raw_args_column(approval.pk)
    erased = approval_expiry_sweep()
    after = create_issue()
    polled = api_client(caller[1]).get(f"/api/v1/approvals/{first.json()['approval_id']}").json()

    assert before_sweep is not None
    assert erased == 1
    assert _raw_args_column(approval.pk) is None
    assert (after.status_code, after.json()["error_code"]) == (403, "policy_denied")
    assert "expired" in after.json()["safe_message"]
    assert polled["status"] == "expired"
    assert github.requests == []


def test_the_policy_sets_the_expiry_and_the_approver(github, caller, create_issue):
    account, _key = caller
    ToolPolicyFactory(
        tenant=account.tenant,
        service_account=account,
        allowed_tools=["github__create_issue"],
        approval_ttl_s=600,
        approver=Approver.TENANT_OWNER,
    )

    create_issue()

    approval = ApprovalRequest.objects.get()
    assert approval.approver == "tenant_owner"
    assert timedelta(seconds=590) < approval.expires_at - approval.created_at <= timedelta(seconds=600)


def test_the_default_expiry_is_one_hour(github, caller, create_issue):
    create_issue()

    approval = ApprovalRequest.objects.get()
    assert timedelta(minutes=59) < approval.expires_at - approval.created_at <= timedelta(hours=1)


def test_args_are_sealed_for_the_approver_and_erased_by_the_decision(github, caller, create_issue):
    # given a pending request
    create_issue()
    approval = ApprovalRequest.objects.get()
    sealed = _raw_args_column(approval.pk)

    # then the row holds ciphertext only, and the approver sees the args
    assert sealed is not None
    assert CANARY.encode() not in sealed
    assert b"octo" not in sealed
    shown = approval_args_view(approval)
    assert shown.text is not None
    assert CANARY in shown.text
    assert '"repo": "hello"' in shown.text

    # when it is decided, the column is nulled
    approval_decide(approval=approval, approve=False, decided_by=None, decided_by_name="os:ops")
    approval.refresh_from_db()
    assert _raw_args_column(approval.pk) is None
    assert (approval_args_view(approval).text, approval_args_view(approval).note) == (
        None,
        "Erased when the request was decided.",
    )


def test_sealed_args_moved_to_another_request_do_not_open(github, caller, create_issue):
    create_issue("c1")
    create_issue("c2", args={**ISSUE, "title": "Other"})
    first, second = ApprovalRequest.objects.order_by("tool_call_id")
    ApprovalRequest.objects.filter(pk=second.pk).update(args_sealed=first.args_sealed)
    second.refresh_from_db()

    shown = approval_args_view(second)

    assert shown.text is None
    assert "cannot be opened" in shown.note


def test_args_over_the_cap_are_not_kept_and_the_approver_is_told(github, caller, granted):
    # REST caps args below the kept size; other paths (a model's batch, MCP) may carry more
    account, _key = caller
    connection, grant = granted
    ctx = ToolInvocationContext(
        run_id="r",
        tool_call_id="big",
        tenant_id=str(account.tenant_id),
        actor_id=str(account.pk),
        connection_id=str(connection.pk),
        grant_id=str(grant.pk),
        declared_connection_ids=(str(connection.pk),),
    )

    result = runtime().runner.exec("github__create_issue", {**ISSUE, "body": "x" * (MAX_KEPT_ARGS_BYTES + 10)}, ctx)

    approval = ApprovalRequest.objects.get()
    shown = approval_args_view(approval)
    assert result.error_code == "approval_required"
    assert _raw_args_column(approval.pk) is None
    assert approval.args_bytes > MAX_KEPT_ARGS_BYTES
    assert shown.text is None
    assert f"more than the {MAX_KEPT_ARGS_BYTES}" in shown.note


def test_another_callers_approval_is_not_found(github, caller, create_issue, tenant):
    first = create_issue()
    _other, other_key = service_account_with_key(tenant, name="other-agent")

    response = api_client(other_key).get(f"/api/v1/approvals/{first.json()['approval_id']}")

    assert (response.status_code, response.json()["error_code"]) == (404, "not_found")


def test_the_canary_in_the_args_reaches_no_log_and_no_audit_row(github, caller, create_issue, caplog):
    caplog.set_level(logging.DEBUG)
    github.route("POST", "/repos/octo/hello/issues", status=201, json={"number": 9, "html_url": "https://x/9"})
    create_issue()
    approval_decide(approval=ApprovalRequest.objects.get(), approve=True, decided_by=None, decided_by_name="os:ops")
    create_issue()

    assert CANARY not in caplog.text
    assert CANARY not in repr([(record.msg, record.args) for record in caplog.records])
    assert CANARY not in repr(list(ToolInvocation.objects.values()))
    assert CANARY not in repr(list(ApprovalRequest.objects.values()))
