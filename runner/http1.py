"""Keep-alive HTTP/1.1 connections on the running event loop, and the httpx transport over them.

Why: one HTTP client for the two places that make many small requests to the
same server: the runner's HTTP capability (GitHub) and the gateway's plain
JSON `tools/call` POSTs to MCP upstreams (tools_app/upstream/http11.py).
httpx's default transport (httpcore's pool over anyio) cost about 1 ms of CPU
per request here, more than the runner's twelve stages together, and a pooled
POST through httpx2 crosses its client, httpcore2's pool and anyio's stream
layers (about 2,800 Python calls per request, profiled) and sends the head and
the body in two writes. Here a connection is an `asyncio.Protocol` that
writes the request head itself (validated as h11 validated it: nothing
caller-given can add a header or a request) and parses answers with httptools
(llhttp in C, uvicorn's parser; h11's pure-Python state machine cost about
0.4 ms of CPU per call): one write per request, parsing in `data_received`,
one future per request; a warm request is that write and the answer's bytes
on a connection already open.

What a pool guarantees: it connects only to the address in its key (a caller
that resolved and checked an address passes that address, and the URL's host
as the server name for TLS); it cuts an answer larger than the caller's
response cap before parsing more of it; it reuses a connection only when our
request was written whole and its answer ended cleanly, HTTP/1.1 keep-alive,
and nothing arrived after it (not even the server's FIN), and closes one whose request failed or was cancelled
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
import re
import select
import socket
import ssl
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import httptools
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
    """The upstream's bytes are not HTTP/1.1 (llhttp or our checks refused them)."""


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
    raw_headers: Headers  # as received, names lower-cased (as h11 gave them), repeats kept
    body: bytes

    @property
    def headers(self) -> dict[str, str]:
        """Names lower-cased; a repeated header keeps its last value."""
        return {name.decode("latin-1"): value.decode("latin-1") for name, value in self.raw_headers}


class UnsendableRequest(ValueError):
    """A request we will not write: a method, target or header that is not HTTP/1.1 (nothing was sent).

    Header names and values are partly the caller's (an MCP tool's `Mcp-Param-*`
    comes from its arguments): a CR, LF, NUL or other control byte would let them
    write a header or a request of their own, so they are refused here, as h11 refused them.
    """


class RequestHead(NamedTuple):
    """A request's line and headers, as sent: names and values as given (lower-case names, as httpx gives them)."""

    method: bytes
    target: bytes
    headers: Headers


# The request grammar (RFC 9110 §5.1, §5.5, RFC 9112 §3.2), as h11 validates it before sending.
_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")
_TARGET = re.compile(rb"[\x21-\x7e]+")
# Visible bytes (and obs-text), spaces and tabs only between them: no control byte, no edge whitespace.
_FIELD_VALUE = re.compile(rb"(?:[\x21-\x7e\x80-\xff]+(?:[ \t]+[\x21-\x7e\x80-\xff]+)*)?")
_DIGITS = re.compile(rb"[0-9]{1,20}")


def encode_request(head: RequestHead, body: bytes) -> bytes:
    """The request's bytes, `host` first (as h11 writes them); UnsendableRequest: a request we will not send.

    The body is framed by the head's Content-Length (absent: none) or, with
    `Transfer-Encoding: chunked`, as one chunk and the last one, as h11 framed it.
    """
    if not _TOKEN.fullmatch(head.method):
        raise UnsendableRequest("Illegal method characters")
    if not _TARGET.fullmatch(head.target):
        raise UnsendableRequest("Illegal target characters")
    host, fields, length, chunked = _fields(head.headers)
    wire = b"%s %s HTTP/1.1\r\n%s%s\r\n" % (head.method, head.target, host, fields)
    if chunked:
        return wire + (b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if body else b"0\r\n\r\n")
    if len(body) != int(length or b"0"):
        raise UnsendableRequest("the body's length is not the declared Content-Length")
    return wire + body


def _fields(headers: Headers) -> tuple[bytes, bytes, bytes | None, bool]:
    """The Host line, the other lines, the Content-Length and whether chunked; UnsendableRequest if not HTTP."""
    host = b""
    lines = []
    length: bytes | None = None
    chunked = False
    for name, value in headers:
        if not _TOKEN.fullmatch(name):
            raise UnsendableRequest(f"Illegal header name {name!r}")
        if not _FIELD_VALUE.fullmatch(value):
            raise UnsendableRequest(f"Illegal header value {value!r}")
        line = b"%s: %s\r\n" % (name, value)
        lower = name.lower()
        if lower == b"host":
            if host:
                raise UnsendableRequest("Found multiple Host: headers")
            host = line
            continue
        if lower == b"content-length":
            if length is not None or not _DIGITS.fullmatch(value):
                raise UnsendableRequest("bad Content-Length")
            length = value
        elif lower == b"transfer-encoding":
            if chunked or value.lower() != b"chunked":
                raise UnsendableRequest("Only Transfer-Encoding: chunked is supported")
            chunked, line = True, b"%s: chunked\r\n" % name  # lower-cased, as h11 wrote it
        lines.append(line)
    if not host:
        raise UnsendableRequest("Missing mandatory Host: header")
    if chunked and length is not None:  # RFC 9112 §6.1: never both (a smuggling vector)
        raise UnsendableRequest("both Content-Length and Transfer-Encoding")
    return host, b"".join(lines), length, chunked


class _Stop(Exception):
    """Raised in a parser callback to stop it once the answer is complete (a HEAD answer's head; a second answer)."""


class _Exchange:
    """One request/answer cycle of a client connection: what the async and the blocking connections share.

    `start` encodes a request (one write); `feed` takes the bytes that arrived
    and returns the whole answer once it is complete (None: more is needed),
    or raises ResponseTooLarge, ConnectionClosed or MalformedAnswer.

    Why httptools: h11's pure-Python state machine was about 0.4 ms of CPU per
    proxied call here; httptools runs llhttp (Node's parser, uvicorn's) in C and
    calls back once per status line, header, body piece and end of message. A
    fresh parser per exchange: nothing of one answer carries into the next.
    What h11 did and llhttp does not, done here: a response head capped at
    MAX_HEAD_BYTES, a Transfer-Encoding other than chunked refused, 1xx answers
    skipped, a HEAD answer ended at its head, a body delimited by the connection's
    close ended at EOF, and reuse only for a complete HTTP/1.1 keep-alive answer
    with nothing after it.
    """

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._head_only = False
        self._max_response_bytes = 0
        self._head_size = 0  # the head's status line and fields, as parsed
        self._head_fed = 0  # bytes fed while the head was still incomplete
        self._status = 0  # of the final answer, once its head is complete; 0 before (or in a 1xx)
        self._reason = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._received = 0
        self._until_eof = False  # the body has no length: it ends when the upstream closes
        self._answer: Answer | None = None
        self._reusable = False

    def start(self, head: RequestHead, body: bytes, max_response_bytes: int) -> bytes:
        """The request's bytes (UnsendableRequest: a request we will not send)."""
        wire = encode_request(head, body)
        self._parser = httptools.HttpResponseParser(self)
        self._head_only = head.method == b"HEAD"
        self._max_response_bytes = max_response_bytes
        self._head_size, self._head_fed, self._status, self._reason, self._headers = 0, 0, 0, b"", []
        self._body, self._received, self._until_eof = [], 0, False
        self._answer, self._reusable = None, False
        return wire

    def feed(self, data: bytes) -> Answer | None:
        """`data` received (b"": the upstream closed its side); the answer once whole."""
        if not data:
            if self._until_eof and self._answer is None:
                self._complete()
            if self._answer is None:
                raise ConnectionClosed("the connection to the upstream closed")
            return self._answer
        if self._answer is not None:  # more bytes after the answer: not a connection to keep
            self._reusable = False
            return self._answer
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, (ResponseTooLarge, MalformedAnswer)):
                raise exc.__context__ from None
            if self._answer is None:
                raise MalformedAnswer("the upstream's answer is not HTTP/1.1") from exc
            self._reusable = False  # _Stop: the answer is a HEAD answer's head, or a second answer began
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            if self._answer is None:
                raise MalformedAnswer("the upstream's answer is not HTTP/1.1") from None
            self._reusable = False  # bytes after the answer that are not HTTP
        if self._status == 0:  # the head is still incomplete: llhttp would buffer it without end
            self._head_fed += len(data)
            if self._head_fed > MAX_HEAD_BYTES:
                raise MalformedAnswer("the upstream's answer head is too large")
        return self._answer

    def reusable(self) -> bool:
        """The answer was complete, HTTP/1.1 keep-alive, and nothing came after it: start the next one."""
        return self._reusable

    # httptools' callbacks, in the order it calls them

    def on_message_begin(self) -> None:
        if self._answer is not None:  # a second answer to our one request
            raise _Stop

    def on_status(self, reason: bytes) -> None:
        self._count_head(len(reason) + 15)
        self._reason = reason

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._status:  # a chunked body's trailer fields: dropped, as h11 dropped them, but counted
            self._count_body(len(name) + len(value) + 4)  # as body bytes, or they would be a stream without cap
            return
        self._count_head(len(name) + len(value) + 4)
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if status == 101:
            raise MalformedAnswer("the upstream switched protocols")
        if status < 200:  # an informational answer: wait for the final one
            self._reason, self._headers = b"", []
            return
        self._status = status
        length, coding = answer_framing(self._headers)  # llhttp reads an unknown coding to EOF; h11 refused it
        if self._head_only:
            self._complete()
            raise _Stop
        self._until_eof = length is None and coding is None and status not in (204, 304)

    def on_body(self, data: bytes) -> None:
        self._count_body(len(data))
        self._body.append(data)

    def _count_body(self, size: int) -> None:
        self._received += size
        if self._received > self._max_response_bytes:
            raise ResponseTooLarge

    def on_message_complete(self) -> None:
        if not self._status:  # the end of an informational answer
            return
        self._complete()
        self._reusable = self._parser.should_keep_alive() and self._parser.get_http_version() == "1.1"

    def _count_head(self, size: int) -> None:
        self._head_size += size
        if self._head_size > MAX_HEAD_BYTES:
            raise MalformedAnswer("the upstream's answer head is too large")

    def _complete(self) -> None:
        self._answer = Answer(self._status, self._reason, self._headers, b"".join(self._body))


def answer_framing(headers: Headers) -> tuple[bytes | None, bytes | None]:
    """An answer's Content-Length and Transfer-Encoding; MalformedAnswer: a coding other than chunked, or both."""
    length = coding = None
    for name, value in headers:
        if name == b"content-length":
            length = value
        elif name == b"transfer-encoding":
            if coding is not None or value.lower() != b"chunked":
                raise MalformedAnswer("only Transfer-Encoding: chunked is understood")
            coding = value
    if length is not None and coding is not None:
        raise MalformedAnswer("an answer with both Content-Length and Transfer-Encoding")
    return length, coding


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
        self, head: RequestHead, body: bytes, max_response_bytes: int, read_timeout_s: float | None, per_read: bool
    ) -> Answer:
        """Send one request in one write and wait for its whole answer (UnsendableRequest: not sendable).

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
        """Our request was written whole and its answer ended cleanly, keep-alive: the connection may go on."""
        if self.closed or self._transport is None or self._transport.get_write_buffer_size():
            return False  # an answer before the end of our request (an early error): the request is cut
        return self._exchange.reusable()

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
        head: RequestHead,
        body: bytes,
        *,
        max_response_bytes: int,
        connect_timeout_s: float | None,
        read_timeout_s: float | None,
        read_timeout_per_read: bool = False,
    ) -> Answer:
        """One request on an idle or new connection of `origin`.

        Raises ConnectFailed (nothing sent), then ConnectionClosed, TimeoutError (read),
        ResponseTooLarge, MalformedAnswer or UnsendableRequest (a header we will not send).
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
        head: RequestHead,
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
        head: RequestHead,
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
        ResponseTooLarge, MalformedAnswer or UnsendableRequest (a header we will not send).
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
            head = RequestHead(request.method.encode(), url.raw_path, request.headers.raw)
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
        except UnsendableRequest as exc:
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
