"""Plain JSON POSTs to one checked upstream address, on runner/http1's keep-alive connections.

Two sets of them: the session's event loop's (`post`), and blocking sockets for a
web worker's own thread (`post_blocking`, the runner's fast path, no loop hop).

Why not httpx2 here: a pooled POST through httpx2 crosses its client,
httpcore2's pool and anyio's stream layers (about 2,800 Python calls per
request, profiled) and sends the head and the body in two writes;
`runner.http1.AsyncPool` sends one write per request and parses with
llhttp (bench/http_clients.py: about 8x less CPU per request than httpcore2's
async pool; docs/performance.md has the figures).

What it keeps of the guarded transport (`netguard.PinnedTransport`): it only
ever connects to the address that was resolved and checked when the session
opened, sends the URL's host as `Host` and as the TLS server name, and cuts an
answer larger than the response cap before it is parsed. A connection is
reused only when its answer ended cleanly, keep-alive (runner/http1/_async_pool.py); one
whose request was cancelled (the runtime budget) or failed is closed, never
reused. Requests are never retried here: a POST that may have run is not sent
twice.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from typing import Any

import httpx2

from core.framing import tls_context  # one TLS context per process, the SDK transport's too
from runner.http1 import (
    Answer,
    AsyncPool,
    BlockingPool,
    ConnectFailed,
    ConnectionClosed,
    Headers,
    MalformedAnswer,
    Origin,
    RequestHead,
    ResponseTooLarge,
    UnsendableRequest,
)

__all__ = ["Answer", "ConnectionClosed", "Http11Pool", "MalformedAnswer", "ResponseTooLarge", "UnsendableRequest"]

READ_TIMEOUT_S = 300.0
MAX_IDLE_CONNECTIONS = 8


class Http11Pool:
    """Keep-alive connections to one checked address, for POSTs to one URL."""

    def __init__(
        self,
        *,
        url: str,
        address: str,
        hostname: str,
        max_response_bytes: int,
        connect_timeout_s: float,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        parsed = httpx2.URL(url)
        tls = parsed.scheme == "https"
        self._origin = Origin(address, parsed.port or (443 if tls else 80), tls, hostname)
        self._target = parsed.raw_path
        self._fixed_headers = [(b"host", parsed.netloc), (b"user-agent", b"toolgate")] + [
            (name.encode("latin-1"), value.encode("latin-1")) for name, value in headers
        ]
        self._max_response_bytes = max_response_bytes
        self._connect_timeout_s = connect_timeout_s
        self._pool = AsyncPool(tls_context=tls_context, max_idle_per_origin=MAX_IDLE_CONNECTIONS)
        self._blocking = BlockingPool(tls_context=tls_context, max_idle_per_origin=MAX_IDLE_CONNECTIONS)

    def _request(self, headers: Headers, body: bytes, deadline: float) -> dict[str, Any]:
        """What both pools are asked, alike: the POST's head and body, the cap, the timeouts."""
        return {
            "origin": self._origin,
            "head": RequestHead(
                b"POST", self._target, [*self._fixed_headers, *headers, (b"content-length", b"%d" % len(body))]
            ),
            "body": body,
            "max_response_bytes": self._max_response_bytes,
            "connect_timeout_s": self._connect_timeout_s,
            "deadline": min(deadline, time.monotonic() + READ_TIMEOUT_S),
        }

    async def post(self, headers: Headers, body: bytes) -> Answer:
        """One POST with `headers` (name and value bytes, as sent).

        Raises OSError/ConnectionClosed/TimeoutError/ResponseTooLarge/MalformedAnswer/UnsendableRequest.
        """
        with _connect_errors():
            return await self._pool.request(**self._request(headers, body, math.inf))

    def post_blocking(self, headers: Headers, body: bytes, *, deadline: float) -> Answer:
        """`post` on this thread's blocking socket, answered before `deadline` (time.monotonic()); same errors."""
        with _connect_errors():
            return self._blocking.request(**self._request(headers, body, deadline))

    def close(self) -> None:
        self._pool.close()
        self._blocking.close()


@contextlib.contextmanager
def _connect_errors() -> Iterator[None]:
    """A failed connect raises its cause (the OSError, ssl.SSLError or TimeoutError), as the session classifies it."""
    try:
        yield
    except ConnectFailed as exc:
        if exc.__cause__ is None:
            raise
        raise exc.__cause__ from None
