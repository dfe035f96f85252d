"""The SDK transport's HTTP/1.1 framing check: an answer must end where its framing says, alone.

Why: httpx2's connections (httpcore2 over h11) take an answer with both
Content-Length and Transfer-Encoding by its chunked framing, and keep bytes
that arrived after an answer in h11's buffer, where they become the answer to
the connection's next request. An upstream that answers twice in one write
(or frames one answer two ways) could so answer a request it never saw, on a
connection another caller reuses. The plain-JSON path (runner/http1) refuses
both; this gives the SDK's connections the same rule until one HTTP stack
serves both paths.

How: every connection's network stream is watched. What the upstream sends
is also fed to a response parser of our own (httptools, as on the plain path),
started afresh at each request we write. A framing anomaly (both
Content-Length and Transfer-Encoding, a coding other than chunked, an
unrequested protocol switch, a second answer or any bytes after the answer in
the same read, anything that is not HTTP/1.1) fails the exchange with
`httpcore2.RemoteProtocolError` (so httpcore2 closes the connection), and the
stream from then on refuses every read and write and reports itself
readable, which is how httpcore2's pool recognises an idle connection it
must drop rather than reuse. Bytes that come after the answer in a later
read are already dropped by httpcore2 (a readable idle connection expires).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterable
from typing import Any

import httpcore2
import httptools
import httpx2

from runner.http1 import MalformedAnswer, answer_framing

# httpx2's own defaults (httpx2.AsyncHTTPTransport), kept when its pool is replaced.
_LIMITS = httpx2.Limits(max_connections=100, max_keepalive_connections=20)
_MAX_HEAD_BYTES = 64 * 1024


_context: list[ssl.SSLContext] = []


def tls_context() -> ssl.SSLContext:
    """The TLS context httpx2 would use (system trust, verification on), made once per process."""
    if not _context:
        _context.append(httpx2.create_ssl_context(trust_env=False))
    return _context[0]


class FramingAnomaly(httpcore2.RemoteProtocolError):
    """The upstream's bytes do not frame one answer to our one request; the connection is dropped."""


class _Stop(Exception):
    """Raised inside a parser callback to stop llhttp at a second answer."""


class _Watch:
    """What the upstream sent on one connection, parsed beside h11 to find where each answer ends."""

    def __init__(self, on_anomaly: Callable[[], None]) -> None:
        self._on_anomaly = on_anomaly
        self._parser: httptools.HttpResponseParser | None = None
        self._headers: list[tuple[bytes, bytes]] = []
        self._status = 0  # of the final answer once its head is complete; 0 before it or in a 1xx
        self._head_fed = 0
        self._complete = False
        self.broken: str | None = None

    def request_written(self, data: bytes) -> None:
        """A request's first bytes start a fresh exchange; its body's writes continue it."""
        if self._parser is not None and not self._complete:
            return
        self._parser = httptools.HttpResponseParser(self)
        self._headers, self._status, self._head_fed, self._complete = [], 0, 0, False

    def received(self, data: bytes) -> None:
        """Check bytes before h11 sees them; FramingAnomaly when they break the framing."""
        if not data:
            return
        if self._parser is None or self._complete:
            self._fail("the upstream sent bytes after its answer")
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, _Stop):
                self._fail("the upstream sent a second answer after its answer")
            if isinstance(exc.__context__, MalformedAnswer):
                self._fail(str(exc.__context__))
            self._fail("the upstream's answer is not HTTP/1.1")
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            self._fail("the upstream sent bytes after its answer" if self._complete else "the answer is not HTTP/1.1")
        if not self._status:
            self._head_fed += len(data)
            if self._head_fed > _MAX_HEAD_BYTES:
                self._fail("the upstream's answer head is too large")

    def _fail(self, reason: str) -> None:
        if self.broken is None:
            self.broken = reason
            self._on_anomaly()
        raise FramingAnomaly(reason)

    # httptools' callbacks

    def on_message_begin(self) -> None:
        if self._complete:
            raise _Stop

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._status:
            self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code() if self._parser is not None else 0
        if status == 101:
            raise MalformedAnswer("the upstream switched protocols unasked")
        if status < 200:  # informational: the final answer follows
            self._headers = []
            return
        self._status = status
        answer_framing(self._headers)

    def on_message_complete(self) -> None:
        if self._status:
            self._complete = True


class _WatchedStream(httpcore2.AsyncNetworkStream):
    def __init__(self, inner: httpcore2.AsyncNetworkStream, watch: _Watch) -> None:
        self._inner = inner
        self._watch = watch

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self._refuse_if_broken()
        data = await self._inner.read(max_bytes, timeout=timeout)
        self._watch.received(data)
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._refuse_if_broken()
        self._watch.request_written(buffer)
        await self._inner.write(buffer, timeout=timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore2.AsyncNetworkStream:
        inner = await self._inner.start_tls(ssl_context, server_hostname=server_hostname, timeout=timeout)
        return _WatchedStream(inner, self._watch)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable" and self._watch.broken is not None:
            return True  # httpcore2's pool drops a readable idle connection instead of reusing it
        return self._inner.get_extra_info(info)

    def _refuse_if_broken(self) -> None:
        if self._watch.broken is not None:
            raise FramingAnomaly(self._watch.broken)


class _WatchedBackend(httpcore2.AsyncNetworkBackend):
    def __init__(self, on_anomaly: Callable[[], None]) -> None:
        self._inner = httpcore2.AnyIOBackend()
        self._on_anomaly = on_anomaly

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        stream = await self._inner.connect_tcp(
            host, port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )
        return _WatchedStream(stream, _Watch(self._on_anomaly))

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError("upstream connections are TCP only")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def framing_checked_transport(*, on_anomaly: Callable[[], None]) -> httpx2.AsyncHTTPTransport:
    """httpx2's transport (system trust, no proxy variables) whose connections are framing-checked.

    httpx2's transport takes no network backend, so its connection pool is
    replaced by an equal one (httpx2's defaults) built over the watched backend;
    `on_anomaly` runs once per connection that broke the framing.
    """
    context = tls_context()  # made once per process: loading the trust store costs milliseconds of CPU
    transport = httpx2.AsyncHTTPTransport(verify=context, trust_env=False)
    transport._pool = httpcore2.AsyncConnectionPool(
        ssl_context=context,
        max_connections=_LIMITS.max_connections,
        max_keepalive_connections=_LIMITS.max_keepalive_connections,
        keepalive_expiry=_LIMITS.keepalive_expiry,
        network_backend=_WatchedBackend(on_anomaly),
    )
    return transport
