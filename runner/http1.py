"""A lean httpx transport: HTTP/1.1 keep-alive connections on the running event loop.

Why: the runner's HTTP capability (GitHub) made one request per call, and
httpx's default transport (httpcore's pool over anyio) cost about 1 ms of CPU
per request here, more than the runner's twelve stages together. This
transport speaks HTTP/1.1 with h11 (the parser httpcore itself uses) over
asyncio streams and keeps idle connections per origin, so a warm call is one
write and one read on a connection already open. httpx stays in front of it:
URLs, headers, content decoding (gzip, counted after decompression) and its
exception types are the same as with the default transport.

What it does not do, and who does instead: proxies and tracing. The
composition root keeps httpx's own transport when an HTTP(S)/ALL_PROXY
variable applies (`proxy_applies`) or when OpenTelemetry instruments httpx
(config/runtime.py). A request is never sent twice: a connection that may
have been closed by the server while idle is checked before reuse, and a
failure after sending is the caller's error, as with httpcore.

One transport belongs to one event loop (HttpCapability keeps one client per loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import ssl
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import h11
import httpx

MAX_IDLE_PER_ORIGIN = 16
# A response's status line and headers together; more is an upstream we do not want to parse.
MAX_HEAD_BYTES = 64 * 1024
READ_CHUNK = 64 * 1024
DEFAULT_PORTS = {"http": 80, "https": 443}

Origin = tuple[str, str, int]


def proxy_applies(url: str) -> bool:
    """Would httpx (trust_env) send a request for this URL through a proxy from the environment?"""
    parts = httpx.URL(url)
    proxies = urllib.request.getproxies_environment()
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass_environment(parts.host, proxies)  # type: ignore[attr-defined]  # in 3.11, untyped


class _Connection:
    """One open HTTP/1.1 connection and its h11 state machine."""

    __slots__ = ("h11", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)

    def reusable(self) -> bool:
        """Idle and still open: nothing buffered, nothing (not even the server's FIN) waiting on the socket."""
        if self.writer.is_closing() or self.reader.at_eof() or self.h11.our_state is not h11.IDLE:
            return False
        sock = self.writer.get_extra_info("socket")
        if sock is None:
            return False
        try:
            poller = select.poll()
            poller.register(sock.fileno(), select.POLLIN)
            return not poller.poll(0)
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class KeepAliveTransport(httpx.AsyncBaseTransport):
    """httpx's transport interface over pooled HTTP/1.1 connections (see the module's docstring)."""

    def __init__(self, *, ssl_context: ssl.SSLContext | None = None) -> None:
        self._ssl_context = ssl_context
        self._idle: dict[Origin, list[_Connection]] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        origin = _origin_of(request.url)
        connection = self._take_idle(origin) or await self._connect(origin, timeouts.get("connect"))
        try:
            body = await request.aread()
            events = [
                h11.Request(method=request.method, target=request.url.raw_path, headers=request.headers.raw),
                *([h11.Data(data=body)] if body else []),
                h11.EndOfMessage(),
            ]
            connection.writer.write(b"".join(connection.h11.send(event) or b"" for event in events))
            async with _within(timeouts.get("write"), httpx.WriteTimeout):
                await connection.writer.drain()
            response = await _next_event(connection, timeouts.get("read"))
            if not isinstance(response, h11.Response):
                raise httpx.RemoteProtocolError("the server answered without a response")
        except BaseException as exc:
            connection.close()
            mapped = _as_httpx_error(exc)
            if mapped is exc:
                raise
            raise mapped from exc
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_Body(self, origin, connection, timeouts.get("read")),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": bytes(response.reason)},
        )

    def _take_idle(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        while idle:
            connection = idle.pop()
            if connection.reusable():
                return connection
            connection.close()
        return None

    def _give_back(self, origin: Origin, connection: _Connection) -> None:
        idle = self._idle.setdefault(origin, [])
        if len(idle) >= MAX_IDLE_PER_ORIGIN:
            connection.close()
            return
        idle.append(connection)

    async def _connect(self, origin: Origin, timeout: float | None) -> _Connection:
        scheme, host, port = origin
        tls = self._tls() if scheme == "https" else None
        try:
            async with _within(timeout, httpx.ConnectTimeout):
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=tls, server_hostname=host if tls else None, limit=READ_CHUNK
                )
        except httpx.ConnectTimeout:
            raise
        except (OSError, ssl.SSLError) as exc:
            raise httpx.ConnectError(str(exc)) from exc
        return _Connection(reader, writer)

    def _tls(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            self._ssl_context = httpx.create_ssl_context()  # httpx's own trust: certifi, SSL_CERT_FILE/DIR
        return self._ssl_context

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()


class _Body(httpx.AsyncByteStream):
    """The response body as it arrives; a connection read to its end goes back to the pool."""

    def __init__(
        self, transport: KeepAliveTransport, origin: Origin, connection: _Connection, read_timeout: float | None
    ) -> None:
        self._transport = transport
        self._origin = origin
        self._connection: _Connection | None = connection
        self._read_timeout = read_timeout

    async def __aiter__(self) -> AsyncIterator[bytes]:
        connection = self._connection
        if connection is None:
            return
        try:
            while True:
                event = await _next_event(connection, self._read_timeout)
                if isinstance(event, h11.Data):
                    yield bytes(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    break
                else:
                    raise httpx.RemoteProtocolError("unexpected event in a response body")
        except BaseException as exc:
            self._connection = None
            connection.close()
            mapped = _as_httpx_error(exc)
            if mapped is exc:
                raise
            raise mapped from exc
        self._connection = None
        if connection.h11.our_state is h11.DONE and connection.h11.their_state is h11.DONE:
            connection.h11.start_next_cycle()
            self._transport._give_back(self._origin, connection)  # the pool this body came from
        else:
            connection.close()

    async def aclose(self) -> None:
        """Closed before its end (an over-long body, an error): the connection cannot be reused."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None


async def _next_event(connection: _Connection, timeout: float | None) -> Any:
    while True:
        event = connection.h11.next_event()
        if event is not h11.NEED_DATA:
            return event
        async with _within(timeout, httpx.ReadTimeout):
            data = await connection.reader.read(READ_CHUNK)
        if not data and connection.h11.their_state is h11.SEND_RESPONSE:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        connection.h11.receive_data(data)


@contextlib.asynccontextmanager
async def _within(timeout: float | None, error: type[httpx.TimeoutException]) -> AsyncIterator[None]:
    if timeout is None:
        yield
        return
    try:
        async with asyncio.timeout(timeout):
            yield
    except TimeoutError as exc:
        raise error(f"{error.__name__} after {timeout}s") from exc


def _as_httpx_error(exc: BaseException) -> BaseException:
    """Errors as httpx's own transport raises them; anything else (cancellation) unchanged."""
    if isinstance(exc, httpx.TransportError):
        return exc
    if isinstance(exc, h11.RemoteProtocolError):
        return httpx.RemoteProtocolError(str(exc))
    if isinstance(exc, h11.LocalProtocolError):
        return httpx.LocalProtocolError(str(exc))
    if isinstance(exc, (OSError, ssl.SSLError)):
        return httpx.ReadError(str(exc))
    return exc


def _origin_of(url: httpx.URL) -> Origin:
    return url.scheme, url.host, url.port or DEFAULT_PORTS[url.scheme]
