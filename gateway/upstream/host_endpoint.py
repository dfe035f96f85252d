"""How web and worker processes reach a stdio server: through the MCP host, like any HTTP upstream.

The host's URL is trusted configuration (TOOLGATE_MCP_HOST_URL, loopback by default), so
its target skips the private-address guard that operator-entered URLs go through. What the
host needs to start the child (the server's spec, spec.py) and a connection's credential
(resolved by the broker after grant ∩ declared) travel to it in request headers over that
link, never in Celery arguments or logs: the host reads no database.
"""

from __future__ import annotations

import logging

import httpx2
from django.conf import settings

from gateway.upstream.client import UpstreamError, UpstreamTarget
from runner.capabilities import AuthCapability

logger = logging.getLogger(__name__)

STOP_TIMEOUT_S = 2.0


def host_url(slug: str) -> str:
    return f"{settings.TOOLGATE_MCP_HOST_URL.rstrip('/')}/servers/{slug}/mcp"


def host_target(
    *,
    server_id: str,
    slug: str,
    spec: str,
    auth: AuthCapability | None = None,
    connection_id: str | None = None,
) -> UpstreamTarget:
    """The host's endpoint for `slug`, with the server's encoded spec (built once per server row, never per call)."""
    token = settings.TOOLGATE_MCP_HOST_TOKEN
    if not token:
        raise UpstreamError(UpstreamError.AUTH, "TOOLGATE_MCP_HOST_TOKEN is not set, so the MCP host cannot be used")
    headers = [("Authorization", f"Bearer {token}"), ("X-Toolgate-Spec", spec)]
    if auth is not None:
        headers += [("X-Toolgate-Connection", str(connection_id or "")), ("X-Toolgate-Credential", auth.access_token())]
    return UpstreamTarget(server_id=server_id, url=host_url(slug), allow_private=True, headers=tuple(headers))


def host_stop_connection(connection_id: str) -> bool:
    """Tell the host to stop the children of a connection that can no longer be used; True when it answered.

    Called after the commit that revoked the connection (or marked it for
    re-authorisation). Only a speed-up: the broker already refuses the connection
    on the next call, before the host is reached, and an idle child stops by
    itself. So a host that is down or slow costs at most STOP_TIMEOUT_S, is
    logged, and never fails the revocation.
    """
    token = settings.TOOLGATE_MCP_HOST_TOKEN
    if not token:
        return False
    url = f"{settings.TOOLGATE_MCP_HOST_URL.rstrip('/')}/connections/{connection_id}/stop"
    try:
        response = httpx2.post(url, headers={"Authorization": f"Bearer {token}"}, timeout=STOP_TIMEOUT_S)
    except Exception as exc:  # never into the revocation: it is committed already
        logger.warning(
            "the MCP host was not told to stop connection %s's children (%s); they stop when idle",
            connection_id,
            type(exc).__name__,
        )
        return False
    if response.status_code != 200:
        logger.warning(
            "the MCP host answered %s when told to stop connection %s's children; they stop when idle",
            response.status_code,
            connection_id,
        )
        return False
    return True
