"""Log messages over MCP: the level a client asked for, in each era (docs/mcp-streaming.md).

- **2026-07-28**: a request carries `io.modelcontextprotocol/logLevel` in its `_meta`;
  without it the server must send no `notifications/message` for that request.
- **2025-11-25**: the client sends `logging/setLevel` once, and the level holds for its
  session. Toolgate keeps no sessions, and the SDK clients take the `Mcp-Session-Id` only
  from the answer to `initialize`, so the level cannot be sealed into the id the way the
  client's URL-elicitation declaration is (gateway/elicitation.py: that one is known at
  `initialize`; a level comes later). Instead `initialize` issues an id (when logging is
  served), and `logging/setLevel` keeps the level in the shared cache under that id, bound
  to the service account: any process reads it, and another account's id reaches nothing.

A client that asked for no level gets no log messages: that is the 2026 rule, and for
2025 it keeps every existing client's answers exactly as they were (log text is untrusted
upstream output, a model's context window pays for each line, and a client that did not
ask has no use for it).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from typing import Any, Final

from django.core.cache import cache
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types import LOG_LEVEL_META_KEY, PROTOCOL_VERSION_META_KEY

from gateway.inbound.protocol import MODERN_VERSIONS, SESSION_HEADER
from gateway.inbound.streaming import EVENT_STREAM
from runner.progress import LOG_LEVELS

LEVEL_TTL_S: Final = 30 * 24 * 3600  # a client re-initializes at least this often (as sealed sessions last)
MAX_SESSION_ID_CHARS: Final = 1024
_LEVEL_PREFIX: Final = "mcp-log-level:"


class SessionLogLevels:
    """The log level a 2025-11-25 client set for its session (`protocol.LogLevels`), in the shared cache."""

    def __init__(self, service_account_id: str, session_id: str | None) -> None:
        self._service_account_id = service_account_id
        usable = session_id is not None and 0 < len(session_id) <= MAX_SESSION_ID_CHARS
        self._session_id = session_id if usable else None

    def issue(self) -> str:
        """A fresh session id for a client that may set a level (its only use: the level's key)."""
        return secrets.token_urlsafe(24)

    def set_level(self, level: str) -> bool:
        """Keep `level` for this session; False when the request names no session."""
        key = self._key()
        if key is None:
            return False
        cache.set(key, level, timeout=LEVEL_TTL_S)
        return True

    def level(self) -> str | None:
        """The level this session set, or None (no session, never set, or expired): one cache read."""
        key = self._key()
        if key is None:
            return None
        level = cache.get(key)
        return level if level in LOG_LEVELS else None

    def _key(self) -> str | None:
        if self._session_id is None:
            return None
        digest = hashlib.sha256(f"{self._service_account_id}\x00{self._session_id}".encode()).hexdigest()
        return f"{_LEVEL_PREFIX}{digest}"


def call_log_level(message: Any, headers: Mapping[str, str], accept: str, levels: SessionLogLevels) -> str | None:
    """The level a `tools/call` that may be answered as a stream asks log messages at, else None.

    2026-07-28 (the version header, or the version in `_meta`, as `protocol.admit` tells the
    eras apart): the request's own `_meta` level (a level that is not one reads as none here;
    the protocol refuses it). Otherwise the level the session set, when the request names one.
    """
    if not isinstance(message, Mapping) or message.get("method") != "tools/call" or EVENT_STREAM not in accept:
        return None
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    if headers.get(MCP_PROTOCOL_VERSION_HEADER) in MODERN_VERSIONS or PROTOCOL_VERSION_META_KEY in meta:
        level = meta.get(LOG_LEVEL_META_KEY)
        return level if level in LOG_LEVELS else None
    if SESSION_HEADER not in headers:
        return None
    return levels.level()
