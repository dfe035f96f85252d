"""Watching the pipeline without changing it: stage wrappers for metrics, logs and traces.

The runner knows nothing of Prometheus, structlog or OpenTelemetry. The
composition root (config/runtime.py) wraps the stages it built with
`instrument(stages, observers=..., tracer=...)`; each wrapper hands the stage
the same `proceed` it would have had, so the order of the chain (audit
outermost, execute innermost) and every stage's behaviour stay exactly as
they are. With nothing to observe, `instrument` returns the stages untouched:
an unobserved deployment pays nothing.

Observers see names, ids and outcomes only (`Call` and `ToolExecResult`);
what they export is theirs to keep free of args, values and credentials.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from time import perf_counter
from typing import Protocol

from runner.pipeline import Call, Handler, Stage
from runner.types import ToolExecResult


class CallObserver(Protocol):
    """Told when a call enters and leaves the pipeline, and how long each stage took by itself."""

    def call_started(self, call: Call) -> None: ...

    def stages_finished(self, times: Sequence[tuple[str, float]]) -> None:
        """Each stage's own seconds (the stages it handed the call to are not in them), innermost first.

        Told once per call, all stages at once: an observer that writes them
        somewhere pays its fixed cost (a lock, a file) once, not once a stage.
        """
        ...

    def call_finished(self, call: Call, result: ToolExecResult, seconds: float) -> None: ...


OnResult = Callable[[ToolExecResult], None]


class StageTracer(Protocol):
    def stage(self, stage: str, call: Call) -> AbstractContextManager[OnResult]:
        """A scope around one stage (a span); the callable it yields is told the stage's result."""
        ...


def stage_name(stage: Stage) -> str:
    """`PolicyStage` → `policy`: the label a stage has in metrics and spans."""
    name = type(stage).__name__
    return (name.removesuffix("Stage") or name).lower()


@dataclass(frozen=True, slots=True)
class TimedStage:
    """Times its stage as the call leaves it; around the outermost stage, reports the call.

    A stage's own time is its time less the time of the stages it handed the
    call to. The call keeps one running total, the seconds of every stage
    that has ended, each counted once, at its outermost end: whatever the
    total grew by while a stage ran is its inner stages' time, however many
    there were (a stage may hand the call on twice). Two clock reads per
    stage, and the observers are told only once the call is over.
    """

    inner: Stage
    name: str
    observers: tuple[CallObserver, ...]
    outermost: bool = False

    def __call__(self, call: Call, proceed: Handler) -> ToolExecResult:
        if self.outermost:
            for observer in self.observers:
                observer.call_started(call)
        before = call.timed_seconds
        started = perf_counter()
        try:
            result = self.inner(call, proceed)
        finally:
            elapsed = perf_counter() - started
            call.stage_times.append((self.name, elapsed - (call.timed_seconds - before)))
            call.timed_seconds = before + elapsed
        if self.outermost:
            for observer in self.observers:
                observer.stages_finished(call.stage_times)
            for observer in self.observers:
                observer.call_finished(call, result, elapsed)
        return result


@dataclass(frozen=True, slots=True)
class TracedStage:
    """Runs a stage inside its tracer's scope (one span per stage, nested like the chain)."""

    inner: Stage
    name: str
    tracer: StageTracer

    def __call__(self, call: Call, proceed: Handler) -> ToolExecResult:
        with self.tracer.stage(self.name, call) as on_result:
            result = self.inner(call, proceed)
            on_result(result)
            return result


def instrument(
    stages: Sequence[Stage], *, observers: Sequence[CallObserver] = (), tracer: StageTracer | None = None
) -> list[Stage]:
    """The same chain, each stage wrapped for the given observers and tracer (none: unchanged)."""
    wrapped: list[Stage] = []
    for index, stage in enumerate(stages):
        name = stage_name(stage)
        current = stage
        if tracer is not None:
            current = TracedStage(current, name, tracer)
        if observers:
            current = TimedStage(current, name, tuple(observers), outermost=index == 0)
        wrapped.append(current)
    return wrapped
