"""Log filters: nothing an upstream MCP server sends reaches the logs unbounded.

The MCP SDK logs what it receives in places (a tool name it drops, a redirect
location, the exception of a body it could not parse, with its traceback).
Records of the SDK's and its HTTP client's loggers are cut to a fixed length
and lose their traceback (the exception's type is kept), whatever handler
they reach.
"""

from __future__ import annotations

import logging

UPSTREAM_LOGGERS = ("mcp", "httpx2", "httpcore2")
MAX_MESSAGE_CHARS = 300


class BoundedUpstreamRecords(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(UPSTREAM_LOGGERS):
            return True
        message = record.getMessage()
        if record.exc_info and record.exc_info[0] is not None:
            message = f"{message} ({record.exc_info[0].__name__})"
        record.msg = message if len(message) <= MAX_MESSAGE_CHARS else message[:MAX_MESSAGE_CHARS] + "…"
        record.args = None
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        return True
