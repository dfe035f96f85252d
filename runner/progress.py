"""Progress of one call in flight, from the tool that reports it to the interface that streams it.

Why a context variable: the interface that can stream (the MCP endpoint, when
its client asked for progress) and the tool that can report (an upstream MCP
tool) are at the two ends of the pipeline, and nothing in between needs to
know. The runner copies the context to the background loop (BackgroundLoop.run),
so an `execute` there sees the sink its request set. Unset, nothing changes:
the plain call path reads one context variable and goes on.

The sink is a bounded queue read by another thread (the one writing the
stream): events past `max_events` are dropped and counted, never buffered, so
an upstream's flood costs a counter, not memory. `cancel()` comes from that
thread too (the client cancelled or went away); the call running on the loop
registered how to stop it (`on_cancel`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

DEFAULT_MAX_EVENTS = 200


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    progress: float
    total: float | None
    message: str | None


class ProgressSink:
    """Where a running tool puts its progress, and how the reader stops the call."""

    def __init__(self, *, max_events: int = DEFAULT_MAX_EVENTS) -> None:
        self.max_events = max_events
        self.events: queue.Queue[ProgressEvent] = queue.Queue()
        self.accepted = 0
        self.dropped = 0
        self.cancelled = threading.Event()
        self._lock = threading.Lock()
        self._stop: Callable[[], Any] | None = None

    def report(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Queue one event, or count it dropped past the cap (any thread; never blocks)."""
        with self._lock:
            if self.accepted >= self.max_events:
                self.dropped += 1
                return
            self.accepted += 1
        self.events.put(ProgressEvent(progress, total, message))

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
