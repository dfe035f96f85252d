"""Trace context for outbound HTTP of the clients OpenTelemetry does not instrument.

config/tracing.py instruments one httpx2 client only (the runner's HTTP
capability: GitHub). Authlib's, the MCP SDK's and the webhook deliveries'
clients add `trace_context_injected` as a request event hook,
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
