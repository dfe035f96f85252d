"""Celery tasks of the upstream MCP sources: beat runs one discovery per server at its interval."""

from __future__ import annotations

import logging

from celery import shared_task

from tools_app.upstream.models import McpServer
from tools_app.upstream.services import DISCOVER_TASK, DiscoveryFailed, mcp_server_discover

logger = logging.getLogger(__name__)


@shared_task(name=DISCOVER_TASK, acks_late=True, ignore_result=True)
def discover_server(server_id: int) -> str:
    """Discover one server (beat's entry `mcp-discover:<slug>`, or the admin's "discover now").

    Takes the id, re-reads the row, returns early for a removed or disabled
    server. A failure is recorded on the server row by the service and not
    retried: the next interval tries again, and a retry storm would hammer a
    server that is already failing.
    """
    server = McpServer.objects.filter(pk=server_id, enabled=True, removed_at__isnull=True).first()
    if server is None:
        return "skipped: no such enabled server"
    try:
        report = mcp_server_discover(server_id=server.pk)
    except DiscoveryFailed as failure:
        logger.warning("mcp discovery failed for %s: %s", failure.slug, failure.safe_message[:200])
        return f"failed: {failure.safe_message[:200]}"
    return report.summary()
