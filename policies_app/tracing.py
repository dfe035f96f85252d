"""Trace context for outbound HTTP that the httpx instrumentation cannot see.

config/tracing.py instruments httpx (the runner's HTTP capability: GitHub).
Authlib and the MCP SDK speak httpx2, a fork the instrumentation does not
patch: their clients add `trace_context_injected` as a request event hook,
so the provider or upstream receives the W3C `traceparent` of the span
around the call. With tracing off (no provider configured) nothing is
injected and the hook costs a function call.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import propagate, trace

tracer = trace.get_tracer("toolgate")


def trace_context_injected(request: Any) -> None:
    """httpx2 request event hook: the current span's W3C trace context goes out with the request."""
    propagate.inject(request.headers)
