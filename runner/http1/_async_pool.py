"""Keep-alive HTTP/1.1 connections per origin, capped, expiring when idle: the one source of both pools.

Why: one pool for the two places that make many small requests to the same
server, the runner's HTTP capability (GitHub) and the gateway's plain-JSON
`tools/call` POSTs to MCP upstreams (gateway/upstream/http11.py), on an
event loop (the async pool) and on a caller's own thread (the blocking one, the
sync web worker's fast path: no hand-off to the loop thread and back). This
file is the async one; runner/http1/_sync_pool.py is generated from it by
runner/http1/unasync.py (`make unasync`; tests/runner/test_http1_generated.py
fails when the generated file is not current). Why llhttp rather than a
library's pool: runner/http1/wire.py and docs/performance.md.

What a pool guarantees: it connects only to the address in its key (a caller
that resolved and checked an address passes that address, and the URL's host
as the TLS server name); it never opens more than `max_connections` at once
(a request at the cap waits for a connection to be put back or closed
until its connect timeout, then fails with PoolFull having sent nothing; an
idle connection of another origin is closed to make room); it keeps at most `max_idle_per_origin` idle connections of an
origin, each for at most `idle_expiry_s` (below the 5 s keep-alive of uvicorn,
the usual MCP server, so we do not send on a connection the server is
closing); it cuts an answer larger than the caller's response cap before
parsing more of it; it reuses a connection only when our request was written
whole and its answer ended cleanly, HTTP/1.1 keep-alive, with nothing after it
(not even the server's FIN), and closes one whose request failed or was
cancelled (a runtime budget); it never retries, so a request that may have
run (a POST) is never sent twice.

Expiry is checked whenever the pool is used (no timer, no thread): an idle
connection outlives its expiry only while nobody uses the pool, and is never
reused once expired.

Timeouts: `deadline` (time.monotonic()) bounds the whole request, connect
included; `read_timeout_s` bounds each wait for more of the answer (httpx's
meaning); `connect_timeout_s` the connect and the wait for a free slot.
Raised: ConnectFailed/PoolFull (nothing sent), then ConnectionClosed,
TimeoutError, ResponseTooLarge, MalformedAnswer, or UnsendableRequest (a header
we will not send; nothing sent).
"""

from __future__ import annotations

import math
import ssl
import time
from collections.abc import Callable

from runner.http1 import _io
from runner.http1.wire import Answer, ConnectFailed, Exchange, Origin, PoolFull, RequestHead

MAX_CONNECTIONS = 100  # httpx2's default cap, per pool
MAX_IDLE_PER_ORIGIN = 16
IDLE_EXPIRY_S = 4.0
SWEEP_EVERY_S = 1.0  # how often a request looks for expired idle connections of other origins


def _wait_s(deadline: float, at_most_s: float | None) -> float | None:
    """How long the next wait may take: until `deadline`, and at most `at_most_s`; TimeoutError once passed."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("the deadline passed")
    if at_most_s is None:
        return None if math.isinf(remaining) else remaining
    return min(remaining, at_most_s)


class AsyncConnection:
    """One keep-alive connection; at most one request in flight (HTTP/1.1 without pipelining)."""

    def __init__(self, stream: _io.AsyncStream) -> None:
        self._stream = stream
        self._exchange = Exchange()
        self.idle_since = 0.0
        self.released = False

    async def request(
        self,
        head: RequestHead,
        body: bytes,
        max_response_bytes: int,
        deadline: float,
        read_timeout_s: float | None,
    ) -> Answer:
        """Send one request in one write and read its whole answer."""
        wire = self._exchange.start(head, body, max_response_bytes)
        await self._stream.write(wire, _wait_s(deadline, None))
        while True:
            data = await self._stream.read(_wait_s(deadline, read_timeout_s))
            answer = self._exchange.feed(data)
            if answer is not None:
                return answer

    def reusable(self) -> bool:
        """Our request was written whole and its answer ended cleanly, keep-alive: the connection may go on."""
        return not self._stream.closed and self._stream.flushed() and self._exchange.reusable()

    def still_open(self) -> bool:
        """An idle connection the server has not closed or written to since (checked before reuse)."""
        return self._stream.quiet()

    def close(self) -> None:
        self._stream.close()


class AsyncPool:
    """Idle keep-alive connections per origin, for requests answered whole (see the module's docstring)."""

    def __init__(
        self,
        *,
        tls_context: Callable[[], ssl.SSLContext],
        max_connections: int = MAX_CONNECTIONS,
        max_idle_per_origin: int = MAX_IDLE_PER_ORIGIN,
        idle_expiry_s: float = IDLE_EXPIRY_S,
    ) -> None:
        """`tls_context` is called once, at the first TLS connection."""
        self._make_tls_context = tls_context
        self._tls_context: ssl.SSLContext | None = None
        self._max_idle = max_idle_per_origin
        self._idle_expiry_s = idle_expiry_s
        self._idle: dict[Origin, list[AsyncConnection]] = {}  # oldest first
        self._lock = _io.AsyncLock()
        self._max_connections = max_connections
        self._open = 0  # connections open (in use or idle), at most max_connections
        self._changed = _io.AsyncSignal()  # a connection was put back idle or closed
        self._next_sweep = 0.0
        self._closed = False

    async def request(
        self,
        origin: Origin,
        head: RequestHead,
        body: bytes,
        *,
        max_response_bytes: int,
        connect_timeout_s: float | None,
        deadline: float = math.inf,
        read_timeout_s: float | None = None,
    ) -> Answer:
        """One request on an idle or new connection of `origin`, answered whole (see the module's docstring)."""
        connection = await self._connection(origin, connect_timeout_s, deadline)
        keep = False
        try:
            answer = await connection.request(head, body, max_response_bytes, deadline, read_timeout_s)
            keep = connection.reusable()
            return answer
        finally:
            self._put_back(origin, connection, keep)

    def idle_count(self, origin: Origin | None = None) -> int:
        """Idle connections kept (of `origin`, or of all)."""
        with self._lock:
            if origin is not None:
                return len(self._idle.get(origin, ()))
            return sum(len(idle) for idle in self._idle.values())

    def _take_idle(self, origin: Origin) -> AsyncConnection | None:
        now = time.monotonic()
        while True:
            with self._lock:
                idle = self._idle.get(origin)
                if not idle:
                    return None
                connection = idle.pop()  # the most recently used: the least likely to be closing
            if now - connection.idle_since <= self._idle_expiry_s and connection.still_open():
                return connection
            self._discard(connection)

    def _put_back(self, origin: Origin, connection: AsyncConnection, keep: bool) -> None:
        now = time.monotonic()
        with self._lock:
            idle = self._idle.setdefault(origin, [])
            if keep and not self._closed and len(idle) < self._max_idle:
                connection.idle_since = now
                idle.append(connection)
                keep_it = True
            else:
                keep_it = False
            expired = self._expired(now)
        if keep_it:
            self._changed.notify()  # a request waiting at the cap may take it
        else:
            self._discard(connection)
        for old in expired:
            self._discard(old)

    def _expired(self, now: float) -> list[AsyncConnection]:
        """Idle connections past their expiry, taken out of the idle lists (at most once per SWEEP_EVERY_S)."""
        if now < self._next_sweep:
            return []
        self._next_sweep = now + SWEEP_EVERY_S
        expired: list[AsyncConnection] = []
        for origin, idle in list(self._idle.items()):
            while idle and now - idle[0].idle_since > self._idle_expiry_s:
                expired.append(idle.pop(0))
            if not idle:
                del self._idle[origin]
        return expired

    async def _connection(self, origin: Origin, timeout_s: float | None, deadline: float) -> AsyncConnection:
        """An idle connection of `origin`, or a new one once the cap allows (PoolFull past `timeout_s`)."""
        try:
            wait_s = _wait_s(deadline, timeout_s)
        except TimeoutError as exc:
            raise ConnectFailed(str(exc)) from exc  # nothing was sent
        give_up = math.inf if wait_s is None else time.monotonic() + wait_s
        while True:
            connection = self._take_idle(origin)
            if connection is not None:
                return connection
            with self._lock:
                reserved = self._open < self._max_connections
                if reserved:
                    self._open += 1
                victim = None if reserved else self._oldest_idle()
                generation = self._changed.generation()
            if reserved:
                break
            if victim is not None:  # another origin's idle connection gives way to a request
                self._discard(victim)
                continue
            remaining = give_up - time.monotonic()
            if remaining <= 0 or not await self._changed.wait(generation, remaining):
                raise PoolFull("every connection to the upstream is in use") from TimeoutError()
        try:
            tls = self._tls() if origin.tls else None
            stream = await _io.open_async_stream(origin, tls, _wait_s(deadline, timeout_s))
        except BaseException:
            with self._lock:
                self._open -= 1
            self._changed.notify()
            raise
        return AsyncConnection(stream)

    def _oldest_idle(self) -> AsyncConnection | None:
        """Taken out of its idle list (under the lock): the idle connection unused the longest, of any origin."""
        oldest: AsyncConnection | None = None
        owner: list[AsyncConnection] = []
        for idle in self._idle.values():
            if idle and (oldest is None or idle[0].idle_since < oldest.idle_since):
                oldest, owner = idle[0], idle
        if oldest is not None:
            owner.pop(0)
        return oldest

    def _discard(self, connection: AsyncConnection) -> None:
        """Close a connection and give its place under the cap back (once)."""
        connection.close()
        with self._lock:
            if connection.released:
                return
            connection.released = True
            self._open -= 1
        self._changed.notify()

    def _tls(self) -> ssl.SSLContext:
        with self._lock:
            if self._tls_context is None:
                self._tls_context = self._make_tls_context()
            return self._tls_context

    def close(self) -> None:
        """Close the idle connections; one in use is closed when its request ends."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                self._discard(connection)
