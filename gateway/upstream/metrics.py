"""Prometheus series of upstream MCP servers: calls by server and outcome, their round trips, discovery runs.

Counted in the process where the call or the run happens, like the tool calls'
series (tools_app/metrics.py); labels carry server slugs and outcomes only.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from tools_app.metrics import CALL_BUCKETS, labelled

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


def mcp_upstream_call_observed(*, server: str, outcome: str, seconds: float) -> None:
    """The hook for the upstream-MCP tool source: one call to `server` ended with `outcome`."""
    labelled(MCP_UPSTREAM_CALLS, server, outcome).inc()
    labelled(MCP_UPSTREAM_SECONDS, server).observe(seconds)


def mcp_discovery_observed(*, server: str, outcome: str) -> None:
    """The hook for MCP discovery: one `tools/list` run of `server` ended with `outcome`."""
    MCP_DISCOVERY.labels(server, outcome).inc()
