"""The Celery app: configured from Django settings (CELERY_*), tasks found in the apps.

The broker is Redis when REDIS_URL is set, otherwise an embedded kombu
transport on the local filesystem under var/ (same code path: a real broker,
a real worker process, real acks). Production without REDIS_URL refuses to
start (settings), so tasks never silently run eagerly.
"""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import before_task_publish, task_postrun, task_prerun, worker_init, worker_process_init

from config import logs
from config.tracing import tracing_configure

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("toolgate")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# A task's log lines carry its id and the id of the request that queued it (config/logs.py).
before_task_publish.connect(logs.task_headers_bound, weak=False)
task_prerun.connect(logs.task_context_bound, weak=False)
task_postrun.connect(logs.task_context_cleared, weak=False)
# Traces (off unless OTEL_* asks): in the worker (solo pool) and each forked child (prefork); once per process.
worker_init.connect(lambda **_: tracing_configure(), weak=False)
worker_process_init.connect(lambda **_: tracing_configure(), weak=False)
