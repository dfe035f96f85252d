"""Upstream text in the MCP SDK's log records is bounded and loses its traceback."""

from __future__ import annotations

import logging

from config.logfilters import MAX_MESSAGE_CHARS, BoundedUpstreamRecords


def _record(name: str, message: str, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logging.LogRecord(name, logging.ERROR, __file__, 1, "%s", (message,), exc_info)


def test_sdk_records_are_cut_and_lose_their_traceback():
    try:
        raise ValueError("upstream body: " + "A" * 5000)
    except ValueError as exc:
        record = _record("mcp.client.streamable_http", "Error parsing JSON response: " + "B" * 5000, exc)

    assert BoundedUpstreamRecords().filter(record) is True

    assert len(record.getMessage()) == MAX_MESSAGE_CHARS + 1
    assert record.exc_info is None
    assert "A" * 10 not in logging.Formatter().format(record)


def test_other_records_are_left_alone():
    record = _record("tools_app.services", "x" * 1000)

    BoundedUpstreamRecords().filter(record)

    assert record.getMessage() == "x" * 1000
