"""Prometheus metrics of connections, read from the audit trail at scrape time.

Refreshes happen in Celery workers and in web processes alike; counting the
ConnectionEvents they write makes one `/metrics` scrape of any web process
see every process's refreshes (no multiprocess files, nothing lost on a
restart), and the numbers always agree with the audit trail.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.db import DatabaseError
from django.db.models import Count
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from connections_app.models import ConnectionEvent

REFRESH_KINDS = (ConnectionEvent.Kind.REFRESHED, ConnectionEvent.Kind.REFRESH_FAILED, ConnectionEvent.Kind.NEEDS_REAUTH)


def _outcome(kind: str, detail: str) -> str:
    """success, needs_reauth, or the failure's code (timeout, server_error, invalid_client, ...)."""
    if kind == ConnectionEvent.Kind.REFRESHED:
        return "success"
    if kind == ConnectionEvent.Kind.NEEDS_REAUTH:
        return "needs_reauth"
    return detail or "failure"


def _family() -> CounterMetricFamily:
    return CounterMetricFamily(
        "toolgate_oauth_refresh",
        "OAuth token refreshes by provider and outcome: success, needs_reauth, or the failure's code.",
        labels=["provider", "outcome"],
    )


class RefreshCounters(Collector):
    def describe(self) -> Iterator[CounterMetricFamily]:
        """Names only: registration must not query the database."""
        yield _family()

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = _family()
        try:
            rows = (
                ConnectionEvent.objects.filter(kind__in=REFRESH_KINDS)
                .values_list("provider", "kind", "detail")
                .annotate(total=Count("id"))
                .order_by("provider", "kind", "detail")
            )
            totals: dict[tuple[str, str], int] = {}
            for provider, kind, detail, total in rows:
                key = (provider, _outcome(kind, detail))
                totals[key] = totals.get(key, 0) + total
            for (provider, outcome), total in totals.items():
                family.add_metric([provider, outcome], total)
        except DatabaseError:  # a scrape must not fail because the database is away; /readyz says so
            return
        yield family
