"""`manage.py approvals list|decide`: the approval queue from an operator's shell."""

from __future__ import annotations

import getpass
import io
import re
import uuid

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from policies_app.models import ApprovalRequest
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import api_client, enable_tools

pytestmark = pytest.mark.django_db


def _request_approval(tenant_slug: str, call_id: str) -> str:
    tenant = TenantFactory(slug=tenant_slug)
    enable_tools("core__wait")
    _account, key = service_account_with_key(tenant, name="agent")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["core__wait"], require_approval_for_effects=["read_only"])
    response = api_client(key).post(
        "/api/v1/tools/exec", {"tool_id": "core__wait", "args": {"ms": 1}, "tool_call_id": call_id}, format="json"
    )
    return response.json()["approval_id"]


def _run(*args: str) -> str:
    out = io.StringIO()
    call_command("approvals", *args, stdout=out)
    return out.getvalue()


def test_list_prints_one_line_per_request_and_filters():
    acme = _request_approval("acme", "a1")
    globex = _request_approval("globex", "g1")

    every = _run("list").splitlines()
    acme_only = _run("list", "--tenant", "acme").splitlines()
    rows_only = _run("list", "--tenant", "acme", "--no-header").splitlines()

    header = ["id", "status", "tenant", "service_account", "tool", "expires_at"]
    assert every[0].split("\t") == header
    assert {line.split("\t")[0] for line in every[1:]} == {acme, globex}
    assert acme_only[0].split("\t") == header
    assert acme_only[1].split("\t")[:5] == [acme, "pending", "acme", "agent", "core__wait"]
    assert len(acme_only) == 2
    assert rows_only == acme_only[1:]


def test_decide_records_the_operating_system_user_and_the_reason():
    approval_id = _request_approval("acme", "a1")

    printed = _run("decide", approval_id, "--deny", "--reason", "not during the freeze")

    approval = ApprovalRequest.objects.get(pk=approval_id)
    assert printed.strip() == f"{approval_id} denied"
    assert (approval.status, approval.decided_by_name, approval.reason) == (
        "denied",
        f"os:{getpass.getuser()}",
        "not during the freeze",
    )
    assert _run("list", "--pending") == ""


def test_deciding_twice_or_an_unknown_id_fails_with_a_clear_message():
    approval_id = _request_approval("acme", "a1")
    _run("decide", approval_id, "--approve")

    with pytest.raises(CommandError, match="is approved, not pending"):
        _run("decide", approval_id, "--deny")
    with pytest.raises(CommandError, match="no approval request"):
        _run("decide", str(uuid.uuid4()), "--approve")
    with pytest.raises(CommandError, match="no approval request"):
        _run("decide", "not-an-id", "--approve")


def test_a_decision_made_by_the_command_is_on_the_metrics_page():
    approval_id = _request_approval("acme", "a1")
    before = _decided_on_the_page()

    _run("decide", approval_id, "--approve")

    assert _decided_on_the_page() == {"approved": before["approved"] + 1, "denied": before["denied"]}


def _decided_on_the_page() -> dict[str, float]:
    page = Client().get("/metrics").content.decode()
    return {
        decision: float(re.search(rf'^toolgate_approvals_decided_total{{decision="{decision}"}} (\S+)$', page, re.M)[1])
        for decision in ("approved", "denied")
    }
