"""A Celery worker's own metrics page (TOOLGATE_WORKER_METRICS_PORT): the refreshes counted in that process."""

from __future__ import annotations

import re

import httpx

from config.worker_metrics import worker_metrics_serve
from connections_app.metrics import refresh_counted
from tests.support.metrics import sample


def test_no_port_no_server(monkeypatch):
    monkeypatch.delenv("TOOLGATE_WORKER_METRICS_PORT", raising=False)
    assert worker_metrics_serve() is None


def test_the_worker_serves_its_refresh_counters_on_loopback():
    before = sample("toolgate_oauth_refresh_total", provider="slack", outcome="timeout")
    refresh_counted(provider="slack", outcome="timeout")
    server = worker_metrics_serve(port=0)
    assert server is not None
    try:
        assert server.server_address[0] == "127.0.0.1"
        page = httpx.get(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5).text
    finally:
        server.shutdown()
        server.server_close()

    counted = re.search(r'^toolgate_oauth_refresh_total\{outcome="timeout",provider="slack"\} (\S+)$', page, re.M)
    assert counted is not None
    assert float(counted.group(1)) == before + 1
