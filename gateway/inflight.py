"""Streamed calls held by some web worker, reachable from every worker: cancellations through the shared cache.

A client's `notifications/cancelled` may reach another worker (another gunicorn
process) than the one writing the call's stream. That worker files it here;
the worker holding the stream looks every CANCEL_POLL_S while the call runs
(gateway/inbound/streaming.py) and cancels it as if the notification had come
to it. The key is a digest of the caller and the client's request id, so a
caller can only ever cancel its own calls.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final

from django.core.cache import cache

CANCEL_POLL_S: Final = 0.5
CANCEL_TTL_S: Final = 300  # a cancellation for a call that has not started streaming yet waits this long
_PREFIX: Final = "mcp-cancel:"


def _key(caller_key: str, request_id: Any) -> str:
    digest = hashlib.sha256(f"{caller_key}\x00{json.dumps(request_id)}".encode()).hexdigest()
    return f"{_PREFIX}{digest}"


def cancel_file(caller_key: str, request_id: Any) -> None:
    """Record that this caller cancelled this request, for whichever worker streams it."""
    cache.set(_key(caller_key, request_id), 1, timeout=CANCEL_TTL_S)


def cancel_filed(caller_key: str, request_id: Any) -> bool:
    """Whether this caller cancelled this request from any worker."""
    return cache.get(_key(caller_key, request_id)) is not None
