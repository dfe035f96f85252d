"""The composition root: the one place that binds tools and ports into a runner.

Tools get their capabilities here (the GitHub base URL comes from settings, not
from the tool; the search tool gets the catalog index); the runner gets its
adapters here. Nothing else instantiates bound tools or a ToolRunner.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from django.conf import settings
from django.urls import reverse

from config.logs import LogContextObserver
from config.tracing import OtelStageTracer, client_traced, tracing_provider
from connections_app.adapters import DatabaseConnectionBroker, DatabaseGrantStore
from core.netguard import parse_endpoint, resolve_checked_now
from gateway.upstream.client import on_tools_list_changed
from gateway.upstream.services import allow_private_networks
from gateway.upstream.source import CompositeToolSource, McpToolSource
from gateway.upstream.tasks import discovery_queue_for_list_change
from policies_app.adapters import (
    CachedGovernanceView,
    CacheRateLimiter,
    DatabaseApprovalDesk,
    DatabaseDelegationStore,
    DatabasePolicyDecider,
    DatabaseRuleBook,
)
from runner.authz import DelegationAuthorization
from runner.bound import BoundTool, bind_tool
from runner.capabilities import CatalogIndex, HttpCapability
from runner.contracts import ToolDefinition
from runner.defaults import LoggingEventSink, SystemClock
from runner.errors import ContractError
from runner.grants import ChoicePages
from runner.observe import instrument
from runner.pipeline import ToolRunner, default_stages
from runner.ports import PolicyDecider, ToolSource
from tools_app.adapters import CatalogToolSource, DatabaseAuditSink, DatabaseIdempotencyStore
from tools_app.metrics import PrometheusCallObserver
from tools_app.registry import code_registry
from tools_app.search import CatalogSearchIndex


def provider_base_urls() -> dict[str, str]:
    """Where each provider's HTTP capability may go (tests point these at loopback)."""
    return {"github": settings.TOOLGATE_GITHUB_API_URL}


def bind_tools(
    definitions: Mapping[str, ToolDefinition], base_urls: Mapping[str, str], *, catalog: CatalogIndex | None = None
) -> dict[str, BoundTool]:
    """Each definition bound to what it declares: an HTTP capability to its provider, the catalog index.

    A tool declaring a capability that is not given here fails at startup (bind_tool).
    """
    bound = {}
    for tool_id, definition in definitions.items():
        http = None
        if "http" in definition.contract.capabilities:
            base_url = base_urls.get(definition.contract.provider or "")
            if base_url is None:
                raise ContractError(f"{tool_id}: no base URL is configured for provider {definition.contract.provider}")
            # httpx2's own client when tracing is on, instrumented by OpenTelemetry (that client only).
            http = HttpCapability(
                base_url,
                upstream=definition.contract.provider or "",
                keep_alive_transport=tracing_provider() is None,
                redirect_guard=redirect_guard,
                instrument=client_traced if tracing_provider() is not None else None,
            )
        uses_catalog = "catalog" in definition.contract.capabilities
        bound[tool_id] = bind_tool(definition, http=http, catalog=catalog if uses_catalog else None)
    return bound


def redirect_guard(url: str) -> None:
    """Where a code tool's upstream may redirect it to another origin: the upstream MCP servers' address rule.

    Resolved and checked when the redirect is decided (UpstreamAddressRefused, a
    ValueError, refuses it); a host that does not resolve is refused too.
    """
    resolve_checked_now(parse_endpoint(url), allow_private=allow_private_networks())


def choice_pages() -> ChoicePages:
    """The portal's pages a person is sent to when no connection can be chosen for their call (paths)."""
    marker = "00000000-0000-4000-8000-000000000000"
    choose = reverse("web:delegation-connections", kwargs={"delegation_id": marker}).replace(marker, "{delegation_id}")
    return ChoicePages(connect=reverse("web:connection-list") + "?provider={provider}", choose=choose)


@dataclass(frozen=True, slots=True)
class Runtime:
    """The runner and the ports interfaces need beside it (the catalog asks source and policy)."""

    runner: ToolRunner
    source: ToolSource
    policy: PolicyDecider


def build_runtime() -> Runtime:
    clock = SystemClock()
    # Code tools first, then the approved tools of upstream MCP servers (ids are namespaced apart).
    # An upstream session that says its tools changed queues that server's discovery at once.
    on_tools_list_changed(discovery_queue_for_list_change)
    desk = DatabaseApprovalDesk()
    policy = DatabasePolicyDecider(desk)
    # The search tool ranks the catalog of the source that holds it: the index reads `source` per search.
    catalog = CatalogSearchIndex(source=lambda: source, policy=policy)
    source = CompositeToolSource(
        CatalogToolSource(bind_tools(code_registry(), provider_base_urls(), catalog=catalog)), McpToolSource()
    )
    stages = default_stages(
        governance=CachedGovernanceView(),
        source=source,
        policy=policy,
        limiter=CacheRateLimiter(api_rate_per_second=settings.TOOLGATE_API_RATE_PER_SECOND),
        grants=DatabaseGrantStore(),
        broker=DatabaseConnectionBroker(),
        audit=DatabaseAuditSink(),
        events=LoggingEventSink(),
        clock=clock,
        idempotency=DatabaseIdempotencyStore(),
        approvals=desk,
        authorization=DelegationAuthorization(DatabaseDelegationStore(), clock),
        rules=DatabaseRuleBook(),
        default_max_result_bytes=settings.TOOLGATE_MAX_RESULT_BYTES,
        pages=choice_pages(),
    )
    # Metrics, logs and traces watch the stages from outside: the chain itself is unchanged.
    observers = [
        PrometheusCallObserver(
            max_tools=settings.TOOLGATE_METRICS_MAX_TOOLS,
            max_tenants=settings.TOOLGATE_METRICS_MAX_TENANTS,
            # gunicorn's workers write their counts to files there (config/metrics.py sums them at scrape time)
            multiprocess_directory=os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None,
        ),
        LogContextObserver(),
    ]
    provider = tracing_provider()  # None unless OTEL_* turned tracing on: then no tracer, no cost
    stages = instrument(stages, observers=observers, tracer=OtelStageTracer(provider) if provider else None)
    return Runtime(runner=ToolRunner(stages, clock), source=source, policy=policy)


@cache
def runtime() -> Runtime:
    """The process-wide runtime, built on first use."""
    return build_runtime()
