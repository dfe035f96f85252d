"""Log filters: nothing an upstream MCP server sends reaches the logs unbounded, and no line twice.

The MCP SDK logs what it receives in places (a tool name it drops, a redirect
location, the exception of a body it could not parse, with its traceback).
Records of the SDK's and its HTTP client's loggers are cut to a fixed length
and lose their traceback (the exception's type is kept), whatever handler
they reach.
"""

from __future__ import annotations

import logging
from functools import cache

from django.conf import settings

UPSTREAM_LOGGERS = ("mcp", "httpx2", "httpcore2")
MAX_MESSAGE_CHARS = 300


class BoundedUpstreamRecords(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(UPSTREAM_LOGGERS):
            return True
        message = record.getMessage()
        if record.exc_info and record.exc_info[0] is not None:
            message = f"{message} ({record.exc_info[0].__name__})"
        record.msg = message if len(message) <= MAX_MESSAGE_CHARS else message[:MAX_MESSAGE_CHARS] + "…"
        record.args = None
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        return True


# BaseHTTPRequestHandler.log_request's format: runserver's plain-text access line.
RUNSERVER_ACCESS_FORMAT = '"%s" %s %s'
# What a periodic task that did nothing returns (Celery logs the repr): our sweeps return counts.
NOTHING_DONE = frozenset({"0", "None"})


class OneLinePerRequest(logging.Filter):
    """One line per request, written by `config.logs.request_log` with its ids: drop what repeats it.

    runserver's access line (`"GET / HTTP/1.1" 502 12`) and Django's
    traceless "Bad Gateway: /path" (logged after the middleware returned, so
    without the request id) say again what the request's own line says. A
    `django.request` record with a traceback (an unhandled exception) stays.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "django.server":
            return record.msg != RUNSERVER_ACCESS_FORMAT
        if record.name == "django.request":
            return bool(record.exc_info and record.exc_info[0] is not None)
        return True


@cache
def _periodic_task_names() -> frozenset[str]:
    return frozenset(entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values())


class IdlePeriodicTasks(logging.Filter):
    """A periodic task (settings.CELERY_BEAT_SCHEDULE) that did nothing logs nothing.

    Beat's "Sending due task" and the worker's "received" lines for them are
    dropped; the worker's "succeeded" line stays when the task returned a
    count other than 0 (it did something), and failures are never touched.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "celery.beat" and str(record.msg).startswith("Scheduler: Sending due task"):
            return not (isinstance(record.args, tuple) and record.args[-1] in _periodic_task_names())
        data = getattr(record, "data", None)
        if record.name not in ("celery.worker.strategy", "celery.app.trace") or not isinstance(data, dict):
            return True
        if data.get("name") not in _periodic_task_names() or record.levelno > logging.INFO:
            return True
        if record.name == "celery.worker.strategy":
            return False
        return "return_value" not in data or str(data["return_value"]) not in NOTHING_DONE
