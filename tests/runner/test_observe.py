"""runner.observe: stages watched from outside, the chain itself unchanged."""

from __future__ import annotations

from contextlib import contextmanager

from runner import observe
from runner.observe import TimedStage, TracedStage, instrument
from runner.pipeline import AuditStage, ExecuteStage, ToolRunner
from runner.types import ErrorCode
from tests.runner import tools
from tests.runner.fakes import make_harness


class RecordingObserver:
    def __init__(self) -> None:
        self.started: list[str] = []
        self.stages: dict[str, float] = {}
        self.finished: list[tuple[str, bool, ErrorCode | None, float]] = []

    def call_started(self, call) -> None:
        self.started.append(call.tool_id)

    def stages_finished(self, times) -> None:
        self.stages.update(times)

    def call_finished(self, call, result, seconds: float) -> None:
        self.finished.append((call.tool_id, result.ok, result.error_code, seconds))


class RecordingTracer:
    def __init__(self) -> None:
        self.opened: list[str] = []
        self.results: list[tuple[str, bool]] = []

    @contextmanager
    def stage(self, stage: str, call):
        self.opened.append(stage)
        yield lambda result: self.results.append((stage, result.ok))


def observed_harness(*definitions, **options):
    harness = make_harness(definitions, **options)
    observer, tracer = RecordingObserver(), RecordingTracer()
    harness.runner = ToolRunner(instrument(harness.stages(), observers=[observer], tracer=tracer), harness.clock)
    return harness, observer, tracer


def test_without_observers_or_tracer_the_stages_are_returned_untouched():
    harness = make_harness([tools.ECHO])
    stages = harness.stages()

    assert instrument(stages) == stages


def test_audit_stays_outermost_and_execute_innermost():
    harness = make_harness([tools.ECHO])

    wrapped = instrument(harness.stages(), observers=[RecordingObserver()], tracer=RecordingTracer())

    assert all(isinstance(stage, TimedStage) for stage in wrapped)
    assert [stage.outermost for stage in wrapped] == [True] + [False] * (len(wrapped) - 1)
    assert isinstance(wrapped[0].inner, TracedStage)
    assert isinstance(wrapped[0].inner.inner, AuditStage)
    assert isinstance(wrapped[-1].inner.inner, ExecuteStage)


def test_a_call_is_reported_once_with_its_outcome_and_every_stage_it_passed():
    harness, observer, tracer = observed_harness(tools.ECHO, tools.SLEEP)

    result = harness.exec("test__sleep", {"ms": 30})

    assert result.ok
    assert observer.started == ["test__sleep"]
    assert len(observer.finished) == 1
    tool_id, ok, error_code, total = observer.finished[0]
    assert (tool_id, ok, error_code) == ("test__sleep", True, None)
    assert total >= 0.03
    # the 30 ms are the execute stage's own; the stages around it do not count them again
    assert observer.stages["execute"] >= 0.03
    assert all(seconds < 0.03 for stage, seconds in observer.stages.items() if stage != "execute")
    assert tracer.opened[0] == "audit"
    assert tracer.opened[-1] == "execute"
    assert ("audit", True) in tracer.results
    assert len(harness.audit.records) == 1  # behaviour unchanged: one audit row


def test_a_refused_call_reports_only_the_stages_it_reached():
    harness, observer, _tracer = observed_harness(tools.ECHO, allowed=set())

    result = harness.exec("test__echo", {"text": "hi"})

    assert result.error_code is ErrorCode.POLICY_DENIED
    assert set(observer.stages) == {"audit", "freshness", "fairness", "lookup", "policy"}
    assert [(tool, ok, code) for tool, ok, code, _ in observer.finished] == [
        ("test__echo", False, ErrorCode.POLICY_DENIED)
    ]


class Audit:
    def __call__(self, call, proceed):
        return proceed(call)


class Retry:
    def __call__(self, call, proceed):
        proceed(call)
        return proceed(call)


class Execute:
    def __call__(self, call, proceed):
        return call.fail(ErrorCode.EXECUTION, "answered")


def test_each_stage_times_itself_without_the_stages_it_handed_the_call_to_even_twice(monkeypatch):
    observer = RecordingObserver()
    told: list[list[tuple[str, float]]] = []
    observer.stages_finished = lambda times: told.append(list(times))
    clock = iter([0.0, 1.0, 2.0, 4.0, 5.0, 6.0, 7.0, 10.0])  # audit, retry, execute twice, retry, audit
    monkeypatch.setattr(observe, "perf_counter", lambda: next(clock))
    harness = make_harness([tools.ECHO])
    harness.runner = ToolRunner(instrument([Audit(), Retry(), Execute()], observers=[observer]), harness.clock)

    harness.exec("test__echo", {"text": "hi"})

    assert told == [[("execute", 2.0), ("execute", 1.0), ("retry", 3.0), ("audit", 4.0)]]
    assert observer.finished[0][3] == 10.0  # the call's total: the outermost stage's time


class ExplodingStage:
    def __call__(self, call, proceed):
        raise RuntimeError("a port failed")


def test_a_stage_that_raises_still_closes_its_mark_so_the_stages_around_it_time_right():
    harness = make_harness([tools.ECHO])
    observer = RecordingObserver()
    stages = harness.stages()
    stages.insert(3, ExplodingStage())  # after audit, freshness and fairness
    harness.runner = ToolRunner(instrument(stages, observers=[observer]), harness.clock)

    result = harness.exec("test__echo", {"text": "hi"})

    assert result.error_code is ErrorCode.EXECUTION  # the audit stage answers for the failed port
    assert set(observer.stages) == {"audit", "freshness", "fairness", "exploding"}
    assert all(seconds >= 0 for seconds in observer.stages.values())
    assert len(observer.finished) == 1
