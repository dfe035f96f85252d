"""OpenTelemetry tracing: off unless the standard `OTEL_*` variables ask for it.

On when `OTEL_TRACES_EXPORTER` names an exporter other than `none`, or an
OTLP endpoint is set (`OTEL_EXPORTER_OTLP_ENDPOINT`,
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), and `OTEL_SDK_DISABLED` is not true.
Then spans go to the OTLP/HTTP exporter in batches (the SDK reads the
endpoint, headers, sampler, `OTEL_SERVICE_NAME` and resource attributes from
the environment itself), and are made for:

- each request (Django instrumentation) and each pipeline stage, nested like
  the chain (`StageTracer` below): tool id, tenant, decision, error code;
- each Celery task, continuing the trace of whoever queued it, and each
  publish (Celery instrumentation: W3C trace context in the task headers);
- each outbound HTTP request of the runner's capability (GitHub), with W3C
  `traceparent`: OpenTelemetry's httpx2 instrumentation of that one client
  (`client_traced`, handed to it by config/runtime.py), not of httpx2 as a
  whole; the OAuth, MCP and webhook clients inject the trace context
  themselves (policies_app/tracing.py).

Off, nothing is instrumented and the runner is built without the tracer: a
call pays nothing for tracing. Span attributes are ids and outcomes only,
never args, values, headers or credentials.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.instrumentation.django import DjangoInstrumentor
from opentelemetry.instrumentation.httpx import HTTPX2ClientInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanProcessor
from opentelemetry.trace import Status, StatusCode

from runner.observe import OnResult
from runner.pipeline import Call
from runner.types import ToolExecResult
from tools_app.metrics import REFUSALS

DEFAULT_SERVICE_NAME = "toolgate"
TRACER_NAME = "toolgate.runner"
_configured: TracerProvider | None = None


def tracing_requested(environ: Mapping[str, str] = os.environ) -> bool:
    """Do the standard OTEL_* variables ask for traces?"""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def tracing_configure(*, processor: SpanProcessor | None = None) -> TracerProvider | None:
    """Install the tracer provider and the instrumentations, once per process; None when tracing is off.

    `processor` replaces the OTLP batch exporter (tests pass an in-memory one).
    """
    global _configured  # noqa: PLW0603 - one provider per process, as OpenTelemetry's own global is
    if _configured is not None:
        return _configured
    if processor is None and not tracing_requested():
        return None
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", DEFAULT_SERVICE_NAME)})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(processor or BatchSpanProcessor(_exporter()))
    trace.set_tracer_provider(provider)
    DjangoInstrumentor().instrument(tracer_provider=provider)
    CeleryInstrumentor().instrument(tracer_provider=provider)
    _configured = provider
    return provider


def client_traced(client: Any) -> None:
    """Trace one httpx2 client's requests (a CLIENT span each, `traceparent` sent) with the configured provider."""
    HTTPX2ClientInstrumentor.instrument_client(client, tracer_provider=_configured)


def tracing_provider() -> TracerProvider | None:
    """This process's provider when tracing is on (the composition root builds the stage tracer from it)."""
    return _configured


def tracing_reset() -> None:
    """Undo `tracing_configure`'s instrumentations (tests that turned tracing on turn it off again)."""
    global _configured  # noqa: PLW0603
    if _configured is None:
        return
    DjangoInstrumentor().uninstrument()
    CeleryInstrumentor().uninstrument()
    _configured = None


def _exporter() -> SpanExporter:
    return OTLPSpanExporter()  # endpoint, headers, timeout and compression from OTEL_EXPORTER_OTLP_*


class OtelStageTracer:
    """The runner's StageTracer (runner/observe.py): one span per stage, nested like the chain."""

    def __init__(self, provider: trace.TracerProvider) -> None:
        self._tracer = provider.get_tracer(TRACER_NAME)

    @contextmanager
    def stage(self, stage: str, call: Call) -> Iterator[OnResult]:
        with self._tracer.start_as_current_span(
            f"toolgate.stage {stage}",
            attributes={"toolgate.stage": stage, "toolgate.tenant_id": call.ctx.tenant_id},
        ) as span:

            def on_result(result: ToolExecResult) -> None:
                span.set_attribute("toolgate.tool_id", call.tool_id if call.tool is not None else "unknown")
                span.set_attribute("toolgate.decision", call.decision.value)
                span.set_attribute("toolgate.ok", result.ok)
                if result.error_code is not None:
                    span.set_attribute("toolgate.error_code", result.error_code.value)
                    if result.error_code not in REFUSALS:  # a refusal is the pipeline working, not an error
                        span.set_status(Status(StatusCode.ERROR, result.error_code.value))

            yield on_result
