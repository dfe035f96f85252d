"""Tracing, exported to memory: the request, each pipeline stage, the outbound call and the task publish.

Turned on for these tests only (`tracing_configure` with an in-memory
processor instead of OTLP), then reset: the rest of the suite runs with
tracing off, as a deployment without OTEL_* variables does.
"""

from __future__ import annotations

import json
import secrets
from datetime import timedelta

import pytest
from django.utils import timezone
from kombu import Connection as BrokerConnection
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from config import tracing
from config.runtime import runtime
from connections_app.models import OAuthProvider
from connections_app.oauth import oauth_connection_store
from connections_app.refresh import RefreshOutcome, connection_refresh
from connections_app.tasks import refresh_connection
from policies_app.tracing import tracer
from runner.observe import TracedStage
from tests.factories import ConnectionFactory, GrantFactory, TenantFactory
from tests.support.fake_oauth import FakeOAuthProvider

pytestmark = pytest.mark.django_db

USER = {"login": "octocat", "id": 1, "name": "Octo", "html_url": "https://github.com/octocat"}
EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans():
    tracing.tracing_reset()
    tracing.tracing_configure(processor=SimpleSpanProcessor(EXPORTER))
    runtime.cache_clear()
    EXPORTER.clear()
    yield EXPORTER
    tracing.tracing_reset()
    runtime.cache_clear()
    EXPORTER.clear()


@pytest.mark.parametrize(
    ("environ", "requested"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, False),
    ],
)
def test_tracing_is_off_unless_the_standard_variables_ask_for_it(environ, requested):
    assert tracing.tracing_requested(environ) is requested


def test_off_by_default_the_runner_has_no_tracer():
    tracing.tracing_reset()
    runtime.cache_clear()
    assert tracing.tracing_provider() is None
    assert tracing.tracing_configure() is None  # this test process sets no OTEL_* variable
    stages = chain_of(runtime().runner)
    assert len(stages) == 19
    assert not any(isinstance(stage.inner, TracedStage) for stage in stages)
    runtime.cache_clear()


def test_on_every_stage_is_traced(spans):
    stages = chain_of(runtime().runner)
    assert len(stages) == 19
    assert all(isinstance(stage.inner, TracedStage) for stage in stages)


def chain_of(runner) -> list:
    """The stages a ToolRunner composed, outermost first (read from its handlers' closures)."""
    stages, handler = [], runner._handler
    while handler.__closure__:
        cells = dict(
            zip(handler.__code__.co_freevars, (cell.cell_contents for cell in handler.__closure__), strict=True)
        )
        stages.append(cells["stage"])
        handler = cells["proceed"]
    return stages


def test_a_github_call_is_one_trace_from_request_to_upstream(spans, github, tenant, caller, call_tool):
    github.route("GET", "/user", json=USER)
    secret = f"canary-{secrets.token_hex(10)}"
    connection = ConnectionFactory(tenant=tenant, credentials={"api_key": secret})
    grant = GrantFactory(service_account=caller[0], connections=[connection])

    response = call_tool(connection, grant, tool_call_id="call-traced")

    assert response.status_code == 200
    finished = spans.get_finished_spans()
    (server,) = [span for span in finished if span.kind is SpanKind.SERVER]
    stages = {span.attributes["toolgate.stage"]: span for span in finished if span.name.startswith("toolgate.stage")}
    assert list(stages) == [  # finished innermost first
        "execute",
        "validateoutput",
        "redact",
        "guard",
        "resultsize",
        "startevent",
        "broker",
        "approval",
        "rule",
        "validateinput",
        "budget",
        "idempotency",
        "connectiongate",
        "authorization",
        "policy",
        "lookup",
        "fairness",
        "freshness",
        "audit",
    ]
    # nested like the chain: audit under the request, each stage under the one before it
    assert stages["audit"].parent.span_id == server.context.span_id
    assert stages["execute"].parent.span_id == stages["validateoutput"].context.span_id
    assert {span.context.trace_id for span in finished} == {server.context.trace_id}
    assert dict(stages["audit"].attributes) == {
        "toolgate.stage": "audit",
        "toolgate.tenant_id": str(tenant.pk),
        "toolgate.tool_id": "github__get_user",
        "toolgate.decision": "allow",
        "toolgate.ok": True,
    }
    # the outbound request is a child of the execute stage, and GitHub got the trace context
    (client,) = [span for span in finished if span.kind is SpanKind.CLIENT]
    assert client.parent.span_id == stages["execute"].context.span_id
    traceparent = github.requests[-1].headers["traceparent"]
    assert traceparent.split("-")[1] == format(server.context.trace_id, "032x")
    assert traceparent.split("-")[2] == format(client.context.span_id, "016x")
    # ids and outcomes only: no credential, no args, no value in any span
    exported = json.dumps([dict(span.attributes) for span in finished] + [span.name for span in finished])
    assert secret not in exported
    assert "octocat" not in exported


def test_a_refused_call_records_its_error_code_on_the_stages_it_reached(spans, tenant, caller, call_tool):
    response = call_tool("not-a-connection", "not-a-grant")

    assert response.status_code == 422
    stages = {
        span.attributes["toolgate.stage"]: span
        for span in spans.get_finished_spans()
        if span.name.startswith("toolgate.stage")
    }
    assert set(stages) == {"audit", "freshness", "fairness", "lookup", "policy", "authorization", "connectiongate"}
    assert stages["audit"].attributes["toolgate.error_code"] == "validation"
    assert stages["audit"].status.is_ok  # a refusal is not an error of the service


def test_a_task_published_inside_a_span_carries_its_trace_context(spans):
    with BrokerConnection("memory://") as broker, tracer.start_as_current_span("queueing") as parent:
        refresh_connection.apply_async(args=["c-1"], connection=broker, queue="traced")
        message = broker.SimpleQueue("traced").get(timeout=1)

    traceparent = message.headers["traceparent"]
    assert traceparent.split("-")[1] == format(parent.get_span_context().trace_id, "032x")
    (publish,) = [span for span in spans.get_finished_spans() if span.kind is SpanKind.PRODUCER]
    assert publish.parent.span_id == parent.get_span_context().span_id


def test_an_oauth_refresh_is_a_span_whose_trace_reaches_the_provider(spans):
    with FakeOAuthProvider() as provider:
        provider.register(scopes=("repo",))
        access, refresh = provider.issue_tokens()
        connection = oauth_connection_store(
            tenant=TenantFactory(slug="acme"),
            provider=OAuthProvider.objects.get(name="github"),
            token={"access_token": access, "refresh_token": refresh, "expires_in": 60, "token_type": "Bearer"},
            now=timezone.now(),
            refresh_window=timedelta(minutes=10),
            created_by=None,
        )

        result = connection_refresh(
            connection_id=str(connection.pk),
            fresh_for=timedelta(minutes=10),
            refresh_window=timedelta(minutes=10),
            http_timeout_s=5.0,
        )
        token_request = provider.server.requests[-1]

    assert result.outcome is RefreshOutcome.REFRESHED
    (span,) = [span for span in spans.get_finished_spans() if span.name == "oauth.refresh"]
    assert token_request.headers["traceparent"].split("-")[1] == format(span.context.trace_id, "032x")
    assert dict(span.attributes) == {"toolgate.connection_id": str(connection.pk)}
