"""The I/O under the pools: a connection's byte stream and the pool's lock and slots, on a loop and on threads.

Why two of each here and nowhere else: this is where the event loop and
blocking sockets really differ (an `asyncio.Protocol` fed by the loop, a
socket read on the caller's thread; a future awaited, a condition waited on).
Everything above it, the pool and its connections, is written once, async
(runner/http1/_async_pool.py), and the blocking pool is generated from it
(runner/http1/unasync.py maps `AsyncStream` to `BlockingStream`, `AsyncSignal`
to `Signal` and so on), so the two classes of each pair here keep one interface.

Both streams raise ConnectionClosed (its cause: the socket's error, if any)
when the connection is lost, return b"" at the upstream's end of stream, and
raise TimeoutError when a wait passes its timeout (None: no limit).
"""

from __future__ import annotations

import asyncio
import collections
import math
import select
import socket
import ssl
import threading

from runner.http1.wire import ConnectFailed, ConnectionClosed, Origin

RECV_BYTES = 64 * 1024


def socket_quiet(sock: socket.socket) -> bool:
    """An idle socket the server has not closed or written to since (checked before reuse)."""
    try:
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        return not poller.poll(0)
    except (OSError, ValueError):
        return False


def _limit(timeout_s: float | None) -> float | None:
    return None if timeout_s is None or math.isinf(timeout_s) else timeout_s


class AsyncStream(asyncio.Protocol):
    """One connection's bytes on the running loop: what arrives waits, reading paused, until it is read."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._pending: collections.deque[bytes] = collections.deque()
        self._waiter: asyncio.Future[bytes] | None = None
        self._lost: BaseException | None = None
        self._eof = False
        self.closed = False

    # the loop's callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(data)
            return
        self._pending.append(data)  # kept for the next read; nothing more is read until then
        if self._transport is not None:
            self._transport.pause_reading()

    def eof_received(self) -> bool:
        self._eof = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(b"")
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        lost = ConnectionClosed("the connection to the upstream closed")
        lost.__cause__ = exc
        self._lost = lost
        if self._waiter is not None and not self._waiter.done():
            if exc is None:
                self._waiter.set_result(b"")
            else:
                self._waiter.set_exception(lost)

    # what a connection asks of it

    async def write(self, data: bytes, timeout_s: float | None) -> None:
        """Queued on the transport at once (the loop sends it); `flushed` says whether all of it left."""
        if self._transport is None or self.closed:
            raise ConnectionClosed("the connection to the upstream closed")
        self._transport.write(data)

    async def read(self, timeout_s: float | None) -> bytes:
        if self._pending:
            data = self._pending.popleft()
            if not self._pending and self._transport is not None and not self.closed:
                self._transport.resume_reading()
            return data
        if self._eof:
            return b""
        if self._lost is not None:
            if self._lost.__cause__ is None:
                return b""
            raise self._lost
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(_limit(timeout_s)):
                return await self._waiter
        finally:
            self._waiter = None

    def flushed(self) -> bool:
        """Everything written has left (an answer that came before the end of our request: the request is cut)."""
        return self._transport is not None and not self._transport.get_write_buffer_size()

    def quiet(self) -> bool:
        """Open, and nothing arrived or ended since the last read."""
        if self.closed or self._eof or self._pending or self._transport is None:
            return False
        sock = self._transport.get_extra_info("socket")
        return sock is not None and socket_quiet(sock)

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()


async def open_async_stream(origin: Origin, tls: ssl.SSLContext | None, timeout_s: float | None) -> AsyncStream:
    """A connection to `origin.address` (never a name to resolve), TLS naming `origin.server_name`."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(_limit(timeout_s)):
            _transport, stream = await loop.create_connection(
                AsyncStream,
                host=origin.address,
                port=origin.port,
                ssl=tls,
                server_hostname=origin.server_name if tls else None,
            )
    except (OSError, ssl.SSLError, TimeoutError) as exc:
        raise ConnectFailed(str(exc)) from exc
    return stream


class BlockingStream:
    """One connection's bytes on a blocking socket, used by one thread at a time."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.closed = False

    def write(self, data: bytes, timeout_s: float | None) -> None:
        self._sock.settimeout(_limit(timeout_s))
        try:
            self._sock.sendall(data)
        except TimeoutError:
            raise
        except OSError as exc:  # reset, broken pipe: as the loop's stream reports them
            raise ConnectionClosed("the connection to the upstream closed") from exc

    def read(self, timeout_s: float | None) -> bytes:
        self._sock.settimeout(_limit(timeout_s))
        try:
            return self._sock.recv(RECV_BYTES)
        except TimeoutError:
            raise
        except OSError as exc:
            raise ConnectionClosed("the connection to the upstream closed") from exc

    def flushed(self) -> bool:
        return True  # sendall returned: all of it left

    def quiet(self) -> bool:
        return not self.closed and socket_quiet(self._sock)

    def close(self) -> None:
        self.closed = True
        self._sock.close()


def open_blocking_stream(origin: Origin, tls: ssl.SSLContext | None, timeout_s: float | None) -> BlockingStream:
    """`open_async_stream` on this thread: the handshake, too, within `timeout_s`."""
    try:
        sock = socket.create_connection((origin.address, origin.port), timeout=_limit(timeout_s))
    except OSError as exc:
        raise ConnectFailed(str(exc)) from exc
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as asyncio's transports do
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname=origin.server_name)
    except (OSError, ssl.SSLError) as exc:
        sock.close()
        raise ConnectFailed(str(exc)) from exc
    return BlockingStream(sock)


class AsyncLock:
    """The pool's lock on a loop: nothing, since no other task runs between two awaits."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


Lock = threading.Lock


class AsyncSignal:
    """What a request waiting for a connection waits on: a connection was put back or closed.

    `generation()` is read under the pool's lock before waiting; `wait` returns
    at once if anything changed since (a notice never falls between the check
    and the wait), else when notified or after `timeout_s` (False).
    """

    def __init__(self) -> None:
        self._generation = 0
        self._waiters: list[asyncio.Future[None]] = []

    def generation(self) -> int:
        return self._generation

    async def wait(self, generation: int, timeout_s: float) -> bool:
        if generation != self._generation:
            return True
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(_limit(timeout_s)):
                await waiter
            return True
        except TimeoutError:
            return False
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def notify(self) -> None:
        self._generation += 1
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


class Signal:
    """`AsyncSignal` for threads."""

    def __init__(self) -> None:
        self._generation = 0
        self._changed = threading.Condition()

    def generation(self) -> int:
        with self._changed:
            return self._generation

    def wait(self, generation: int, timeout_s: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self._generation != generation, timeout=_limit(timeout_s))

    def notify(self) -> None:
        with self._changed:
            self._generation += 1
            self._changed.notify_all()
