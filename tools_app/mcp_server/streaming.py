"""`tools/call` answered as an event stream: the upstream's progress, then the result (docs/mcp-streaming.md).

Why a thread per streamed call: a sync web worker can only write the stream
from the request's thread, and the call blocks until the upstream answers. So
the call (the same `handle` as the JSON answer, audit and budgets included)
runs in a helper thread with a `ProgressSink` in its context, and the request's
thread writes what the sink queues, then the reply. Only a client that asked
for progress (a `_meta.progressToken`) and accepts `text/event-stream` gets
this; every other message takes the JSON path untouched.

Cancellation: the WSGI server closes the response iterator when the client
goes away, and `notifications/cancelled` for a streamed request id (from the
same caller, to the same process) finds its sink in `_IN_FLIGHT`. Either way
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

from runner.progress import CALL_PROGRESS, ProgressEvent, ProgressSink
from tools_app.mcp_server.protocol import Reply, internal_error_reply
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
        return False
    sink.cancel()
    return True


def streamed_call(
    *, caller_key: str, request_id: Any, token: str | int, run: Callable[[], Reply], max_events: int
) -> StreamingHttpResponse:
    """The call as an SSE response: progress notifications re-keyed to `token`, then the reply."""
    sink = ProgressSink(max_events=max_events)
    response = StreamingHttpResponse(
        _events(sink, caller_key=caller_key, request_id=request_id, token=token, run=run),
        content_type=EVENT_STREAM,
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # a proxy in front must not hold the events back
    return response


def _events(
    sink: ProgressSink, *, caller_key: str, request_id: Any, token: str | int, run: Callable[[], Reply]
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
        quiet_since = time.monotonic()
        while worker.is_alive() or not sink.events.empty():
            try:
                event = sink.events.get(timeout=POLL_S)
            except queue.Empty:
                if time.monotonic() - quiet_since >= HEARTBEAT_S:
                    quiet_since = time.monotonic()
                    yield HEARTBEAT
                continue
            quiet_since = time.monotonic()
            yield _sse(_progress(token, event))
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


def _progress(token: str | int, event: ProgressEvent) -> dict[str, Any]:
    params: dict[str, Any] = {"progressToken": token, "progress": event.progress}
    if event.total is not None:
        params["total"] = event.total
    if event.message is not None:
        params["message"] = event.message
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}


def _sse(message: Mapping[str, Any]) -> bytes:
    return b"event: message\ndata: " + json.dumps(message, separators=(",", ":")).encode() + b"\n\n"
