"""The one error of every exchange with an upstream MCP server (the SDK's path and the plain-JSON one)."""

from __future__ import annotations


class UpstreamError(Exception):
    """A failed exchange with an upstream. `kind` says which; the message is Toolgate's own."""

    UNREACHABLE = "unreachable"
    REFUSED = "refused"  # the address check refused the URL
    AUTH = "auth"  # HTTP 401/403
    PROTOCOL = "protocol"  # a JSON-RPC error
    HTTP = "http"  # another HTTP error status
    TIMEOUT = "timeout"
    TOO_LARGE = "too_large"
    LOST = "lost"  # the session is gone (restart, 404); the request did not run
    CANCELLED = "cancelled"  # the caller cancelled it (or left); the upstream was told

    def __init__(self, kind: str, safe_message: str) -> None:
        super().__init__(safe_message)
        self.kind = kind
        self.safe_message = safe_message
