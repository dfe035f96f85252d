"""Prometheus series of tool calls and pipeline stages (upstream MCP servers: gateway/upstream/metrics.py).

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

import bisect
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from prometheus_client import Counter, Histogram
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.utils import INF, floatToGoString

from runner.pipeline import Call
from runner.types import Decision, ErrorCode, ToolExecResult
from tools_app import prometheus_internals

_Metric = TypeVar("_Metric", bound=MetricWrapperBase)
# A label set's child never changes, and `labels()` takes a lock and builds its key on every call.
_children: dict[tuple[MetricWrapperBase, tuple[str, ...]], MetricWrapperBase] = {}


def labelled(metric: _Metric, *values: str) -> _Metric:
    """`metric.labels(*values)`, looked up once per label set (hot paths count every call)."""
    key = (metric, values)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(*values)
    return child  # type: ignore[return-value]


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
STAGE_METRIC = "toolgate_pipeline_stage_duration_seconds"
STAGE_HELP = "Time each pipeline stage spent by itself (the stages it handed the call to excluded)."
STAGE_SECONDS = Histogram(STAGE_METRIC, STAGE_HELP, ["stage"], buckets=STAGE_BUCKETS)


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


class StageFile:
    """This process's stage timings in a multiprocess file of their own, all of a call's stages under one lock.

    Under gunicorn, prometheus_client writes each observation through its
    multiprocess value: a lock, a `getpid()` and an mmap write for the sum and
    again for the bucket, so the nineteen stages of a call cost 38 of each (a
    twentieth of an exec call's CPU). This writes the same series, in the
    library's file format and keys, to `histogram_stages-<pid>.db` beside the
    library's files: the scrape (config/metrics.py) sums every `histogram_*`
    file of the directory, so the page shows the same histogram. Each value is
    one double stored in place (tools_app/prometheus_internals.py). A forked
    child opens its own file, as the library's values do.
    """

    _UPPER_BOUNDS = (*STAGE_BUCKETS, INF)

    def __init__(self, directory: str) -> None:
        self._directory = directory
        self._open()
        os.register_at_fork(after_in_child=self._open)

    def _open(self) -> None:
        self._file = MmapedDict(str(Path(self._directory) / f"histogram_stages-{os.getpid()}.db"))
        self._doubles = prometheus_internals.doubles(self._file)
        # stage -> (index of its sum, indexes of its buckets), among the file's doubles
        self._series: dict[str, tuple[int, list[int]]] = {}
        self._lock = threading.Lock()  # anew in a forked child: another thread may have held it at the fork

    def _stage_series(self, stage: str) -> tuple[int, list[int]]:
        sum_key = mmap_key(STAGE_METRIC, f"{STAGE_METRIC}_sum", ["stage"], [stage], STAGE_HELP)
        bucket_keys = [
            mmap_key(
                STAGE_METRIC, f"{STAGE_METRIC}_bucket", ["stage", "le"], [stage, floatToGoString(bound)], STAGE_HELP
            )
            for bound in self._UPPER_BOUNDS
        ]
        series = (
            prometheus_internals.value_index(self._file, sum_key),
            [prometheus_internals.value_index(self._file, key) for key in bucket_keys],
        )
        self._doubles = prometheus_internals.doubles(self._file)  # the keys added may have grown the map
        return series

    def observe(self, times: Sequence[tuple[str, float]]) -> None:
        with self._lock:
            doubles = self._doubles
            for stage, seconds in times:
                series = self._series.get(stage)
                if series is None:
                    series = self._series[stage] = self._stage_series(stage)
                    doubles = self._doubles
                total, buckets = series
                doubles[total] += seconds
                doubles[buckets[bisect.bisect_left(self._UPPER_BOUNDS, seconds)]] += 1.0


class PrometheusCallObserver:
    """The runner's CallObserver (runner/observe.py) counting calls and timing stages."""

    def __init__(self, *, max_tools: int, max_tenants: int, multiprocess_directory: str | None = None) -> None:
        self._tool = LabelCap(max_tools)
        self._tenant = LabelCap(max_tenants) if max_tenants > 0 else None
        self._stage_file = StageFile(multiprocess_directory) if multiprocess_directory else None

    def tool_label(self, call: Call) -> str:
        if call.tool is None:  # the lookup failed: the id is whatever the caller sent
            return UNKNOWN_TOOL
        return self._tool(call.tool_id)

    def tenant_label(self, tenant_id: str) -> str:
        return self._tenant(tenant_id) if self._tenant is not None else ALL_TENANTS

    def call_started(self, call: Call) -> None:
        return None

    def stages_finished(self, times: Sequence[tuple[str, float]]) -> None:
        if self._stage_file is not None:
            self._stage_file.observe(times)
            return
        for stage, seconds in times:
            labelled(STAGE_SECONDS, stage).observe(seconds)

    def call_finished(self, call: Call, result: ToolExecResult, seconds: float) -> None:
        tool = self.tool_label(call)
        error_code = result.error_code.value if result.error_code is not None else ""
        labels = (tool, self.tenant_label(call.ctx.tenant_id), call_outcome(result, call.decision), error_code)
        labelled(TOOL_CALLS, *labels).inc()
        labelled(TOOL_CALL_SECONDS, tool).observe(seconds)
