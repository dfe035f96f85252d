"""Which connections need a background refresh, and when each is queued.

`next_refresh_at` (expiry minus the refresh window, indexed) says when a
connection is due, so a sweep reads only due rows, in batches, oldest first.
A swept row's `next_refresh_at` moves past the task's retry horizon in the same
transaction, so the next sweep does not queue it again while its task is
pending; the refresh then sets the next one (a success: expiry minus the
window; a failure: an exponential backoff, see refresh.py). Tasks are sent on
commit, each with a random countdown within the jitter window, so connections
that expire together are not refreshed in one burst.

A sweep is bounded: it claims at most `limit` rows (TOOLGATE_REFRESH_SWEEP_LIMIT),
so its time does not grow with how many are due; the rest wait for the next
sweep, oldest first. Each batch is handed to `enqueue` as one list once its
claim has committed, and the task sends it through one producer in pipelined
round trips (tasks.py). A send that fails after the commit leaves its rows to
the sweep after RETRY_HORIZON, like a task that never ran.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from connections_app.models import Connection

SWEEP_BATCH_SIZE = 1000
# How long a queued refresh may take, retries included, before a sweep may queue it again.
RETRY_HORIZON = timedelta(minutes=5)

# Receives one committed batch: (connection id, countdown in seconds) per row.
Enqueue = Callable[[list[tuple[str, float]]], object]


def refresh_due(*, now: datetime, limit: int) -> list[Connection]:
    """Due OAuth connections, oldest first, locked (others' sweeps skip them)."""
    return list(
        Connection.objects.filter(
            next_refresh_at__lte=now,
            credential_type=Connection.CredentialType.OAUTH2,
            status=Connection.Status.ACTIVE,
            revoked_at__isnull=True,
        )
        .order_by("next_refresh_at")
        .select_for_update(skip_locked=True)
        .only("pk", "next_refresh_at")[:limit]
    )


def refresh_sweep_once(
    *,
    enqueue: Enqueue,
    now: datetime | None = None,
    limit: int | None = None,
    batch_size: int = SWEEP_BATCH_SIZE,
    time_budget_s: float | None = None,
) -> int:
    """Queue due connections, at most `limit` (default TOOLGATE_REFRESH_SWEEP_LIMIT); returns how many.

    With `time_budget_s`, no further batch is claimed once that much time has
    passed: on a machine slower than the limit was chosen for, the sweep still
    ends well inside its task's time limit, and the next sweep goes on.
    """
    jitter = float(settings.TOOLGATE_REFRESH_JITTER_SECONDS)
    remaining = settings.TOOLGATE_REFRESH_SWEEP_LIMIT if limit is None else limit
    stop_at = None if time_budget_s is None else time.monotonic() + time_budget_s
    queued = 0
    while remaining > 0 and (stop_at is None or time.monotonic() < stop_at):
        claim = min(batch_size, remaining)
        with transaction.atomic():
            moment = now or timezone.now()
            due = refresh_due(now=moment, limit=claim)
            if not due:
                return queued
            Connection.objects.filter(pk__in=[row.pk for row in due]).update(
                next_refresh_at=moment + timedelta(seconds=jitter) + RETRY_HORIZON
            )
            batch = [(str(row.pk), random.uniform(0, jitter)) for row in due]  # noqa: S311 - spreading load
            transaction.on_commit(lambda batch=batch: enqueue(batch))
        queued += len(due)
        remaining -= len(due)
        if len(due) < claim:
            break
    return queued
