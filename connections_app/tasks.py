"""Celery tasks: the refresh sweep (beat) and one refresh per connection.

Tasks take ids, re-read, and call one service. `refresh_connection` is
idempotent (a fresh or locked row returns at once), so it is acked late and a
worker lost mid-task simply gets it redelivered.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings

from connections_app.refresh import RefreshOutcome, connection_refresh
from connections_app.scheduling import refresh_sweep_once
from connections_app.webhooks import TransientDeliveryError, webhook_deliver, webhook_enqueue_for
from policies_app.models import ApprovalRequest

logger = logging.getLogger(__name__)
REFRESH_HTTP_TIMEOUT_S = 10.0
REFRESH_MAX_RETRIES = 5
WEBHOOK_MAX_RETRIES = 6  # about 10 minutes of backoff in all


class TransientRefreshError(Exception):
    """The provider could not be reached; the task retries with backoff and jitter."""


@shared_task(
    bind=True,
    acks_late=True,
    soft_time_limit=45,
    time_limit=60,
    autoretry_for=(TransientRefreshError,),
    max_retries=REFRESH_MAX_RETRIES,
    retry_backoff=5,
    retry_backoff_max=300,
    retry_jitter=True,
)
def refresh_connection(self, connection_id: str) -> str:
    """Refresh one connection if it is still due; the outcome's name is the task's result."""
    result = connection_refresh(
        connection_id=connection_id,
        fresh_for=timedelta(seconds=settings.TOOLGATE_REFRESH_WINDOW_SECONDS),
        refresh_window=timedelta(seconds=settings.TOOLGATE_REFRESH_WINDOW_SECONDS),
        http_timeout_s=REFRESH_HTTP_TIMEOUT_S,
    )
    if result.outcome is RefreshOutcome.TRANSIENT_FAILURE:
        raise TransientRefreshError(result.error)
    return result.outcome.value


@shared_task(acks_late=True, soft_time_limit=50, time_limit=60)
def refresh_sweep() -> int:
    """Queue refreshes for what is due; returns how many were queued."""
    return refresh_sweep_once(
        enqueue=lambda connection_id, countdown: refresh_connection.apply_async(
            args=[connection_id], countdown=countdown
        )
    )


@shared_task(
    bind=True,
    acks_late=True,
    soft_time_limit=30,
    time_limit=40,
    autoretry_for=(TransientDeliveryError,),
    max_retries=WEBHOOK_MAX_RETRIES,
    retry_backoff=5,
    retry_backoff_max=300,
    retry_jitter=True,
)
def deliver_webhook(self, delivery_id: str) -> str:
    """Post one webhook delivery (ids only in its args); a delivered row returns at once."""
    return webhook_deliver(delivery_id=delivery_id, final_attempt=self.request.retries >= WEBHOOK_MAX_RETRIES).status


def approval_webhook_listener(approval: ApprovalRequest) -> None:
    """Registered with policies_app at start-up: a delivery row now, its task once the transaction commits."""
    webhook_enqueue_for(approval, enqueue=_send_delivery)


def _send_delivery(delivery_id: str) -> None:
    # Runs after the approval's commit, inside the request that opened or decided it: a broker
    # that cannot take the task costs this one notification (its row stays pending), not the call.
    try:
        deliver_webhook.delay(delivery_id)
    except Exception as exc:
        logger.error("webhook delivery %s not queued (%s); it stays pending", delivery_id, type(exc).__name__)
