"""Celery tasks of the upstream MCP sources: beat runs one discovery per server at its interval,
and a pooled session that hears `notifications/tools/list_changed` queues one at once."""

from __future__ import annotations

import logging

from celery import shared_task
from django.core.cache import cache

from gateway.upstream.models import McpServer
from gateway.upstream.services import DISCOVER_TASK, DiscoveryFailed, mcp_server_discover

logger = logging.getLogger(__name__)

# While a discovery queued for a list change waits, further changes of that server queue nothing.
LIST_CHANGED_KEY = "mcp-list-changed:{server_id}"
LIST_CHANGED_HOLD_S = 60  # bounds the hold if the queued task is lost; the task lifts it when it starts


def discovery_queue_for_list_change(server_id: str) -> bool:
    """Queue a discovery of a server whose session said its tools changed; True when one was queued.

    Every process holding a session to the server hears the notification: the
    shared cache lets the first one queue and the others see it queued. The task
    lifts the hold as it starts, so a change announced during a discovery queues
    the next one (a rug pull is caught at the next call, not the next interval).
    """
    if not cache.add(LIST_CHANGED_KEY.format(server_id=server_id), 1, timeout=LIST_CHANGED_HOLD_S):
        return False
    discover_server.apply_async(args=[int(server_id)])
    return True


@shared_task(name=DISCOVER_TASK, acks_late=True, ignore_result=True)
def discover_server(server_id: int) -> str:
    """Discover one server (beat's entry `mcp-discover:<slug>`, or the admin's "discover now").

    Takes the id, re-reads the row, returns early for a removed or disabled
    server. A failure is recorded on the server row by the service and not
    retried: the next interval tries again, and a retry storm would hammer a
    server that is already failing.
    """
    cache.delete(LIST_CHANGED_KEY.format(server_id=server_id))  # a change announced from now on queues again
    server = McpServer.objects.filter(pk=server_id, enabled=True, removed_at__isnull=True).first()
    if server is None:
        return "skipped: no such enabled server"
    try:
        report = mcp_server_discover(server_id=server.pk)
    except DiscoveryFailed as failure:
        logger.warning("mcp discovery failed for %s: %s", failure.slug, failure.safe_message[:200])
        return f"failed: {failure.safe_message[:200]}"
    return report.summary()
