"""Celery tasks: the refresh sweep (beat) and one refresh per connection.

Tasks take ids, re-read, and call one service. `refresh_connection` is
idempotent (a fresh or locked row returns at once), so it is acked late and a
worker lost mid-task simply gets it redelivered. A failed refresh is not
retried by Celery: the refresh pushes the row's `next_refresh_at` out
exponentially (connections_app.refresh), and the sweep queues it again then,
so the backoff survives worker restarts and an operator can see it on the row.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings

from connections_app.refresh import connection_refresh
from connections_app.scheduling import refresh_sweep_once
from connections_app.webhooks import TransientDeliveryError, webhook_deliver, webhook_enqueue_for
from policies_app.models import ApprovalRequest

logger = logging.getLogger(__name__)
REFRESH_HTTP_TIMEOUT_S = 10.0
SWEEP_SOFT_TIME_LIMIT_S = 50
SWEEP_TIME_BUDGET_S = SWEEP_SOFT_TIME_LIMIT_S / 2  # no new batch is claimed past this
WEBHOOK_MAX_RETRIES = 6  # about 10 minutes of backoff in all
# Redis commands per pipeline round trip. Building a message costs far more than its share of a round
# trip, so 100 keeps nearly all the gain, and no message waits in the buffer long enough (the time
# to build 100, tens of ms) to eat into its jittered countdown, which counts from when it was built.
PUBLISH_BATCH_SIZE = 100


@shared_task(acks_late=True, soft_time_limit=45, time_limit=60)
def refresh_connection(connection_id: str) -> str:
    """Refresh one connection if it is still due; the outcome's name is the task's result."""
    result = connection_refresh(
        connection_id=connection_id,
        fresh_for=timedelta(seconds=settings.TOOLGATE_REFRESH_WINDOW_SECONDS),
        refresh_window=timedelta(seconds=settings.TOOLGATE_REFRESH_WINDOW_SECONDS),
        http_timeout_s=REFRESH_HTTP_TIMEOUT_S,
    )
    return result.outcome.value


@shared_task(acks_late=True, soft_time_limit=SWEEP_SOFT_TIME_LIMIT_S, time_limit=60)
def refresh_sweep() -> int:
    """Queue refreshes for what is due (at most TOOLGATE_REFRESH_SWEEP_LIMIT); returns how many were queued."""
    return refresh_sweep_once(enqueue=refresh_tasks_send, time_budget_s=SWEEP_TIME_BUDGET_S)


def refresh_tasks_send(batch: list[tuple[str, float]]) -> None:
    """Send one refresh task per (connection id, countdown), through one producer, pipelined.

    `producer.batch()` (kombu) buffers the publishes and sends them to Redis in
    one pipeline per PUBLISH_BATCH_SIZE messages; a transport without batches
    (the embedded filesystem broker) publishes each at once. The messages are
    the ones `apply_async` always builds: same routing, same headers.
    """
    with refresh_connection.app.producer_or_acquire() as producer, producer.batch(max_size=PUBLISH_BATCH_SIZE):
        for connection_id, countdown in batch:
            refresh_connection.apply_async(args=[connection_id], countdown=countdown, producer=producer)


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
