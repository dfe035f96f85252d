"""Prometheus series of operator approvals.

Requests are counted where they happen (the process that runs the call).
Decisions and the queue are read from the table at scrape time: a decision
made by `manage.py approvals decide` (a process of its own, whose counters no
scrape ever sees) counts like one made in admin. The decided series is a count
of decided rows: deleting a service account (its requests go with it) lowers
it, which Prometheus reads as a counter reset.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.db import DatabaseError
from django.db.models import Count
from django.utils import timezone
from prometheus_client import Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from policies_app.models import ApprovalRequest

APPROVALS_REQUESTED = Counter(
    "toolgate_approvals_requested", "Approval requests opened for calls whose effect needs an operator."
)
# A decision's label: an approved request stays approved once its call consumed it.
DECISION_OF_STATUS = {
    ApprovalRequest.Status.APPROVED: "approved",
    ApprovalRequest.Status.CONSUMED: "approved",
    ApprovalRequest.Status.DENIED: "denied",
}


def _pending_family() -> GaugeMetricFamily:
    return GaugeMetricFamily("toolgate_approvals_pending", "Approval requests waiting for an operator (unexpired).")


def _decided_family() -> CounterMetricFamily:
    return CounterMetricFamily(
        "toolgate_approvals_decided", "Approval requests decided by a person, by decision.", labels=["decision"]
    )


class ApprovalsFromTheTable(Collector):
    """The queue's length and the decisions so far, read at scrape time from the one table that knows them."""

    def describe(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        """Names only: registration must not query the database."""
        yield _pending_family()
        yield _decided_family()

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        pending, decided = _pending_family(), _decided_family()
        try:
            waiting = ApprovalRequest.objects.filter(
                status=ApprovalRequest.Status.PENDING, expires_at__gt=timezone.now()
            ).count()
            by_status = (
                ApprovalRequest.objects.filter(status__in=list(DECISION_OF_STATUS), decided_at__isnull=False)
                .order_by()
                .values_list("status")
                .annotate(rows=Count("pk"))
            )
            counts = {"approved": 0, "denied": 0}
            for status, rows in by_status:
                counts[DECISION_OF_STATUS[status]] += rows
        except DatabaseError:  # a scrape must not fail because the database is away; /readyz says so
            return
        pending.add_metric([], waiting)
        for decision, rows in counts.items():
            decided.add_metric([decision], rows)
        yield pending
        yield decided
