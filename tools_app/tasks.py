"""Celery tasks of tools_app (found by Celery's autodiscovery under this name).

The audit retention run by beat (settings.TOOLGATE_AUDIT_RETENTION_DAYS) and the audit partitions made
ahead of time (PostgreSQL, hourly).
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from tools_app.audit import audit_prune
from tools_app.partitions import audit_partitions_ensure

__all__ = ["audit_partitions_ahead", "audit_retention"]

logger = logging.getLogger(__name__)


@shared_task(acks_late=True, soft_time_limit=3000, time_limit=3300)
def audit_retention() -> int:
    """Prune audit rows (and the installed trails' rows) past the retention period; idempotent. Returns rows deleted."""
    days = settings.TOOLGATE_AUDIT_RETENTION_DAYS
    if days <= 0:
        return 0
    report = audit_prune(older_than_days=days)
    logger.info(
        "audit retention: %d rows deleted in %d batches, %d kept in the idempotency window; "
        "%d partitions dropped (about %d rows), %d claims deleted, busy: %s",
        report.deleted,
        report.batches,
        report.kept_in_window,
        len(report.partitions_dropped),
        report.rows_dropped,
        report.claims_deleted,
        ", ".join(report.partitions_busy) or "none",
    )
    for trail in report.trails:
        logger.info("audit retention: %d %s deleted in %d batches", trail.deleted, trail.noun, trail.batches)
    return report.deleted + report.rows_dropped + sum(trail.deleted for trail in report.trails)


@shared_task(acks_late=True, soft_time_limit=300, time_limit=360)
def audit_partitions_ahead() -> list[str]:
    """Create the audit partitions of now and the next periods (idempotent; nothing to do on SQLite)."""
    created = audit_partitions_ensure()
    if created:
        logger.info("audit partitions created: %s", ", ".join(created))
    return created
