"""Twenty parallel identical calls with one tool_call_id run the tool once (PostgreSQL).

Real threads, each with its own database connection, race for the claim; the
partial unique index decides, and the losers replay the winner's recorded answer.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from config.runtime import bind_tools
from connections_app.adapters import DatabaseGrantStore
from policies_app.adapters import CachedGovernanceView, CacheRateLimiter, DatabasePolicyDecider
from policies_app.governance import governance_bump, governance_cache
from runner.contracts import ToolArgs, ToolContract, ToolDefinition, ToolOutput
from runner.defaults import LoggingEventSink, NoConnections, SystemClock
from runner.pipeline import ToolRunner, default_stages
from runner.schema import to_tool_spec
from runner.types import ToolEffect, ToolInvocationContext
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tools_app.adapters import CatalogToolSource, DatabaseAuditSink, DatabaseIdempotencyStore
from tools_app.models import Tool, ToolInvocation
from tools_app.services import tool_sync

PARALLEL = 20
runs = {"count": 0}
runs_lock = threading.Lock()


class CountArgs(ToolArgs):
    n: int


class CountOut(ToolOutput):
    run: int


async def _count(args: CountArgs, ctx, caps) -> CountOut:
    with runs_lock:
        runs["count"] += 1
        run = runs["count"]
    return CountOut(run=run)


COUNTER = ToolDefinition(
    ToolContract(
        name="test__counter",
        description="counts its runs",
        input_model=CountArgs,
        output_model=CountOut,
        effect=ToolEffect.STATE_CHANGE,
        redaction_allowlist=("run",),
    ),
    _count,
)


@pytest.mark.django_db(transaction=True)
def test_parallel_identical_calls_run_the_tool_once(postgres_required):
    # given
    account, _key = service_account_with_key(TenantFactory(slug="race"))
    tool_sync(specs=[to_tool_spec(COUNTER.contract)])
    Tool.objects.filter(pk="test__counter").update(is_enabled=True)
    ToolPolicyFactory(tenant=account.tenant, allowed_tools=["test__counter"])
    governance_bump()
    clock = SystemClock()
    runner = ToolRunner(
        default_stages(
            governance=CachedGovernanceView(),
            source=CatalogToolSource(bind_tools({"test__counter": COUNTER}, {})),
            policy=DatabasePolicyDecider(),
            limiter=CacheRateLimiter(api_rate_per_second=0),
            grants=DatabaseGrantStore(),
            broker=NoConnections(),
            audit=DatabaseAuditSink(),
            events=LoggingEventSink(),
            clock=clock,
            idempotency=DatabaseIdempotencyStore(),
        ),
        clock,
    )
    ctx = ToolInvocationContext(
        run_id="r", tool_call_id="call-race", tenant_id=str(account.tenant_id), actor_id=str(account.id)
    )
    start = threading.Barrier(PARALLEL)

    def call(_: int):
        try:
            governance_cache.refresh()
            start.wait()
            return runner.exec("test__counter", {"n": 1}, ctx)
        finally:
            connection.close()

    # when
    with ThreadPoolExecutor(PARALLEL) as pool:
        results = list(pool.map(call, range(PARALLEL)))

    # then
    assert runs["count"] == 1
    assert [r.ok for r in results] == [True] * PARALLEL
    assert {r.value["run"] for r in results} == {1}
    rows = ToolInvocation.objects.filter(tool_call_id="call-race")
    assert rows.filter(executed=True).count() == 1
    assert rows.filter(decision="replayed").count() == PARALLEL - 1
