"""Approval metrics: requests and decisions counted when committed, the queue read at scrape time."""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command
from django.test import Client

from config.runtime import build_runtime
from policies_app.governance import governance_bump, governance_cache
from policies_app.models import ApprovalRequest
from policies_app.services import approval_decide
from runner.types import ErrorCode, ToolInvocationContext
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.metrics import sample
from tools_app.models import Tool

pytestmark = pytest.mark.django_db


@pytest.fixture
def runner_and_account():
    call_command("sync_tools")
    Tool.objects.filter(pk="core__wait").update(is_enabled=True)
    governance_bump()
    account, _key = service_account_with_key(TenantFactory(slug="acme"))
    ToolPolicyFactory(tenant=account.tenant, allowed_tools=["core__wait"], require_approval_for_effects=["read_only"])
    governance_cache.refresh()
    return build_runtime().runner, account


def _ask(runner, account, call_id: str):
    ctx = ToolInvocationContext(
        run_id="", tool_call_id=call_id, tenant_id=str(account.tenant_id), actor_id=str(account.id)
    )
    return runner.exec("core__wait", {"ms": 1}, ctx)


def pending_on_the_page() -> float:
    return on_the_page(r"toolgate_approvals_pending")


def on_the_page(series: str) -> float:
    match = re.search(rf"^{series} (\S+)$", Client().get("/metrics").content.decode(), re.MULTILINE)
    assert match is not None
    return float(match.group(1))


def decided_on_the_page(decision: str) -> float:
    return on_the_page(rf'toolgate_approvals_decided_total\{{decision="{decision}"\}}')


def test_requests_decisions_and_the_pending_queue_are_exported(runner_and_account, django_capture_on_commit_callbacks):
    runner, account = runner_and_account
    requested = sample("toolgate_approvals_requested_total")
    approved = decided_on_the_page("approved")
    denied = decided_on_the_page("denied")

    with django_capture_on_commit_callbacks(execute=True):
        for call_id in ("call-1", "call-2", "call-3"):
            assert _ask(runner, account, call_id).error_code is ErrorCode.APPROVAL_REQUIRED
        assert _ask(runner, account, "call-1").error_code is ErrorCode.APPROVAL_REQUIRED  # the same request again
    assert sample("toolgate_approvals_requested_total") - requested == 3
    assert pending_on_the_page() == 3

    first, second, third = ApprovalRequest.objects.order_by("tool_call_id")
    with django_capture_on_commit_callbacks(execute=True):
        approval_decide(approval=first, approve=True, decided_by=None)
        approval_decide(approval=second, approve=False, decided_by=None)
        approval_decide(approval=second, approve=True, decided_by=None)  # already decided: not counted

    assert decided_on_the_page("approved") - approved == 1
    assert decided_on_the_page("denied") - denied == 1
    assert pending_on_the_page() == 1
    assert third.status == ApprovalRequest.Status.PENDING
