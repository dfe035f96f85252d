"""Per-tool metrics: calls by tool, tenant, outcome and error code; latency per tool and per stage.

Counters are process-wide and other tests move them too, so each test reads
the series before and after its own calls and asserts the exact difference.
"""

from __future__ import annotations

import os
import secrets

import pytest
from django.test import Client
from prometheus_client import CollectorRegistry, multiprocess

from config.runtime import runtime
from gateway.upstream.metrics import mcp_discovery_observed, mcp_upstream_call_observed
from runner.observe import stage_name
from runner.pipeline import AuditStage, Call, ExecuteStage
from runner.types import Decision, ErrorCode, ToolExecResult, ToolInvocationContext
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import api_client, enable_tools
from tests.support.metrics import sample
from tools_app.metrics import OTHER, STAGE_METRIC, LabelCap, PrometheusCallObserver, StageFile, call_outcome

pytestmark = pytest.mark.django_db

URL = "/api/v1/tools/exec"
STAGES = (
    "audit",
    "fairness",
    "lookup",
    "policy",
    "authorization",
    "connectiongate",
    "idempotency",
    "budget",
    "validateinput",
    "approval",
    "broker",
    "startevent",
    "resultsize",
    "redact",
    "validateoutput",
    "execute",
)


@pytest.fixture
def caller():
    """A tenant's key, and a runtime of its own: the process's runtime labels only its first 100 tenants
    (LabelCap), and a worker that ran many tests before this one has seen more."""
    enable_tools("core__get_current_time", "core__wait")
    tenant = TenantFactory(slug="acme")
    _account, key = service_account_with_key(tenant, name="agent")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["core__get_current_time"])
    runtime.cache_clear()
    yield str(tenant.pk), key
    runtime.cache_clear()


def calls(tool: str, tenant: str, outcome: str, error_code: str = "") -> float:
    return sample("toolgate_tool_calls_total", tool=tool, tenant=tenant, outcome=outcome, error_code=error_code)


def test_calls_are_counted_by_tool_tenant_outcome_and_error_code(caller):
    tenant, key = caller
    before = {
        "ok": calls("core__get_current_time", tenant, "ok"),
        "denied": calls("core__wait", tenant, "denied", "policy_denied"),
        "invalid": calls("core__get_current_time", tenant, "denied", "validation"),
        "unknown": calls("unknown", tenant, "denied", "unavailable"),
        "latency": sample("toolgate_tool_call_duration_seconds_count", tool="core__get_current_time"),
    }
    client = api_client(key)

    for _ in range(3):
        assert client.post(URL, {"tool_id": "core__get_current_time", "args": {}}, format="json").status_code == 200
    assert client.post(URL, {"tool_id": "core__wait", "args": {"ms": 0}}, format="json").status_code == 403
    assert client.post(URL, {"tool_id": "core__get_current_time", "args": {"x": 1}}, format="json").status_code == 422
    assert client.post(URL, {"tool_id": "made_up__tool", "args": {}}, format="json").status_code == 404

    assert calls("core__get_current_time", tenant, "ok") - before["ok"] == 3
    assert calls("core__wait", tenant, "denied", "policy_denied") - before["denied"] == 1
    assert calls("core__get_current_time", tenant, "denied", "validation") - before["invalid"] == 1
    # a tool id nobody registered never becomes a label of its own
    assert calls("unknown", tenant, "denied", "unavailable") - before["unknown"] == 1
    assert (
        sample(
            "toolgate_tool_calls_total", tool="made_up__tool", tenant=tenant, outcome="denied", error_code="unavailable"
        )
        == 0
    )
    assert sample("toolgate_tool_call_duration_seconds_count", tool="core__get_current_time") - before["latency"] == 4


def test_every_stage_of_a_call_that_runs_is_timed(caller):
    _tenant, key = caller
    before = {stage: sample("toolgate_pipeline_stage_duration_seconds_count", stage=stage) for stage in STAGES}

    response = api_client(key).post(
        URL, {"tool_id": "core__get_current_time", "args": {}, "tool_call_id": "call-timed"}, format="json"
    )

    assert response.status_code == 200
    after = {stage: sample("toolgate_pipeline_stage_duration_seconds_count", stage=stage) for stage in STAGES}
    assert {stage: after[stage] - before[stage] for stage in STAGES} == dict.fromkeys(STAGES, 1)


def test_stage_names_are_the_class_names_without_stage():
    assert stage_name(AuditStage(None, None, None)) == "audit"  # type: ignore[arg-type]
    assert stage_name(ExecuteStage(clock=None)) == "execute"  # type: ignore[arg-type]


def test_args_and_values_never_reach_the_metrics_page(caller):
    _tenant, key = caller
    marker = f"canary-{secrets.token_hex(8)}"
    api_client(key).post(URL, {"tool_id": "core__get_current_time", "args": {"timezone": marker}}, format="json")
    api_client(key).post(URL, {"tool_id": marker, "args": {"a": marker}, "run_id": marker}, format="json")

    page = Client().get("/metrics")

    assert page.status_code == 200
    assert "toolgate_tool_calls_total" in page.content.decode()
    assert marker not in page.content.decode()


def test_tool_and_tenant_labels_are_capped():
    cap = LabelCap(2)
    assert [cap(value) for value in ("a", "b", "c", "a", "d", "b")] == ["a", "b", OTHER, "a", OTHER, "b"]


def _call(tenant: str, tool_id: str) -> Call:
    call = Call(
        tool_id=tool_id,
        raw_args={},
        ctx=ToolInvocationContext(run_id="", tool_call_id="c", tenant_id=tenant, actor_id="a"),
        started_at=None,  # type: ignore[arg-type]
    )
    call.tool = object()  # type: ignore[assignment] - found in the catalog
    return call


def test_a_tenant_cap_of_zero_drops_the_tenant_and_new_tools_past_the_cap_share_other():
    observer = PrometheusCallObserver(max_tools=1, max_tenants=0)
    result = ToolExecResult(tool_call_id="c", tool_id="x", ok=False, error_code=ErrorCode.TIMEOUT)
    before_other = calls(OTHER, "all", "error", "timeout")
    before_first = calls("cap__first", "all", "error", "timeout")

    for tool_id in ("cap__first", "cap__second", "cap__third"):
        observer.call_finished(_call(f"tenant-{tool_id}", tool_id), result, 0.01)

    assert calls("cap__first", "all", "error", "timeout") - before_first == 1
    assert calls(OTHER, "all", "error", "timeout") - before_other == 2
    assert calls("cap__second", "all", "error", "timeout") == 0


def test_the_mcp_hooks_count_upstream_calls_and_discovery():
    before_calls = sample("toolgate_mcp_upstream_calls_total", server="docs", outcome="unreachable")
    before_seconds = sample("toolgate_mcp_upstream_call_duration_seconds_count", server="docs")
    before_discovery = sample("toolgate_mcp_discovery_total", server="docs", outcome="changed")

    mcp_upstream_call_observed(server="docs", outcome="unreachable", seconds=0.2)
    mcp_discovery_observed(server="docs", outcome="changed")

    assert sample("toolgate_mcp_upstream_calls_total", server="docs", outcome="unreachable") - before_calls == 1
    assert sample("toolgate_mcp_upstream_call_duration_seconds_count", server="docs") - before_seconds == 1
    assert sample("toolgate_mcp_discovery_total", server="docs", outcome="changed") - before_discovery == 1


def test_a_tools_own_error_for_the_model_is_counted_as_tool_error_not_as_a_failure():
    answered = ToolExecResult(tool_call_id="c", tool_id="t", ok=False, error_code=ErrorCode.TOOL_ERROR)
    failed = ToolExecResult(tool_call_id="c", tool_id="t", ok=False, error_code=ErrorCode.EXECUTION)

    assert call_outcome(answered, Decision.ALLOW) == "tool_error"
    assert call_outcome(failed, Decision.ALLOW) == "error"
    assert call_outcome(answered, Decision.REPLAYED) == "replayed"


# --- stage timings under gunicorn (multiprocess files) ---------------------------------------


def _collected_stage_series(directory) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(directory))
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in registry.collect()
        if family.name == STAGE_METRIC
        for sample in family.samples
    }


def test_a_calls_stage_timings_are_scraped_as_the_histogram_prometheus_client_would_show(tmp_path):
    stage_file = StageFile(str(tmp_path))

    stage_file.observe([("execute", 0.00003), ("audit", 0.002)])
    stage_file.observe([("execute", 0.0004), ("audit", 100.0)])

    series = _collected_stage_series(tmp_path)
    execute = {
        dict(labels)["le"]: value
        for (name, labels), value in series.items()
        if name.endswith("_bucket") and ("stage", "execute") in labels
    }
    assert (execute["5e-05"], execute["0.0001"], execute["0.0005"], execute["+Inf"]) == (1, 1, 2, 2)
    assert series[(f"{STAGE_METRIC}_count", (("stage", "execute"),))] == 2
    assert series[(f"{STAGE_METRIC}_sum", (("stage", "execute"),))] == pytest.approx(0.00043)
    assert series[(f"{STAGE_METRIC}_bucket", (("le", "60.0"), ("stage", "audit")))] == 1  # 100 s: only +Inf
    assert series[(f"{STAGE_METRIC}_bucket", (("le", "+Inf"), ("stage", "audit")))] == 2
    assert [path.name for path in tmp_path.iterdir()] == [f"histogram_stages-{os.getpid()}.db"]


def test_a_forked_child_writes_its_stage_timings_to_its_own_file(tmp_path):
    stage_file = StageFile(str(tmp_path))
    stage_file.observe([("execute", 0.001)])

    child = os.fork()
    if child == 0:  # the child: one call of its own, then gone without running the parent's cleanups
        stage_file.observe([("execute", 0.001)])
        os._exit(0)
    os.waitpid(child, 0)

    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        f"histogram_stages-{pid}.db" for pid in (os.getpid(), child)
    )
    assert _collected_stage_series(tmp_path)[(f"{STAGE_METRIC}_count", (("stage", "execute"),))] == 2
