"""What the runner's stages cost over the bare cost of running an async tool.

Baseline, measured in the same run: submitting a trivial coroutine to the
runner's event loop thread and waiting for it (the floor of any async tool call
made from a sync Django view). Measured: `ToolRunner.exec` of
core__get_current_time with in-memory ports (no database), i.e. lookup, policy,
budgets, gate, pydantic validation, capabilities, output validation, redaction,
size budget, events and the audit record. Then the same runner observed as
config/runtime.py observes it (Prometheus counters and histograms, log
context), and traced to an in-memory exporter (what tracing on costs).
Last, argument rules: the same exec with a rule book holding no rules, then
ten active rules on the tool (real CEL conditions compiled by policies_app/cel.py,
none matching, so all ten are evaluated), in the same run.

    python -m bench.runner_overhead        (or: make bench)

Prints µs per call and the ratio; not a test, nothing passes or fails.
"""

from __future__ import annotations

import os
import statistics
import time

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from bench.rule_set import TEN_CONDITIONS  # noqa: E402
from config.logs import LogContextObserver  # noqa: E402
from config.tracing import OtelStageTracer  # noqa: E402
from policies_app.cel import activation, condition_compile  # noqa: E402
from policies_app.rules import _condition  # noqa: E402
from runner.observe import instrument  # noqa: E402
from runner.pipeline import BackgroundLoop, ToolRunner, default_stages  # noqa: E402
from runner.ports import NO_RULES, CallRules  # noqa: E402
from runner.rules import ArgumentRule, RuleAction, RuleScope  # noqa: E402
from runner.types import ToolInvocationContext  # noqa: E402
from tests.runner.fakes import (  # noqa: E402
    FakeBroker,
    FakeGovernance,
    FakeGrants,
    FakeLimiter,
    FakePolicy,
    FakeSource,
    FixedClock,
    ListEvents,
)
from tools_app.metrics import PrometheusCallObserver  # noqa: E402
from tools_app.registry import code_registry  # noqa: E402

ROUNDS = 7
CALLS = 2_000


class NullAudit:
    def record(self, record) -> None:
        return None


class FixedRuleBook:
    def __init__(self, rules: CallRules) -> None:
        self._rules = rules

    def for_caller(self, ctx) -> CallRules:
        return self._rules


def ten_rules() -> CallRules:
    rules = tuple(
        ArgumentRule(
            rule_id=str(number),
            name=f"rule-{number}",
            scope=RuleScope.TENANT,
            action=RuleAction.DENY,
            message="",
            covers=lambda spec: spec.name == "core__get_current_time",
            condition=_condition(condition_compile(source)),
        )
        for number, source in enumerate(TEN_CONDITIONS)
    )
    caller = {"tenant": "acme", "tenant_id": "t", "service_account": "bot", "service_account_id": "a"}
    return CallRules(arguments=rules, caller=caller, prepare=activation)


async def _nothing() -> None:
    return None


def _per_call_us(fn) -> float:
    samples = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for _ in range(CALLS):
            fn()
        samples.append((time.perf_counter() - started) / CALLS * 1e6)
    return statistics.median(samples)


def main() -> None:
    loop = BackgroundLoop.shared()
    source = FakeSource([code_registry()["core__get_current_time"]])
    clock = FixedClock()

    def stages(rules: CallRules | None = None) -> list:
        return default_stages(
            rules=FixedRuleBook(rules) if rules is not None else None,
            governance=FakeGovernance(),
            source=source,
            policy=FakePolicy(allowed={"core__get_current_time"}),
            limiter=FakeLimiter(),
            grants=FakeGrants(),
            broker=FakeBroker(),
            audit=NullAudit(),
            events=ListEvents(),
            clock=clock,
            loop=loop,
        )

    runner = ToolRunner(stages(), clock)
    observers = [PrometheusCallObserver(max_tools=200, max_tenants=100), LogContextObserver()]
    observed = ToolRunner(instrument(stages(), observers=observers), clock)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    traced = ToolRunner(instrument(stages(), observers=observers, tracer=OtelStageTracer(provider)), clock)
    ctx = ToolInvocationContext(run_id="r", tool_call_id="c", tenant_id="t", actor_id="a")

    baseline = _per_call_us(lambda: loop.run(_nothing(), timeout_s=1))
    measured = _per_call_us(lambda: runner.exec("core__get_current_time", {"timezone": "UTC"}, ctx))
    with_metrics = _per_call_us(lambda: observed.exec("core__get_current_time", {"timezone": "UTC"}, ctx))

    def traced_call() -> None:
        traced.exec("core__get_current_time", {"timezone": "UTC"}, ctx)
        exporter.clear()

    with_traces = _per_call_us(traced_call)

    print(f"baseline  loop round trip          {baseline:8.1f} µs/call")
    print(f"runner    exec (12 stages, fakes)  {measured:8.1f} µs/call")
    print(f"ratio     runner / baseline        {measured / baseline:8.2f}x")
    print(f"observed  + metrics and log context {with_metrics:7.1f} µs/call (+{with_metrics - measured:.1f})")
    print(f"traced    + spans (in memory)      {with_traces:8.1f} µs/call (+{with_traces - measured:.1f})")

    # Argument rules: no rules and ten rules on the tool, taking turns so both see the same disturbances.
    no_rules = ToolRunner(stages(NO_RULES), clock)
    with_rules = ToolRunner(stages(ten_rules()), clock)
    assert with_rules.exec("core__get_current_time", {"timezone": "UTC"}, ctx).ok
    none_us, ten_us = [], []
    for _ in range(3):
        none_us.append(_per_call_us(lambda: no_rules.exec("core__get_current_time", {"timezone": "UTC"}, ctx)))
        ten_us.append(_per_call_us(lambda: with_rules.exec("core__get_current_time", {"timezone": "UTC"}, ctx)))
    none, ten = statistics.median(none_us), statistics.median(ten_us)
    print(f"rules     exec, rule book, no rules {none:7.1f} µs/call")
    print(f"rules     exec, 10 rules on the tool {ten:6.1f} µs/call (+{ten - none:.1f}, {ten / none - 1:+.1%})")


if __name__ == "__main__":
    main()
