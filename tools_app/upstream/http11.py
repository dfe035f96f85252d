"""A small keep-alive HTTP/1.1 client for one checked upstream address: POST bytes, get bytes back.

Why not httpx2 here: a pooled POST through httpx2 crosses its client, httpcore2's
pool and anyio's stream layers (about 2,800 Python calls per request, profiled),
and sends the head and the body in two writes. This is an `asyncio.Protocol`
with h11 for the wire format (the parser httpcore2 and uvicorn use): one write
per request, parsing in `data_received`, one future per request.

What it keeps of the guarded transport (`netguard.PinnedTransport`): it only
ever connects to the address that was resolved and checked when the session
opened, sends the URL's host as `Host` and as the TLS server name, and cuts an
answer larger than the response cap before it is parsed. A connection is
reused only when h11 says both sides finished the exchange cleanly; one
whose request was cancelled (the runtime budget) or failed is closed, never
reused. Requests are never retried here: a POST that may have run is not sent
twice.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass

import h11
import httpx2

READ_TIMEOUT_S = 300.0
MAX_HEAD_BYTES = 64 * 1024
MAX_IDLE_CONNECTIONS = 8


class ResponseTooLarge(Exception):
    """The answer went past the response cap (nothing of it is kept)."""


class ConnectionClosed(ConnectionError):
    """The upstream closed the connection before answering completely."""


class MalformedAnswer(Exception):
    """The upstream's bytes are not HTTP/1.1 (h11 refused them)."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: dict[str, str]  # names lower-cased; a repeated header keeps its last value
    body: bytes


class _Connection(asyncio.Protocol):
    """One keep-alive connection; at most one request in flight (HTTP/1.1 without pipelining)."""

    def __init__(self, max_response_bytes: int) -> None:
        self._h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        self._max_response_bytes = max_response_bytes
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[Answer] | None = None
        self._status = 0
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._received = 0
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(ConnectionClosed("the connection to the upstream closed"))

    def eof_received(self) -> bool:
        self._feed(b"")
        return False  # close our side too

    def data_received(self, data: bytes) -> None:
        self._feed(data)

    def _feed(self, data: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            self.close()  # bytes nobody asked for: this connection is not trusted any more
            return
        try:
            self._h11.receive_data(data)
            while True:
                event = self._h11.next_event()
                if event is h11.NEED_DATA:
                    return
                if isinstance(event, h11.Response):
                    self._status = event.status_code
                    self._headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in event.headers}
                elif isinstance(event, h11.Data):
                    self._received += len(event.data)
                    if self._received > self._max_response_bytes:
                        raise ResponseTooLarge
                    self._body.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    self._waiter.set_result(Answer(self._status, self._headers, b"".join(self._body)))
                    return
                elif isinstance(event, h11.ConnectionClosed):
                    raise ConnectionClosed("the connection to the upstream closed")
                # h11.InformationalResponse (1xx): wait for the final answer
        except h11.RemoteProtocolError:
            if not data:  # the upstream closed in the middle of its answer
                self._fail(ConnectionClosed("the connection to the upstream closed"))
            else:
                self._fail(MalformedAnswer("the upstream's answer is not HTTP/1.1"))
        except (ResponseTooLarge, ConnectionClosed) as exc:
            self._fail(exc)

    def _fail(self, exc: Exception) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
            self.close()

    async def request(self, head: h11.Request, body: bytes) -> Answer:
        if self._transport is None or self.closed:
            raise ConnectionClosed("the connection to the upstream closed")
        self._status, self._headers, self._body, self._received = 0, {}, [], 0
        self._waiter = asyncio.get_running_loop().create_future()
        self._transport.write(
            self._h11.send(head) + self._h11.send(h11.Data(data=body)) + self._h11.send(h11.EndOfMessage())  # type: ignore[operator]
        )
        async with asyncio.timeout(READ_TIMEOUT_S):
            return await self._waiter

    @property
    def reusable(self) -> bool:
        """Both sides finished cleanly and may go on: start the next exchange."""
        if self.closed or self._h11.our_state is not h11.DONE or self._h11.their_state is not h11.DONE:
            return False
        self._h11.start_next_cycle()
        return True

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()


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
        self._address = address
        self._port = parsed.port or (443 if parsed.scheme == "https" else 80)
        self._hostname = hostname
        self._tls = parsed.scheme == "https"
        self._target = parsed.raw_path
        self._fixed_headers = [(b"host", parsed.netloc), (b"user-agent", b"toolgate")] + [
            (name.encode("latin-1"), value.encode("latin-1")) for name, value in headers
        ]
        self._max_response_bytes = max_response_bytes
        self._connect_timeout_s = connect_timeout_s
        self._idle: list[_Connection] = []
        self._closed = False

    async def post(self, headers: dict[str, str], body: bytes) -> Answer:
        """One POST; raises OSError/ConnectionClosed/TimeoutError/ResponseTooLarge/MalformedAnswer/h11 errors."""
        head = h11.Request(
            method="POST",
            target=self._target,
            headers=[
                *self._fixed_headers,
                *((name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()),
                (b"content-length", str(len(body)).encode()),
            ],
        )
        connection = await self._connection()
        keep = False
        try:
            answer = await connection.request(head, body)
            keep = connection.reusable
            return answer
        finally:
            if keep and not self._closed and len(self._idle) < MAX_IDLE_CONNECTIONS:
                self._idle.append(connection)
            else:
                connection.close()

    async def _connection(self) -> _Connection:
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed:
                return connection
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self._connect_timeout_s):
            _transport, connection = await loop.create_connection(
                lambda: _Connection(self._max_response_bytes),
                host=self._address,
                port=self._port,
                ssl=_tls_context() if self._tls else None,
                server_hostname=self._hostname if self._tls else None,
            )
        return connection

    def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


_context: list[ssl.SSLContext] = []


def _tls_context() -> ssl.SSLContext:
    """The TLS context httpx2 would use (system trust, verification on), made once per process."""
    if not _context:
        _context.append(httpx2.create_ssl_context(trust_env=False))
    return _context[0]
