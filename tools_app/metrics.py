"""Prometheus series of tool calls, pipeline stages and upstream MCP servers.

Counted in the process where the call happens, as it happens: an increment is
a few memory writes (an mmap'd file per process under gunicorn, see
config/metrics.py), never a round trip, so the exec hot path stays as fast
as it was. Labels carry tool ids, tenant ids, outcomes and error codes only:
never args, values or anything a credential could reach.

Cardinality is bounded per process: the first `max_tools` tool ids and
`max_tenants` tenant ids seen get a label of their own, later ones share
`other` (`TOOLGATE_METRICS_MAX_TOOLS`, `TOOLGATE_METRICS_MAX_TENANTS`; a
tenant cap of 0 drops the tenant from the labels: `all`). A tool id nobody
registered (a caller may send any string) is always `unknown`.
"""

from __future__ import annotations

import threading

from prometheus_client import Counter, Histogram

from runner.pipeline import Call
from runner.types import Decision, ErrorCode, ToolExecResult

OTHER = "other"
UNKNOWN_TOOL = "unknown"
ALL_TENANTS = "all"

# Refusals: the pipeline said no before (or instead of) running the tool.
REFUSALS = frozenset(
    {
        ErrorCode.UNAVAILABLE,
        ErrorCode.POLICY_DENIED,
        ErrorCode.APPROVAL_REQUIRED,
        ErrorCode.RATE_LIMITED,
        ErrorCode.IDEMPOTENCY_CONFLICT,
        ErrorCode.VALIDATION,
    }
)

CALL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
STAGE_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 2.5, 10.0, 60.0)

TOOL_CALLS = Counter(
    "toolgate_tool_calls",
    "Tool calls by tool, tenant, outcome (ok, denied, error, tool_error, replayed) and error code ('' when ok).",
    ["tool", "tenant", "outcome", "error_code"],
)
TOOL_CALL_SECONDS = Histogram(
    "toolgate_tool_call_duration_seconds",
    "Time a tool call spent in the pipeline, audit write included, by tool.",
    ["tool"],
    buckets=CALL_BUCKETS,
)
STAGE_SECONDS = Histogram(
    "toolgate_pipeline_stage_duration_seconds",
    "Time each pipeline stage spent by itself (the stages it handed the call to excluded).",
    ["stage"],
    buckets=STAGE_BUCKETS,
)
MCP_UPSTREAM_CALLS = Counter(
    "toolgate_mcp_upstream_calls",
    "Calls to upstream MCP servers by server slug and outcome (ok, tool_error, unreachable, timeout, ...).",
    ["server", "outcome"],
)
MCP_UPSTREAM_SECONDS = Histogram(
    "toolgate_mcp_upstream_call_duration_seconds",
    "Round trip of a call to an upstream MCP server, by server slug.",
    ["server"],
    buckets=CALL_BUCKETS,
)
MCP_DISCOVERY = Counter(
    "toolgate_mcp_discovery",
    "Discovery runs (tools/list) of upstream MCP servers by server slug and outcome (ok, changed, failed, ...).",
    ["server", "outcome"],
)


class LabelCap:
    """The first `limit` distinct values keep their own label; the rest become `other`.

    Per process, so a deployment's series are bounded by processes × limit.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        if value in self._seen:
            return value
        with self._lock:
            if len(self._seen) < self._limit:
                self._seen.add(value)
                return value
        return OTHER


def call_outcome(result: ToolExecResult, decision: Decision) -> str:
    """ok, replayed, denied (the pipeline refused), tool_error (the tool answered an error for the model)
    or error (it ran, or tried to, and failed)."""
    if decision is Decision.REPLAYED:
        return "replayed"
    if result.ok:
        return "ok"
    if result.error_code is ErrorCode.TOOL_ERROR:
        return "tool_error"
    return "denied" if result.error_code in REFUSALS else "error"


class PrometheusCallObserver:
    """The runner's CallObserver (runner/observe.py) counting calls and timing stages."""

    def __init__(self, *, max_tools: int, max_tenants: int) -> None:
        self._tool = LabelCap(max_tools)
        self._tenant = LabelCap(max_tenants) if max_tenants > 0 else None
        self._stage_histograms: dict[str, Histogram] = {}  # `labels()` takes a lock; a stage's child never changes

    def tool_label(self, call: Call) -> str:
        if call.tool is None:  # the lookup failed: the id is whatever the caller sent
            return UNKNOWN_TOOL
        return self._tool(call.tool_id)

    def tenant_label(self, tenant_id: str) -> str:
        return self._tenant(tenant_id) if self._tenant is not None else ALL_TENANTS

    def call_started(self, call: Call) -> None:
        return None

    def stage_finished(self, stage: str, seconds: float) -> None:
        histogram = self._stage_histograms.get(stage)
        if histogram is None:
            histogram = self._stage_histograms[stage] = STAGE_SECONDS.labels(stage)
        histogram.observe(seconds)

    def call_finished(self, call: Call, result: ToolExecResult, seconds: float) -> None:
        tool = self.tool_label(call)
        error_code = result.error_code.value if result.error_code is not None else ""
        outcome = call_outcome(result, call.decision)
        TOOL_CALLS.labels(tool, self.tenant_label(call.ctx.tenant_id), outcome, error_code).inc()
        TOOL_CALL_SECONDS.labels(tool).observe(seconds)


def mcp_upstream_call_observed(*, server: str, outcome: str, seconds: float) -> None:
    """The hook for the upstream-MCP tool source: one call to `server` ended with `outcome`."""
    MCP_UPSTREAM_CALLS.labels(server, outcome).inc()
    MCP_UPSTREAM_SECONDS.labels(server).observe(seconds)


def mcp_discovery_observed(*, server: str, outcome: str) -> None:
    """The hook for MCP discovery: one `tools/list` run of `server` ended with `outcome`."""
    MCP_DISCOVERY.labels(server, outcome).inc()
