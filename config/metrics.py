"""`/metrics`: Prometheus's page, for the scraper only (docs/configuration.md, `TOOLGATE_METRICS_TOKEN`).

The page names providers, outcomes and traffic: an attacker learns from it
what a tenant uses and when a refresh fails. With a token configured, a
scraper anywhere presents `Authorization: Bearer <token>`; without one, only
a process on the same machine may read it. A request that came through a
proxy (it carries a forwarding header) is never "on the same machine", even
when the proxy itself connects from loopback.

Under gunicorn (`PROMETHEUS_MULTIPROC_DIR` set, config/gunicorn.conf.py) each
worker counts into its own mmap'd files and a scrape of any worker sums them
all; series read from the database at scrape time (the approval queue and decisions) are
added once, whatever the number of processes.
"""

from __future__ import annotations

import hmac
import os
from functools import cache

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest, multiprocess

from policies_app.metrics import ApprovalsFromTheTable

LOOPBACK = frozenset({"127.0.0.1", "::1"})
FORWARDING_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_X_REAL_IP", "HTTP_FORWARDED")


@never_cache
def metrics(request: HttpRequest) -> HttpResponse:
    token: str = settings.TOOLGATE_METRICS_TOKEN
    if token:
        if not _bearer_matches(request, token):
            response = _refused(
                401, "unauthenticated", "send Authorization: Bearer <TOOLGATE_METRICS_TOKEN> to read the metrics"
            )
            response["WWW-Authenticate"] = "Bearer"
            return response
    elif not _from_this_machine(request):
        return _refused(
            403,
            "forbidden",
            "metrics answer only on loopback; set TOOLGATE_METRICS_TOKEN to let a scraper elsewhere read them",
        )
    body = b"".join(generate_latest(registry) for registry in registries())
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)


@cache
def registries() -> tuple[CollectorRegistry, ...]:
    """What a scrape reads: this process's (or every gunicorn worker's) counters, then the database's."""
    scrape_time = CollectorRegistry(auto_describe=False)
    scrape_time.register(ApprovalsFromTheTable())
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return REGISTRY, scrape_time
    workers = CollectorRegistry(auto_describe=False)
    multiprocess.MultiProcessCollector(workers)
    return workers, scrape_time


def _bearer_matches(request: HttpRequest, token: str) -> bool:
    scheme, _, presented = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    # Compared in constant time, on bytes: the header may hold any Latin-1 text.
    return scheme.lower() == "bearer" and hmac.compare_digest(presented.encode(), token.encode())


def _from_this_machine(request: HttpRequest) -> bool:
    if any(request.META.get(header) for header in FORWARDING_HEADERS):
        return False
    return request.META.get("REMOTE_ADDR") in LOOPBACK


def _refused(status: int, error_code: str, message: str) -> JsonResponse:
    return JsonResponse({"error_code": error_code, "safe_message": message}, status=status)
