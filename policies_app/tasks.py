"""Celery tasks of policies_app (found by Celery's autodiscovery under this name)."""

from __future__ import annotations

from celery import shared_task

from policies_app.services import approval_expired_erase


@shared_task(acks_late=True, soft_time_limit=50, time_limit=60)
def approval_expiry_sweep() -> int:
    """Erase the args kept for approval requests nobody decided in time; idempotent. Returns rows erased."""
    return approval_expired_erase()
