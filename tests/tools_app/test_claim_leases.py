"""A tool_call_id left `pending` by a dead process is not stuck for good.

A claim is a pending audit row with a lease (the call's budget plus a grace).
A repeat takes an expired claim over by compare-and-swap and runs the call; a
repeat of a live claim answers 409 within its own budget; a pending claim is
visible as such in the invocations API; the dead attempt, should it ever write,
cannot overwrite the attempt that took over.
"""

from __future__ import annotations

import time

import pytest
from django.utils import timezone

from runner.pipeline import args_digest
from runner.types import Decision, ErrorCode, ToolInvocationContext, ToolInvocationRecord
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import api_client, enable_tools
from tools_app.audit import (
    LEASE_LOST_MESSAGE,
    claim_ref,
    invocation_claim,
    invocation_record,
    invocation_take_over,
)
from tools_app.models import ToolInvocation

pytestmark = pytest.mark.django_db

URL = "/api/v1/tools/exec"
BODY = {"tool_id": "core__wait", "args": {"ms": 0}, "tool_call_id": "stuck-1"}


@pytest.fixture
def caller():
    tenant = TenantFactory(slug="acme")
    enable_tools("core__wait")
    account, key = service_account_with_key(tenant, name="agent")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["core__wait"], max_runtime_ms=300)
    return account, key


def crashed_claim(account, *, lease_s: float) -> ToolInvocation:
    """The pending row a worker leaves behind when it is killed mid-call."""
    ctx = ToolInvocationContext(
        run_id="", tool_call_id="stuck-1", tenant_id=str(account.tenant_id), actor_id=str(account.pk)
    )
    row = invocation_claim(ctx=ctx, tool_id="core__wait", args_sha256=args_digest({"ms": 0}), lease_s=lease_s)
    assert row is not None
    return row


def test_a_repeat_takes_over_an_expired_claim_and_runs_once(caller):
    account, key = caller
    stuck = crashed_claim(account, lease_s=0.05)
    time.sleep(0.1)

    response = api_client(key).post(URL, BODY, format="json")
    again = api_client(key).post(URL, BODY, format="json")

    assert (response.status_code, response.json()["value"]) == (200, {"waited_ms": 0})
    assert again.status_code == 200
    stuck.refresh_from_db()
    assert (stuck.state, stuck.attempt, stuck.ok, stuck.executed) == ("done", 1, True, True)
    assert ToolInvocation.objects.filter(tool_call_id="stuck-1", executed=True).count() == 1
    assert ToolInvocation.objects.filter(tool_call_id="stuck-1", decision=Decision.REPLAYED).count() == 1


def test_a_repeat_of_a_live_claim_answers_409_within_its_own_budget(caller):
    account, key = caller
    crashed_claim(account, lease_s=60)

    started = time.monotonic()
    response = api_client(key).post(URL, BODY, format="json")
    waited = time.monotonic() - started

    assert (response.status_code, response.json()["error_code"]) == (409, "idempotency_conflict")
    assert response.json()["safe_message"] == "a call with this tool_call_id is still running; repeat it later"
    assert 55 <= int(response["Retry-After"]) <= 60
    assert 0.3 <= waited < 2.0  # the policy's 300 ms runtime budget, not the holder's 60 s lease


def test_a_pending_claim_is_visible_as_pending(caller):
    account, key = caller
    crashed_claim(account, lease_s=60)

    detail = api_client(key).get("/api/v1/invocations/stuck-1")
    listing = api_client(key).get("/api/v1/invocations")

    assert (detail.status_code, detail.json()["state"], detail.json()["ended_at"]) == (200, "pending", None)
    assert [row["state"] for row in listing.json()["results"]] == ["pending"]


def test_the_dead_attempts_late_write_cannot_overwrite_the_attempt_that_took_over(caller):
    account, _key = caller
    stuck = crashed_claim(account, lease_s=0.01)
    dead_ref = claim_ref(stuck)
    time.sleep(0.05)
    taken = invocation_take_over(row=stuck, lease_s=60)
    assert taken is not None
    assert claim_ref(taken) != dead_ref
    second_taker = invocation_take_over(row=ToolInvocation.objects.get(pk=stuck.pk), lease_s=60)

    now = timezone.now()
    invocation_record(
        ToolInvocationRecord(
            tool_call_id="stuck-1",
            tool_id="core__wait",
            ok=False,
            error_code=ErrorCode.TIMEOUT,
            safe_message="late",
            started_at=now,
            ended_at=now,
            context=ToolInvocationContext(
                run_id="", tool_call_id="stuck-1", tenant_id=str(account.tenant_id), actor_id=str(account.pk)
            ),
            decision=Decision.ALLOW,
            executed=True,
            audit_ref=dead_ref,
        )
    )

    assert second_taker is None  # the lease is live again: nobody else takes it
    stuck.refresh_from_db()
    assert (stuck.state, stuck.attempt) == ("pending", 1)
    late = ToolInvocation.objects.exclude(pk=stuck.pk).get()
    assert (late.executed, late.error_code, late.safe_message) == (False, "timeout", LEASE_LOST_MESSAGE)
