"""Which connections need a background refresh, and when each is queued.

`next_refresh_at` (expiry minus the refresh window, indexed) says when a
connection is due, so a sweep reads only due rows, in batches, oldest first.
A swept row's `next_refresh_at` moves past the task's retry horizon in the same
transaction, so the next sweep does not queue it again while its task is
pending; a successful refresh sets the next one. Tasks are sent on commit,
each with a random countdown within the jitter window, so connections that
expire together are not refreshed in one burst.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from connections_app.models import Connection

SWEEP_BATCH_SIZE = 500
# How long a queued refresh may take, retries included, before a sweep may queue it again.
RETRY_HORIZON = timedelta(minutes=5)

Enqueue = Callable[[str, float], object]


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


def refresh_sweep_once(*, enqueue: Enqueue, now: datetime | None = None, batch_size: int = SWEEP_BATCH_SIZE) -> int:
    """Queue every due connection; returns how many were queued."""
    jitter = float(settings.TOOLGATE_REFRESH_JITTER_SECONDS)
    queued = 0
    while True:
        with transaction.atomic():
            moment = now or timezone.now()
            due = refresh_due(now=moment, limit=batch_size)
            if not due:
                return queued
            Connection.objects.filter(pk__in=[row.pk for row in due]).update(
                next_refresh_at=moment + timedelta(seconds=jitter) + RETRY_HORIZON
            )
            for row in due:
                countdown = random.uniform(0, jitter)  # noqa: S311 - spreading load, not a secret
                transaction.on_commit(lambda pk=str(row.pk), delay=countdown: enqueue(pk, delay))
            queued += len(due)
        if len(due) < batch_size:
            return queued
