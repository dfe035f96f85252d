"""Progress and log messages of one call in flight, from the tool that reports them to the interface that streams them.

Why a context variable: the interface that can stream (the MCP endpoint, when
its client asked for progress) and the tool that can report (an upstream MCP
tool) are at the two ends of the pipeline, and nothing in between needs to
know. The runner copies the context to the background loop (BackgroundLoop.run),
so an `execute` there sees the sink its request set. Unset, nothing changes:
the plain call path reads one context variable and goes on.

The sink is a bounded queue read by another thread (the one writing the
stream): events past `max_events` are dropped and counted, never buffered, so
an upstream's flood costs a counter, not memory. Log messages count in the same
budget as progress: one flood cap per call, whatever the upstream sends. `cancel()`
comes from that thread too (the client cancelled or went away); the call running
on the loop registered how to stop it (`on_cancel`).

What the client asked for is fixed when the sink is made: progress (it sent a
progressToken) and log messages at or above `log_level` (None: none at all).
A report it did not ask for is dropped before it is counted.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final

DEFAULT_MAX_EVENTS = 200
# MCP's log levels (RFC 5424 severities), least severe first: "at or above" is an index comparison.
LOG_LEVELS: Final = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    progress: float
    total: float | None
    message: str | None


@dataclass(frozen=True, slots=True)
class LogEvent:
    """One log message (`notifications/message`), already cleaned and bounded by whoever reported it."""

    level: str
    logger: str | None
    data: Any


class ProgressSink:
    """Where a running tool puts its progress and log messages, and how the reader stops the call."""

    def __init__(
        self, *, max_events: int = DEFAULT_MAX_EVENTS, progress: bool = True, log_level: str | None = None
    ) -> None:
        self.max_events = max_events
        self.wants_progress = progress
        self.log_level = log_level if log_level in LOG_LEVELS else None
        self.events: queue.Queue[ProgressEvent | LogEvent | Mapping[str, Any]] = queue.Queue()
        self.accepted = 0
        self.dropped = 0
        self.cancelled = threading.Event()
        self._lock = threading.Lock()
        self._stop: Callable[[], Any] | None = None

    def report(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Queue one event, or count it dropped past the cap (any thread; never blocks)."""
        if self.wants_progress and self._admitted():
            self.events.put(ProgressEvent(progress, total, message))

    def wants_log(self, level: str) -> bool:
        """Whether a log message at `level` is one the client asked for."""
        return (
            self.log_level is not None
            and level in LOG_LEVELS
            and LOG_LEVELS.index(level) >= LOG_LEVELS.index(self.log_level)
        )

    def log(self, level: str, logger: str | None, data: Any) -> None:
        """Queue one log message the client asked for, in the same budget as progress (any thread)."""
        if self.wants_log(level) and self._admitted():
            self.events.put(LogEvent(level, logger, data))

    def _admitted(self) -> bool:
        with self._lock:
            if self.accepted >= self.max_events:
                self.dropped += 1
                return False
            self.accepted += 1
            return True

    def send(self, message: Mapping[str, Any]) -> None:
        """Queue a message the reader writes as it is (a question for the client); never dropped or counted."""
        self.events.put(message)

    def on_cancel(self, stop: Callable[[], Any]) -> None:
        """Register how the running call is stopped; called at once if the reader already cancelled."""
        with self._lock:
            self._stop = stop
            already = self.cancelled.is_set()
        if already:
            stop()

    def cancel(self) -> None:
        """The reader's side: the client cancelled the request or dropped the stream."""
        with self._lock:
            self.cancelled.set()
            stop = self._stop
        if stop is not None:
            stop()


CALL_PROGRESS: ContextVar[ProgressSink | None] = ContextVar("toolgate_call_progress", default=None)
