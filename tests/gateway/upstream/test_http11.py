"""The plain-JSON path's HTTP/1.1 client against a raw asyncio server on loopback (real sockets, real bytes).

Every test runs twice: through the event loop's connections (`post`) and through the
blocking ones a web worker's thread uses (`post_blocking`, run here in a worker thread
so that the server's loop stays free).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from gateway.upstream.http11 import ConnectionClosed, Http11Pool, ResponseTooLarge

Reply = Callable[[bytes], bytes]


@pytest.fixture(params=["loop", "blocking"])
def blocking(request) -> bool:
    return request.param == "blocking"


async def post(http: Http11Pool, headers: dict[str, str], body: bytes, *, blocking: bool, timeout_s: float = 5.0):
    """One POST the chosen way, cut at `timeout_s` (TimeoutError)."""
    encoded = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
    if blocking:
        deadline = time.monotonic() + timeout_s
        return await asyncio.to_thread(http.post_blocking, encoded, body, deadline=deadline)
    async with asyncio.timeout(timeout_s):
        return await http.post(encoded, body)


async def serving(reply: Reply, run: Callable[[str, list[bytes], list[int]], Awaitable[None]]) -> None:
    """A server answering each request head+body with `reply(request)`; records requests and connections."""
    requests: list[bytes] = []
    connections: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                body = await reader.readexactly(length)
                requests.append(head + body)
                answer = reply(head + body)
                if not answer:  # hang: the client's budget cuts it
                    await asyncio.sleep(5)
                    return
                writer.write(answer)
                await writer.drain()
                if b"connection: close" in answer.lower():
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        await run(f"http://127.0.0.1:{port}/mcp?x=1", requests, connections)


def pool(url: str, cap: int = 10_000) -> Http11Pool:
    return Http11Pool(
        url=url,
        address="127.0.0.1",
        hostname="mcp.invalid",
        max_response_bytes=cap,
        connect_timeout_s=5,
        headers=(("Authorization", "Bearer t"),),
    )


def json_reply(body: bytes = b'{"ok":true}', extra: bytes = b"") -> Reply:
    return lambda _request: (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        + extra
        + b"content-length: %d\r\n\r\n" % len(body)
        + body
    )


def test_requests_reuse_one_keep_alive_connection_and_carry_host_and_credential_headers(blocking):
    async def run(url: str, requests: list[bytes], connections: list[int]) -> None:
        http = pool(url)
        first = await post(http, {"content-type": "application/json"}, b'{"a":1}', blocking=blocking)
        second = await post(http, {"content-type": "application/json"}, b'{"a":2}', blocking=blocking)
        http.close()
        assert (first.status, first.headers["content-type"], first.body) == (200, "application/json", b'{"ok":true}')
        assert second.body == b'{"ok":true}'
        assert len(connections) == 1
        assert requests[0].startswith(b"POST /mcp?x=1 HTTP/1.1\r\n")
        assert b"\r\nhost: 127.0.0.1:" in requests[0].lower()
        assert b"\r\nAuthorization: Bearer t\r\n" in requests[0]
        assert requests[1].endswith(b'{"a":2}')

    asyncio.run(serving(json_reply(), run))


def test_a_chunked_answer_is_read_whole(blocking):
    body = b'{"jsonrpc":"2.0"}'
    chunked = (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\n"
        + body[:5]
        + b"\r\nc\r\n"
        + body[5:]
        + b"\r\n0\r\n\r\n"
    )

    async def run(url: str, requests: list[bytes], connections: list[int]) -> None:
        http = pool(url)
        answer = await post(http, {}, b"{}", blocking=blocking)
        again = await post(http, {}, b"{}", blocking=blocking)
        http.close()
        assert answer.body == body
        assert again.body == body
        assert len(connections) == 1

    asyncio.run(serving(lambda _request: chunked, run))


def test_connection_close_is_honoured_and_the_next_request_opens_a_new_connection(blocking):
    async def run(url: str, requests: list[bytes], connections: list[int]) -> None:
        http = pool(url)
        await post(http, {}, b"{}", blocking=blocking)
        await post(http, {}, b"{}", blocking=blocking)
        http.close()
        assert len(connections) == 2

    asyncio.run(serving(json_reply(extra=b"connection: close\r\n"), run))


def test_an_answer_past_the_cap_is_refused_and_its_connection_not_reused(blocking):
    async def run(url: str, requests: list[bytes], connections: list[int]) -> None:
        http = pool(url, cap=100)
        with pytest.raises(ResponseTooLarge):
            await post(http, {}, b"big", blocking=blocking)
        small = await post(http, {}, b"small", blocking=blocking)
        http.close()
        assert small.body == b"{}"
        assert len(connections) == 2

    def reply(request: bytes) -> bytes:
        return json_reply(b"x" * 500)(request) if request.endswith(b"big") else json_reply(b"{}")(request)

    asyncio.run(serving(reply, run))


def test_a_cancelled_request_closes_its_connection(blocking):
    async def run(url: str, requests: list[bytes], connections: list[int]) -> None:
        http = pool(url)
        with pytest.raises(TimeoutError):
            await post(http, {}, b"hang", blocking=blocking, timeout_s=0.2)
        answer = await post(http, {}, b"quick", blocking=blocking)
        http.close()
        assert answer.body == b'{"ok":true}'
        assert len(connections) == 2

    def reply(request: bytes) -> bytes:
        return b"" if request.endswith(b"hang") else json_reply()(request)

    asyncio.run(serving(reply, run))


def test_a_connection_closed_before_the_answer_raises(blocking):
    async def run(url: str, requests: list[bytes], connections: list[int]) -> None:
        http = pool(url)
        with pytest.raises(ConnectionClosed):
            await post(http, {}, b"{}", blocking=blocking)
        http.close()

    asyncio.run(
        serving(lambda _request: b"HTTP/1.1 200 OK\r\ncontent-length: 50\r\nconnection: close\r\n\r\nshort", run)
    )
