"""The Celery app: configured from Django settings (CELERY_*), tasks found in the apps.

The broker is Redis when REDIS_URL is set, otherwise an embedded kombu
transport on the local filesystem under var/ (same code path: a real broker,
a real worker process, real acks). Production without REDIS_URL refuses to
start (settings), so tasks never silently run eagerly.
"""

from __future__ import annotations

import os
import tempfile

# A worker's refresh counters are served on TOOLGATE_WORKER_METRICS_PORT (config/worker_metrics.py); prefork
# children count into files here, summed by the parent. Set before prometheus_client is first imported.
if os.environ.get("TOOLGATE_WORKER_METRICS_PORT") and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="toolgate-worker-prometheus-")

from celery import Celery
from celery.signals import (
    before_task_publish,
    task_postrun,
    task_prerun,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
)

from changes_app import context as change_context
from config import logs, worker_metrics
from config.tracing import tracing_configure

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("toolgate")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# A task's log lines carry its id and the id of the request that queued it (config/logs.py).
before_task_publish.connect(logs.task_headers_bound, weak=False)
task_prerun.connect(logs.task_context_bound, weak=False)
task_postrun.connect(logs.task_context_cleared, weak=False)
task_prerun.connect(change_context.task_source_bound, weak=False)
task_postrun.connect(change_context.task_source_cleared, weak=False)
# Traces (off unless OTEL_* asks): in the worker (solo pool) and each forked child (prefork); once per process.
worker_init.connect(lambda **_: tracing_configure(), weak=False)
worker_process_init.connect(lambda **_: tracing_configure(), weak=False)
# Prometheus: the worker's own counters (OAuth refreshes happen here), on TOOLGATE_WORKER_METRICS_PORT.
worker_init.connect(lambda **_: worker_metrics.worker_metrics_serve(), weak=False)
worker_process_shutdown.connect(lambda pid=None, **_: worker_metrics.worker_process_gone(pid), weak=False)
