"""Structured logs: one JSON object per line, with the request's (or task's) ids bound to every line.

Every logger (Django's, Celery's, ours) goes through structlog's formatter
(settings.LOGGING), so a line from deep inside the broker carries the same
`request_id`, `tenant_id` and `tool_id` as the request's own line. What is
bound is ids and outcomes, never args, values, headers or credentials: the
canary test (tests/connections_app/test_canary.py) renders every captured
record through this formatter and looks for the secrets it stored.

One line per request: `request_log` writes it when the response is ready
(method, path, status, duration, the bound ids); Django's own 4xx warnings
and gunicorn's access log would say the same again, so they are off
(settings.LOGGING, config/gunicorn.conf.py). Browsers' favicon probes are
not logged at all.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import structlog
from django.http import HttpRequest, HttpResponse
from structlog.contextvars import bind_contextvars, clear_contextvars, get_contextvars
from structlog.typing import Processor

from runner.pipeline import Call
from runner.types import ToolExecResult

if TYPE_CHECKING:
    from celery import Task

REQUEST_ID_HEADER = "X-Request-ID"
REQUEST_ID_TASK_HEADER = "toolgate_request_id"
# A proxy's request id is kept when it looks like one (it ends up in every line); otherwise a new one.
WELL_FORMED_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{8,64}")
UNLOGGED_PATHS = frozenset({"/favicon.ico"})

access_logger = structlog.get_logger("toolgate.request")

SHARED_PROCESSORS: list[Processor] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]


def formatter(log_format: str, *, timestamps: bool = True) -> dict[str, Any]:
    """settings.LOGGING's formatter: JSON lines, or key=value text for a terminal (`LOG_FORMAT=console`).

    Without `timestamps` a line carries none: for a process runner that stamps
    each line itself (`make run`'s honcho), so a line shows one time, not two.
    """
    renderer: Processor = (
        structlog.dev.ConsoleRenderer(colors=False)
        if log_format == "console"
        else structlog.processors.JSONRenderer(sort_keys=False)
    )
    return {
        "()": structlog.stdlib.ProcessorFormatter,
        "foreign_pre_chain": SHARED_PROCESSORS,
        "processors": [
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *([] if timestamps else [_timestamp_dropped]),
            structlog.processors.format_exc_info,
            renderer,
        ],
    }


def _timestamp_dropped(_logger: Any, _method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    event_dict.pop("timestamp", None)
    return event_dict


def configure_structlog() -> None:
    """structlog's own loggers hand their events to the standard library (and so to LOGGING)."""
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *SHARED_PROCESSORS,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


def request_id_from(value: str | None) -> str:
    if value and WELL_FORMED_REQUEST_ID.fullmatch(value):
        return value
    return uuid.uuid4().hex


def request_log(get_response: Callable[[HttpRequest], HttpResponse]) -> Callable[[HttpRequest], HttpResponse]:
    """Bind a request id for everything logged during the request, then write its one line.

    The path is logged without its query string (a filter may hold anything a
    caller typed); the id goes back to the caller in `X-Request-ID` so a
    support ticket can name the line.
    """

    def middleware(request: HttpRequest) -> HttpResponse:
        clear_contextvars()
        request_id = request_id_from(request.headers.get(REQUEST_ID_HEADER))
        bind_contextvars(request_id=request_id)
        started = time.perf_counter()
        response = get_response(request)
        response[REQUEST_ID_HEADER] = request_id
        if request.path not in UNLOGGED_PATHS:
            level = logging.ERROR if response.status_code >= 500 else logging.INFO
            access_logger.log(
                level,
                "request",
                method=request.method,
                path=request.path,
                status=response.status_code,
                duration_ms=round((time.perf_counter() - started) * 1000, 2),
            )
        clear_contextvars()
        return response

    return middleware


class LogContextObserver:
    """A runner CallObserver (runner/observe.py): the call's ids on every line logged during it.

    The tool id is bound as the caller sent it only once the catalog knows
    it; an unknown id (any string a caller chose) is logged as `unknown`.
    """

    def call_started(self, call: Call) -> None:
        bind_contextvars(tenant_id=call.ctx.tenant_id, tool_call_id=call.ctx.tool_call_id)

    def stages_finished(self, times: Sequence[tuple[str, float]]) -> None:
        return None

    def call_finished(self, call: Call, result: ToolExecResult, seconds: float) -> None:
        bind_contextvars(
            tool_id=call.tool_id if call.tool is not None else "unknown",
            decision=call.decision.value,
            error_code=result.error_code.value if result.error_code is not None else None,
        )


# --- Celery: the same ids in a task's lines, carried from the request that queued it -------------


def task_headers_bound(headers: dict[str, Any] | None = None, **_: Any) -> None:
    """before_task_publish: a task queued during a request carries its request id."""
    request_id = get_contextvars().get("request_id")
    if headers is not None and request_id and REQUEST_ID_TASK_HEADER not in headers:
        headers[REQUEST_ID_TASK_HEADER] = request_id


def task_context_bound(task_id: str | None = None, task: Task | None = None, **_: Any) -> None:
    """task_prerun: a task's lines name the task and the request that queued it."""
    clear_contextvars()
    request = getattr(task, "request", None)
    request_id = getattr(request, REQUEST_ID_TASK_HEADER, None) or (getattr(request, "headers", None) or {}).get(
        REQUEST_ID_TASK_HEADER
    )
    bind_contextvars(
        task_id=task_id,
        task=getattr(task, "name", None),
        request_id=request_id_from(request_id) if request_id else None,
    )


def task_context_cleared(**_: Any) -> None:
    """task_postrun: nothing bound for one task leaks into the next (Celery logs the outcome itself)."""
    clear_contextvars()
