"""Celery tasks of tools_app (found by Celery's autodiscovery under this name).

The audit retention run by beat (settings.TOOLGATE_AUDIT_RETENTION_DAYS), and the upstream MCP
discovery task, defined beside its service in tools_app/upstream/tasks.py.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from tools_app.audit import audit_prune
from tools_app.upstream.tasks import discover_server

__all__ = ["audit_retention", "discover_server"]

logger = logging.getLogger(__name__)


@shared_task(acks_late=True, soft_time_limit=3000, time_limit=3300)
def audit_retention() -> int:
    """Prune audit rows past the retention period; idempotent (a second run finds nothing). Returns rows deleted."""
    days = settings.TOOLGATE_AUDIT_RETENTION_DAYS
    if days <= 0:
        return 0
    report = audit_prune(older_than_days=days)
    logger.info(
        "audit retention: %d rows deleted in %d batches, %d kept in the idempotency window",
        report.deleted,
        report.batches,
        report.kept_in_window,
    )
    return report.deleted
