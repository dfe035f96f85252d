"""Keep-alive HTTP/1.1 connections on the running event loop, and the httpx transport over them.

Why: one HTTP client for the two places that make many small requests to the
same server: the runner's HTTP capability (GitHub) and the gateway's plain
JSON `tools/call` POSTs to MCP upstreams (tools_app/upstream/http11.py).
httpx's default transport (httpcore's pool over anyio) cost about 1 ms of CPU
per request here, more than the runner's twelve stages together, and a pooled
POST through httpx2 crosses its client, httpcore2's pool and anyio's stream
layers (about 2,800 Python calls per request, profiled) and sends the head and
the body in two writes. Here a connection is an `asyncio.Protocol` with h11
for the wire format (the parser httpcore and uvicorn use): one write per
request, parsing in `data_received`, one future per request; a warm request
is that write and the answer's bytes on a connection already open.

What a pool guarantees: it connects only to the address in its key (a caller
that resolved and checked an address passes that address, and the URL's host
as the server name for TLS); it cuts an answer larger than the caller's
response cap before parsing more of it; it reuses a connection only when h11
says both sides finished the exchange cleanly and nothing arrived since (not
even the server's FIN), and closes one whose request failed or was cancelled
(a runtime budget); it never retries, so a request that may have run (a
POST) is never sent twice.

`KeepAliveTransport` puts httpx in front for the runner: URLs, headers,
content decoding (gzip, counted after decompression by HttpCapability) and
httpx's exception types are as with httpx's own transport. What it does not
do, and who does instead: proxies and tracing. The composition root keeps
httpx's own transport when an HTTP(S)/ALL_PROXY variable applies
(`proxy_applies`) or when OpenTelemetry instruments httpx (config/runtime.py).

A pool belongs to one event loop (HttpCapability keeps one client per loop,
an MCP session's caller lives on its session's loop). `BlockingPool` keeps
the same guarantees on blocking sockets for callers on their own threads (the
sync web worker's plain-JSON MCP calls and HttpCapability.request_blocking),
any number of threads at once.
"""

from __future__ import annotations

import asyncio
import select
import socket
import ssl
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import h11
import httpx

# A response's status line and headers together; more is an upstream we do not want to parse.
MAX_HEAD_BYTES = 64 * 1024
MAX_IDLE_PER_ORIGIN = 16
DEFAULT_PORTS = {"http": 80, "https": 443}

Headers = Sequence[tuple[bytes, bytes]]


class ResponseTooLarge(Exception):
    """The answer went past the response cap (nothing of it is kept)."""


class ConnectionClosed(ConnectionError):
    """The upstream closed the connection before answering completely (its cause: the socket's error, if any)."""


class MalformedAnswer(Exception):
    """The upstream's bytes are not HTTP/1.1 (h11 refused them)."""


class Origin(NamedTuple):
    """Where a pool's connections go: the address connected to, and the name TLS sends and verifies."""

    address: str
    port: int
    tls: bool
    server_name: str


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    reason: bytes
    raw_headers: Headers  # as h11 parsed them: names lower-cased, repeats kept
    body: bytes

    @property
    def headers(self) -> dict[str, str]:
        """Names lower-cased; a repeated header keeps its last value."""
        return {name.decode("latin-1"): value.decode("latin-1") for name, value in self.raw_headers}


_NO_RESPONSE = h11.Response(status_code=200, headers=[])


class _Exchange:
    """One h11 client connection's request/answer cycle: what the async and the blocking connections share.

    `start` encodes a request (one write); `feed` takes the bytes that arrived
    and returns the whole answer once it is complete (None: more is needed),
    or raises ResponseTooLarge, ConnectionClosed or MalformedAnswer.
    """

    def __init__(self) -> None:
        self._h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        self._max_response_bytes = 0
        self._response = _NO_RESPONSE
        self._body: list[bytes] = []
        self._received = 0

    def start(self, head: h11.Request, body: bytes, max_response_bytes: int) -> bytes:
        """The request's bytes (h11.LocalProtocolError: a request h11 will not send)."""
        self._response, self._body, self._received = _NO_RESPONSE, [], 0
        self._max_response_bytes = max_response_bytes
        wire = self._h11.send(head) or b""
        if body:
            wire += self._h11.send(h11.Data(data=body)) or b""
        return wire + (self._h11.send(h11.EndOfMessage()) or b"")

    def feed(self, data: bytes) -> Answer | None:
        """`data` received (b"": the upstream closed its side); the answer once whole."""
        self._h11.receive_data(data)
        while True:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError:
                if not data:  # the upstream closed in the middle of its answer
                    raise ConnectionClosed("the connection to the upstream closed") from None
                raise MalformedAnswer("the upstream's answer is not HTTP/1.1") from None
            if event is h11.NEED_DATA:
                return None
            if isinstance(event, h11.Response):
                self._response = event
            elif isinstance(event, h11.Data):
                self._received += len(event.data)
                if self._received > self._max_response_bytes:
                    raise ResponseTooLarge
                self._body.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                head = self._response  # h11 gives a Response before EndOfMessage
                return Answer(head.status_code, bytes(head.reason), head.headers, b"".join(self._body))
            elif isinstance(event, h11.ConnectionClosed):
                raise ConnectionClosed("the connection to the upstream closed")
            # h11.InformationalResponse (1xx): wait for the final answer

    def reusable(self) -> bool:
        """Both sides finished the exchange cleanly: start the next one."""
        if self._h11.our_state is not h11.DONE or self._h11.their_state is not h11.DONE:
            return False
        self._h11.start_next_cycle()
        return True


def _socket_quiet(sock: socket.socket) -> bool:
    """An idle socket the server has not closed or written to since (checked before reuse)."""
    try:
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        return not poller.poll(0)
    except (OSError, ValueError):
        return False


class Connection(asyncio.Protocol):
    """One keep-alive connection; at most one request in flight (HTTP/1.1 without pipelining)."""

    def __init__(self) -> None:
        self._exchange = _Exchange()
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[Answer] | None = None
        # Set while an answer is awaited with a timeout per read: each arrival pushes the deadline on.
        self._per_read: asyncio.Timeout | None = None
        self._read_timeout_s = 0.0
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        closed = ConnectionClosed("the connection to the upstream closed")
        closed.__cause__ = exc
        self._fail(closed)

    def eof_received(self) -> bool:
        self._feed(b"")
        return False  # close our side too

    def data_received(self, data: bytes) -> None:
        if self._per_read is not None and not self._per_read.expired():
            self._per_read.reschedule(asyncio.get_running_loop().time() + self._read_timeout_s)
        self._feed(data)

    def _feed(self, data: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            self.close()  # bytes nobody asked for: this connection is not trusted any more
            return
        try:
            answer = self._exchange.feed(data)
        except (ResponseTooLarge, ConnectionClosed, MalformedAnswer) as exc:
            self._fail(exc)
            return
        if answer is not None:
            self._waiter.set_result(answer)

    def _fail(self, exc: BaseException) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
            self.close()

    async def request(
        self, head: h11.Request, body: bytes, max_response_bytes: int, read_timeout_s: float | None, per_read: bool
    ) -> Answer:
        """Send one request in one write and wait for its whole answer (h11.LocalProtocolError: not sendable).

        `read_timeout_s` bounds the whole answer, or with `per_read` each wait for more of it (httpx's meaning).
        """
        if self._transport is None or self.closed:
            raise ConnectionClosed("the connection to the upstream closed")
        wire = self._exchange.start(head, body, max_response_bytes)
        self._waiter = asyncio.get_running_loop().create_future()
        self._transport.write(wire)
        async with asyncio.timeout(read_timeout_s) as deadline:
            if per_read and read_timeout_s is not None:
                self._per_read, self._read_timeout_s = deadline, read_timeout_s
            try:
                return await self._waiter
            finally:
                self._per_read = None

    def reusable(self) -> bool:
        """Both sides finished the exchange cleanly and may go on: start the next one."""
        return not self.closed and self._exchange.reusable()

    def still_open(self) -> bool:
        """An idle connection the server has not closed or written to since (checked before reuse)."""
        if self.closed or self._transport is None:
            return False
        sock = self._transport.get_extra_info("socket")
        return sock is not None and _socket_quiet(sock)

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()


class ConnectFailed(Exception):
    """Opening a connection failed (its cause: the OSError, ssl.SSLError or TimeoutError); nothing was sent."""


class Pool:
    """Idle keep-alive connections per origin, for requests answered whole (see the module's docstring)."""

    def __init__(
        self, *, tls_context: Callable[[], ssl.SSLContext], max_idle_per_origin: int = MAX_IDLE_PER_ORIGIN
    ) -> None:
        """`tls_context` is called once, at the first TLS connection."""
        self._make_tls_context = tls_context
        self._tls_context: ssl.SSLContext | None = None
        self._max_idle = max_idle_per_origin
        self._idle: dict[Origin, list[Connection]] = {}
        self._closed = False

    async def request(
        self,
        origin: Origin,
        head: h11.Request,
        body: bytes,
        *,
        max_response_bytes: int,
        connect_timeout_s: float | None,
        read_timeout_s: float | None,
        read_timeout_per_read: bool = False,
    ) -> Answer:
        """One request on an idle or new connection of `origin`.

        Raises ConnectFailed (nothing sent), then ConnectionClosed, TimeoutError (read),
        ResponseTooLarge, MalformedAnswer or h11.LocalProtocolError (a header h11 will not send).
        """
        connection = self._take_idle(origin) or await self._connect(origin, connect_timeout_s)
        keep = False
        try:
            answer = await connection.request(head, body, max_response_bytes, read_timeout_s, read_timeout_per_read)
            keep = connection.reusable()
            return answer
        finally:
            idle = self._idle.setdefault(origin, [])
            if keep and not self._closed and len(idle) < self._max_idle:
                idle.append(connection)
            else:
                connection.close()

    def _take_idle(self, origin: Origin) -> Connection | None:
        idle = self._idle.get(origin)
        while idle:
            connection = idle.pop()
            if connection.still_open():
                return connection
            connection.close()
        return None

    async def _connect(self, origin: Origin, timeout_s: float | None) -> Connection:
        loop = asyncio.get_running_loop()
        tls = self._tls() if origin.tls else None
        try:
            async with asyncio.timeout(timeout_s):
                _transport, connection = await loop.create_connection(
                    Connection,
                    host=origin.address,
                    port=origin.port,
                    ssl=tls,
                    server_hostname=origin.server_name if tls else None,
                )
        except (OSError, ssl.SSLError, TimeoutError) as exc:
            raise ConnectFailed(str(exc)) from exc
        return connection

    def _tls(self) -> ssl.SSLContext:
        if self._tls_context is None:
            self._tls_context = self._make_tls_context()
        return self._tls_context

    def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()


# --- the same, on blocking sockets, for callers on their own threads --------------------------

RECV_BYTES = 64 * 1024


class BlockingConnection:
    """One keep-alive connection on a blocking socket, used by one thread at a time."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._exchange = _Exchange()
        self.closed = False

    def request(
        self,
        head: h11.Request,
        body: bytes,
        max_response_bytes: int,
        deadline: float,
        read_timeout_s: float | None = None,
    ) -> Answer:
        """Send one request in one write and read its whole answer before `deadline` (time.monotonic()).

        `read_timeout_s` also bounds each wait for more of the answer (httpx's per-read meaning).
        """
        wire = self._exchange.start(head, body, max_response_bytes)
        self._wait_until(deadline)
        self._sock.sendall(wire)
        while True:
            self._wait_until(deadline, read_timeout_s)
            answer = self._exchange.feed(self._sock.recv(RECV_BYTES))
            if answer is not None:
                return answer

    def _wait_until(self, deadline: float, at_most_s: float | None = None) -> None:
        """The socket's next send or receive waits at most until `deadline`, and at most `at_most_s`."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the deadline passed")
        self._sock.settimeout(remaining if at_most_s is None else min(remaining, at_most_s))

    def reusable(self) -> bool:
        """Both sides finished the exchange cleanly and may go on: start the next one."""
        return not self.closed and self._exchange.reusable()

    def still_open(self) -> bool:
        """An idle connection the server has not closed or written to since (checked before reuse)."""
        return not self.closed and _socket_quiet(self._sock)

    def close(self) -> None:
        self.closed = True
        self._sock.close()


class BlockingPool:
    """Idle keep-alive connections per origin on blocking sockets: `Pool`'s guarantees, for any thread.

    Why: a sync web worker that hands a request to the event loop thread waits to
    be woken from it, a thread switch each way plus the loop's task, timer and
    selector work around one small exchange. A thread that owns the connection
    for the length of its request sends and reads on it directly. Thread-safe:
    a connection is taken from the idle list under a lock and used by one thread.
    The deadline bounds the connect, every send and every read.
    """

    def __init__(
        self, *, tls_context: Callable[[], ssl.SSLContext], max_idle_per_origin: int = MAX_IDLE_PER_ORIGIN
    ) -> None:
        """`tls_context` is called once, at the first TLS connection."""
        self._make_tls_context = tls_context
        self._tls_context: ssl.SSLContext | None = None
        self._max_idle = max_idle_per_origin
        self._idle: dict[Origin, list[BlockingConnection]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def request(
        self,
        origin: Origin,
        head: h11.Request,
        body: bytes,
        *,
        max_response_bytes: int,
        connect_timeout_s: float,
        deadline: float,
        read_timeout_s: float | None = None,
    ) -> Answer:
        """One request on an idle or new connection of `origin`, answered whole before `deadline`.

        `read_timeout_s`, if given, also bounds each wait for more of the answer.
        Raises ConnectFailed (nothing sent), then ConnectionClosed, TimeoutError,
        ResponseTooLarge, MalformedAnswer or h11.LocalProtocolError (a header h11 will not send).
        """
        connection = self._take_idle(origin) or self._connect(origin, connect_timeout_s, deadline)
        keep = False
        try:
            try:
                answer = connection.request(head, body, max_response_bytes, deadline, read_timeout_s)
            except (ConnectionClosed, TimeoutError):
                raise
            except OSError as exc:  # reset, broken pipe: as `Connection.connection_lost` reports them
                raise ConnectionClosed("the connection to the upstream closed") from exc
            keep = connection.reusable()
            return answer
        finally:
            with self._lock:
                idle = self._idle.setdefault(origin, [])
                if keep and not self._closed and len(idle) < self._max_idle:
                    idle.append(connection)
                    connection = None  # type: ignore[assignment]
            if connection is not None:
                connection.close()

    def _take_idle(self, origin: Origin) -> BlockingConnection | None:
        while True:
            with self._lock:
                idle = self._idle.get(origin)
                if not idle:
                    return None
                connection = idle.pop()
            if connection.still_open():
                return connection
            connection.close()

    def _connect(self, origin: Origin, timeout_s: float, deadline: float) -> BlockingConnection:
        timeout_s = min(timeout_s, deadline - time.monotonic())
        try:
            if timeout_s <= 0:
                raise TimeoutError("the deadline passed")
            sock = socket.create_connection((origin.address, origin.port), timeout=timeout_s)
        except (OSError, TimeoutError) as exc:
            raise ConnectFailed(str(exc)) from exc
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as asyncio's transports do
            if origin.tls:
                sock = self._tls().wrap_socket(sock, server_hostname=origin.server_name)  # handshake in the timeout
        except (OSError, ssl.SSLError) as exc:
            sock.close()
            raise ConnectFailed(str(exc)) from exc
        return BlockingConnection(sock)

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
                connection.close()


# --- httpx in front, for the runner's HttpCapability ----------------------------------------


def proxy_applies(url: str) -> bool:
    """Would httpx (trust_env) send a request for this URL through a proxy from the environment?"""
    parts = httpx.URL(url)
    proxies = urllib.request.getproxies_environment()
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass_environment(parts.host, proxies)  # type: ignore[attr-defined]  # in 3.11, untyped


class KeepAliveTransport(httpx.AsyncBaseTransport):
    """httpx's transport interface over a `Pool`; answers are read whole, up to `max_response_bytes`.

    An answer past the cap raises ResponseTooLarge (HttpCapability reports it as too large,
    as it does for a body that grows past the cap when decoded).
    """

    def __init__(self, *, max_response_bytes: int, ssl_context: ssl.SSLContext | None = None) -> None:
        self._max_response_bytes = max_response_bytes
        # httpx's own trust: certifi, SSL_CERT_FILE/DIR
        self._pool = Pool(tls_context=(lambda: ssl_context) if ssl_context else httpx.create_ssl_context)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        url = request.url
        origin = Origin(url.host, url.port or DEFAULT_PORTS[url.scheme], url.scheme == "https", url.host)
        body = await request.aread()
        try:
            head = h11.Request(method=request.method, target=url.raw_path, headers=request.headers.raw)
            answer = await self._pool.request(
                origin,
                head,
                body,
                max_response_bytes=self._max_response_bytes,
                connect_timeout_s=timeouts.get("connect"),
                read_timeout_s=timeouts.get("read"),
                read_timeout_per_read=True,  # as httpcore times each read
            )
        except ConnectFailed as exc:
            if isinstance(exc.__cause__, TimeoutError):
                raise httpx.ConnectTimeout(f"ConnectTimeout after {timeouts.get('connect')}s") from exc
            raise httpx.ConnectError(str(exc)) from exc
        except TimeoutError as exc:
            raise httpx.ReadTimeout(f"ReadTimeout after {timeouts.get('read')}s") from exc
        except ConnectionClosed as exc:
            if isinstance(exc.__cause__, OSError):  # reset, not closed
                raise httpx.ReadError(str(exc.__cause__)) from exc
            raise httpx.RemoteProtocolError("Server disconnected without sending a complete response.") from exc
        except MalformedAnswer as exc:
            raise httpx.RemoteProtocolError(str(exc)) from exc
        except h11.LocalProtocolError as exc:
            raise httpx.LocalProtocolError(str(exc)) from exc
        return httpx.Response(
            status_code=answer.status,
            headers=answer.raw_headers,
            stream=_Body(answer.body),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": answer.reason},
        )

    async def aclose(self) -> None:
        self._pool.close()


class _Body(httpx.AsyncByteStream):
    """An answer's body, already read whole."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._body:
            yield self._body
