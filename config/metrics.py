"""`/metrics`: Prometheus's page, for the scraper only (CONTRACT.md §2, `TOOLGATE_METRICS_TOKEN`).

The page names providers, outcomes and traffic: an attacker learns from it
what a tenant uses and when a refresh fails. With a token configured, a
scraper anywhere presents `Authorization: Bearer <token>`; without one, only
a process on the same machine may read it. A request that came through a
proxy (it carries a forwarding header) is never "on the same machine", even
when the proxy itself connects from loopback.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django_prometheus.exports import ExportToDjangoView

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
    return ExportToDjangoView(request)


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
