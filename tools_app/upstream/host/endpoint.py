"""How web and worker processes reach a stdio server: through the MCP host, like any HTTP upstream.

The host's URL is trusted configuration (TOOLGATE_MCP_HOST_URL, loopback by default), so
its target skips the private-address guard that operator-entered URLs go through. A
connection's credential (resolved by the broker after grant ∩ declared) travels to the host
in a request header over that link, never in Celery arguments or logs.
"""

from __future__ import annotations

from django.conf import settings

from runner.capabilities import AuthCapability
from tools_app.upstream.client import UpstreamError, UpstreamTarget


def host_url(slug: str) -> str:
    return f"{settings.TOOLGATE_MCP_HOST_URL.rstrip('/')}/servers/{slug}/mcp"


def host_target(
    *, server_id: str, slug: str, auth: AuthCapability | None = None, connection_id: str | None = None
) -> UpstreamTarget:
    token = settings.TOOLGATE_MCP_HOST_TOKEN
    if not token:
        raise UpstreamError(UpstreamError.AUTH, "TOOLGATE_MCP_HOST_TOKEN is not set, so the MCP host cannot be used")
    headers = [("Authorization", f"Bearer {token}")]
    if auth is not None:
        headers += [("X-Toolgate-Connection", str(connection_id or "")), ("X-Toolgate-Credential", auth.access_token())]
    return UpstreamTarget(server_id=server_id, url=host_url(slug), allow_private=True, headers=tuple(headers))
