"""Prometheus series of operator approvals.

Requests and decisions are counted where they happen (a web process or a
command); how many wait right now is one indexed COUNT at scrape time, so the
gauge is right whichever process opened or decided them.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.db import DatabaseError
from django.utils import timezone
from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from policies_app.models import ApprovalRequest

APPROVALS_REQUESTED = Counter(
    "toolgate_approvals_requested", "Approval requests opened for calls whose effect needs an operator."
)
APPROVALS_DECIDED = Counter(
    "toolgate_approvals_decided", "Approval requests decided by an operator, by decision.", ["decision"]
)


def _pending_family() -> GaugeMetricFamily:
    return GaugeMetricFamily("toolgate_approvals_pending", "Approval requests waiting for an operator (unexpired).")


class PendingApprovals(Collector):
    """The queue's length, read at scrape time from the one table that knows it."""

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """Names only: registration must not query the database."""
        yield _pending_family()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = _pending_family()
        try:
            pending = ApprovalRequest.objects.filter(
                status=ApprovalRequest.Status.PENDING, expires_at__gt=timezone.now()
            ).count()
        except DatabaseError:  # a scrape must not fail because the database is away; /readyz says so
            return
        family.add_metric([], pending)
        yield family
