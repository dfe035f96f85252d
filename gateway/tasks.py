"""Celery tasks of the gateway (found by Celery's autodiscovery under this name).

The upstream MCP discovery task, defined beside its service in gateway/upstream/tasks.py; its
Celery name stays `tools_app.upstream.discover_server` (beat rows and queued messages carry it).
"""

from __future__ import annotations

from gateway.upstream.tasks import discover_server

__all__ = ["discover_server"]
