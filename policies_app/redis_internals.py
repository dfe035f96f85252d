"""The one place that reaches past redis-py's public API (redis 8.1.0 with hiredis 3.5.0, both pinned).

The governance push check (`policies_app.governance`) asks, once per call, whether a subscription has
anything to read. redis-py answers that with a zero-timeout `recv` framed by two `settimeout` calls;
asking the kernel with `poll(0)` costs one syscall, but needs the connection's socket and whether its
parser already holds bytes read from it: `Connection._sock`, `Connection._parser`, hiredis' reader
(`_HiredisParser._reader.has_data()`) and redis-py's own parser buffer (`_buffer.unread_bytes()`).
If their shape changes, the functions here raise AttributeError and the caller falls back to redis-py's
own check. tests/arch/test_private_dependency_names.py pins the versions and holds each name to its meaning.
"""

from __future__ import annotations

import socket

from redis._parsers import _HiredisParser
from redis.connection import DefaultParser


def connection_socket(connection: object) -> socket.socket | None:
    """The connection's socket; None while it is not connected."""
    return getattr(connection, "_sock", None)


def parser_holds_bytes(connection: object) -> bool:
    """Whether the connection's parser holds bytes already read from the socket.

    AttributeError: a parser of a shape this module does not know (the caller then asks redis-py).
    """
    parser = getattr(connection, "_parser", None)
    reader = getattr(parser, "_reader", None)
    if reader is not None:  # hiredis: its reader keeps what was fed and not yet parsed
        return bool(reader.has_data())
    return bool(parser._buffer.unread_bytes())  # type: ignore[attr-defined]  # redis-py's own parser


def replies_parsed_by_hiredis() -> bool:
    """Whether redis-py parses replies in C (hiredis installed and chosen): the hot path's round trip counts on it."""
    return DefaultParser is _HiredisParser
