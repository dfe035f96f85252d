"""Prometheus metrics of a Celery worker, served on `TOOLGATE_WORKER_METRICS_PORT`.

OAuth refreshes (the sweep's) happen in workers, which no web scrape can see:
each worker serves its own counters for Prometheus to scrape beside the web
processes'. A prefork worker's children count into `PROMETHEUS_MULTIPROC_DIR`
(set by config/celery.py when the port is) and the parent sums them; a solo
worker serves its own registry. Unset, nothing listens.

The page holds provider names and outcomes only; bind the port to the
worker's private network (`TOOLGATE_WORKER_METRICS_ADDR`, default loopback).
"""

from __future__ import annotations

import os
from http.server import HTTPServer

from prometheus_client import REGISTRY, CollectorRegistry, multiprocess, start_http_server

DEFAULT_ADDR = "127.0.0.1"


def worker_registry() -> CollectorRegistry:
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not directory:
        return REGISTRY
    registry = CollectorRegistry(auto_describe=False)
    multiprocess.MultiProcessCollector(registry, path=directory)
    return registry


def worker_metrics_serve(port: int | None = None, addr: str | None = None) -> HTTPServer | None:
    """Serve the worker's metrics on a daemon thread; None when no port is configured."""
    if port is None:
        configured = os.environ.get("TOOLGATE_WORKER_METRICS_PORT", "")
        if not configured:
            return None
        port = int(configured)
    server, _thread = start_http_server(
        port, addr=addr or os.environ.get("TOOLGATE_WORKER_METRICS_ADDR", DEFAULT_ADDR), registry=worker_registry()
    )
    return server


def worker_process_gone(pid: int | None) -> None:
    """A prefork child exits: its live gauges go, its counters stay in the sum."""
    if pid is not None and os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(pid)
