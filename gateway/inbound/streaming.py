"""`tools/call` answered as an event stream: the upstream's progress, then the result (docs/mcp-streaming.md).

Why a thread per streamed call: a sync web worker can only write the stream
from the request's thread, and the call blocks until the upstream answers. So
the call (the same `handle` as the JSON answer, audit and budgets included)
runs in a helper thread with a `ProgressSink` in its context, and the request's
thread writes what the sink queues, then the reply. Only a client that asked
for progress (a `_meta.progressToken`) or for log messages (logs.py says how, per
era) and accepts `text/event-stream` gets this; every other message takes the
JSON path untouched.

Questions (docs/mcp-asking.md): a 2025-11-25 client that declared form
elicitation or sampling at `initialize` gets every `tools/call` as a stream
(with or without a progress token), so an upstream's question can reach it as
a request of Toolgate's on that stream (`StreamRelay`); its answer arrives as a
POST, possibly at another worker, and crosses through gateway/input_rounds.py.

Cancellation: the WSGI server closes the response iterator when the client
goes away, and `notifications/cancelled` for a streamed request id (from the
same caller) finds its sink in `_IN_FLIGHT` in this process, or is filed in
the shared cache for the worker that streams it, which looks every
CANCEL_POLL_S (gateway/inflight.py). Either way
the sink cancels the upstream request (the SDK tells the upstream) and the
helper thread writes the row as `cancelled` before the stream ends: the
iterator waits for it, so no row is lost.
"""

from __future__ import annotations

import contextvars
import json
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from django.http import StreamingHttpResponse

from gateway.elicitation import Declared
from gateway.inbound.protocol import Reply, internal_error_reply
from gateway.inflight import CANCEL_POLL_S, cancel_file, cancel_filed
from gateway.input_rounds import answer_await, question_open
from runner.progress import CALL_PROGRESS, LogEvent, ProgressEvent, ProgressSink
from tools_app.services import release_thread_connections

EVENT_STREAM = "text/event-stream"
# How often the writer looks whether the call ended while no event came.
POLL_S = 0.05
# After this long without an event the writer sends an SSE comment: the only way a WSGI
# server notices a client that went away is a write that fails.
HEARTBEAT_S = 1.0
HEARTBEAT = b": waiting\n\n"

_IN_FLIGHT: dict[tuple[str, Any], ProgressSink] = {}
_IN_FLIGHT_LOCK = threading.Lock()


def progress_token(message: Any, accept: str) -> str | int | None:
    """The client's progressToken when this is a `tools/call` that may be answered as a stream, else None."""
    if not isinstance(message, Mapping) or message.get("method") != "tools/call" or EVENT_STREAM not in accept:
        return None
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    token = meta.get("progressToken") if isinstance(meta, Mapping) else None
    if isinstance(token, bool) or not isinstance(token, str | int):
        return None
    return token


def asks_on_stream(message: Any, accept: str, declared: Callable[[], Declared], may_ask: Callable[[str], bool]) -> bool:
    """A handshake-era client's `tools/call` of a tool that may ask it, streamed so the questions can reach it.

    The cheap looks come first: most calls are decided before the tool is looked up
    or the sealed session id opened.
    """
    if not isinstance(message, Mapping) or message.get("method") != "tools/call" or EVENT_STREAM not in accept:
        return False
    params = message.get("params")
    name = params.get("name") if isinstance(params, Mapping) else None
    if not isinstance(name, str) or not may_ask(name):
        return False
    answerable = declared()
    return answerable.form or answerable.sampling


class StreamRelay:
    """Questions for a handshake-era client, sent on its call's stream; its answers come back by POST."""

    def __init__(self, sink: ProgressSink, caller_key: str) -> None:
        self._sink = sink
        self._caller_key = caller_key

    def ask(
        self, method: str, params: Mapping[str, Any], given_up: Callable[[], bool] | None = None
    ) -> Mapping[str, Any]:
        """Ask one question and wait for its answer (AskUnanswered when none comes, or on `given_up`)."""
        question_id = question_open(self._caller_key)
        self._sink.send({"jsonrpc": "2.0", "id": question_id, "method": method, "params": dict(params)})
        cancelled = self._sink.cancelled.is_set
        return answer_await(question_id, gone=lambda: cancelled() or (given_up is not None and given_up()))


def cancel_in_flight(caller_key: str, message: Any) -> bool:
    """Cancel the streamed call a `notifications/cancelled` names, if it runs here; whether one did."""
    if not isinstance(message, Mapping) or message.get("method") != "notifications/cancelled":
        return False
    params = message.get("params")
    request_id = params.get("requestId") if isinstance(params, Mapping) else None
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        return False
    with _IN_FLIGHT_LOCK:
        sink = _IN_FLIGHT.get((caller_key, request_id))
    if sink is None:
        cancel_file(caller_key, request_id)  # another worker may be streaming it (gateway/inflight.py)
        return False
    sink.cancel()
    return True


def streamed_call(
    *,
    caller_key: str,
    request_id: Any,
    token: str | int | None,
    run: Callable[[StreamRelay], Reply],
    max_events: int,
    log_level: str | None = None,
) -> StreamingHttpResponse:
    """The call as an SSE response: progress re-keyed to `token` (if any), log messages at `log_level`,
    questions for the client, then the reply."""
    sink = ProgressSink(max_events=max_events, progress=token is not None, log_level=log_level)
    relay = StreamRelay(sink, caller_key)
    response = StreamingHttpResponse(
        _events(sink, caller_key=caller_key, request_id=request_id, token=token, run=lambda: run(relay)),
        content_type=EVENT_STREAM,
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # a proxy in front must not hold the events back
    return response


def _events(
    sink: ProgressSink, *, caller_key: str, request_id: Any, token: str | int | None, run: Callable[[], Reply]
) -> Iterator[bytes]:
    done: list[Reply] = []
    context = contextvars.copy_context()
    context.run(CALL_PROGRESS.set, sink)

    def work() -> None:
        try:
            done.append(context.run(run))
        except Exception:  # the JSON path's own handler words everything it knows; this is the rest
            done.append(internal_error_reply())
        finally:
            release_thread_connections()

    key = (caller_key, request_id)
    with _IN_FLIGHT_LOCK:
        _IN_FLIGHT[key] = sink
    worker = threading.Thread(target=work, name="toolgate-mcp-stream", daemon=True)
    worker.start()
    try:
        quiet_since = looked_at = time.monotonic()
        while worker.is_alive() or not sink.events.empty():
            try:
                event = sink.events.get(timeout=POLL_S)
            except queue.Empty:
                now = time.monotonic()
                if now - looked_at >= CANCEL_POLL_S:
                    looked_at = now
                    _cancel_if_filed(sink, caller_key, request_id)
                if now - quiet_since >= HEARTBEAT_S:
                    quiet_since = now
                    yield HEARTBEAT
                continue
            quiet_since = time.monotonic()
            yield _rendered(event, token)
        worker.join()
        reply = done[0] if done else internal_error_reply()
        if reply.body is not None:
            yield _sse(reply.body)
    finally:
        if worker.is_alive():  # the client went away mid-call: that is a cancellation
            sink.cancel()
            worker.join()
        with _IN_FLIGHT_LOCK:
            if _IN_FLIGHT.get(key) is sink:
                del _IN_FLIGHT[key]


def _cancel_if_filed(sink: ProgressSink, caller_key: str, request_id: Any) -> None:
    """Cancel the call when its notifications/cancelled reached another worker (gateway/inflight.py)."""
    if not sink.cancelled.is_set() and cancel_filed(caller_key, request_id):
        sink.cancel()


def _rendered(event: ProgressEvent | LogEvent | Mapping[str, Any], token: str | int | None) -> bytes:
    """One queued event as SSE: a question as it is, a log message, or progress re-keyed to `token`."""
    if isinstance(event, Mapping):
        return _sse(event)
    if isinstance(event, LogEvent):
        return _sse(_log(event))
    return _sse(_progress(token, event)) if token is not None else b""


def _log(event: LogEvent) -> dict[str, Any]:
    params: dict[str, Any] = {"level": event.level, "data": event.data}
    if event.logger is not None:
        params["logger"] = event.logger
    return {"jsonrpc": "2.0", "method": "notifications/message", "params": params}


def _progress(token: str | int | None, event: ProgressEvent) -> dict[str, Any]:
    params: dict[str, Any] = {"progressToken": token, "progress": event.progress}
    if event.total is not None:
        params["total"] = event.total
    if event.message is not None:
        params["message"] = event.message
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}


def _sse(message: Mapping[str, Any]) -> bytes:
    return b"event: message\ndata: " + json.dumps(message, separators=(",", ":")).encode() + b"\n\n"
