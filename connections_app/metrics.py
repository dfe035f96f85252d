"""Prometheus counters of OAuth refreshes, counted when a refresh ends.

Refreshes happen in Celery workers (the sweep) and in web processes (an
expired token met during a call). Each process counts its own; under
gunicorn the workers' counts are summed by the multiprocess collector of
config/metrics.py, and a Celery worker exposes its own on
`TOOLGATE_WORKER_METRICS_PORT` (config/celery.py). Nothing is recomputed at
scrape time: the audit trail (ConnectionEvent) stays the record of each
refresh, this is the rate.
"""

from __future__ import annotations

from prometheus_client import Counter

REFRESHES = Counter(
    "toolgate_oauth_refresh",
    "OAuth token refreshes by provider and outcome: success, needs_reauth, or the failure's code.",
    ["provider", "outcome"],
)


def refresh_counted(*, provider: str, outcome: str) -> None:
    """One refresh of a `provider` connection ended: `success`, `needs_reauth` or a failure code."""
    REFRESHES.labels(provider, outcome or "failure").inc()
