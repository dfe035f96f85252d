"""Liveness and readiness probes for load balancers and orchestrators.

`/healthz` answers as long as the process serves requests and touches nothing
else, so a database outage does not get healthy processes restarted.
`/readyz` checks what a request needs: the database and, when configured,
Redis (through the cache). Failures are named, never explained: exception
text may carry hosts or credentials from connection strings.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

logger = logging.getLogger(__name__)

READY_PROBE_KEY = "toolgate:readyz"


@never_cache
@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@never_cache
@require_safe
def readyz(request: HttpRequest) -> JsonResponse:
    checks = {"database": _check(_database)}
    if settings.REDIS_URL:
        checks["redis"] = _check(_redis)
    ready = all(state == "ok" for state in checks.values())
    return JsonResponse({"status": "ok" if ready else "unavailable", "checks": checks}, status=200 if ready else 503)


def _check(probe: Callable[[], None]) -> str:
    try:
        probe()
    except Exception as exc:  # any failure means not ready; the type is enough for operators
        logger.warning("readiness check %s failed: %s", probe.__name__.lstrip("_"), type(exc).__name__)
        return "failed"
    return "ok"


def _database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def _redis() -> None:
    cache.set(READY_PROBE_KEY, "1", timeout=10)
    if cache.get(READY_PROBE_KEY) != "1":
        raise RuntimeError("cache did not return what was written")
