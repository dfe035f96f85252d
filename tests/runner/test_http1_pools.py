"""The pools' caps and idle expiry, both pools against one real loopback server, and the generated pool current.

The server (tests/runner/test_http1.py's KeepAliveServer, module-scoped here)
keeps connections open and counts them, so a test reads how many connections a
pool opened. The blocking pool is generated from the async one
(runner/http1/unasync.py); the last test fails when the file on disk is stale.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
import time
from collections.abc import Iterator

import pytest

from runner.http1 import AsyncPool, BlockingPool, MalformedAnswer, Origin, PoolFull, RequestHead, _sync_pool, unasync
from tests.runner.test_http1 import BODY, KeepAliveServer


@pytest.fixture(scope="module")
def server() -> Iterator[KeepAliveServer]:
    with KeepAliveServer() as running:
        yield running


def _origin(url: str) -> Origin:
    host, port = url.removeprefix("http://").split(":")
    return Origin(host, int(port), False, host)


def _head(url: str) -> RequestHead:
    return RequestHead(b"GET", b"/user", [(b"host", url.removeprefix("http://").encode())])


def _blocking_get(pool: BlockingPool, url: str, *, connect_timeout_s: float = 5.0):
    return pool.request(
        _origin(url),
        _head(url),
        b"",
        max_response_bytes=10_000,
        connect_timeout_s=connect_timeout_s,
        deadline=time.monotonic() + 5.0,
    )


async def _async_get(pool: AsyncPool, url: str, *, connect_timeout_s: float = 5.0):
    return await pool.request(
        _origin(url), _head(url), b"", max_response_bytes=10_000, connect_timeout_s=connect_timeout_s
    )


def test_an_idle_connection_past_its_expiry_is_closed_not_reused_blocking(server: KeepAliveServer) -> None:
    pool = BlockingPool(tls_context=ssl.create_default_context, idle_expiry_s=0.2)
    before = server.connections
    _blocking_get(pool, server.url)
    _blocking_get(pool, server.url)  # within the expiry: the same connection
    assert server.connections - before == 1
    time.sleep(0.3)

    assert _blocking_get(pool, server.url).body == BODY
    pool.close()

    assert server.connections - before == 2


def test_an_idle_connection_past_its_expiry_is_closed_not_reused_on_the_loop(server: KeepAliveServer) -> None:
    async def scenario() -> int:
        pool = AsyncPool(tls_context=ssl.create_default_context, idle_expiry_s=0.2)
        before = server.connections
        await _async_get(pool, server.url)
        await _async_get(pool, server.url)
        assert server.connections - before == 1
        await asyncio.sleep(0.3)
        await _async_get(pool, server.url)
        pool.close()
        await asyncio.sleep(0)
        return server.connections - before

    assert asyncio.run(scenario()) == 2


def test_expired_idle_connections_of_other_origins_are_swept_when_the_pool_is_used(
    server: KeepAliveServer, monkeypatch
) -> None:
    monkeypatch.setattr(_sync_pool, "SWEEP_EVERY_S", 0.0)
    with KeepAliveServer() as other:
        pool = BlockingPool(tls_context=ssl.create_default_context, idle_expiry_s=0.2)
        _blocking_get(pool, other.url)
        assert pool.idle_count(_origin(other.url)) == 1
        time.sleep(0.3)

        _blocking_get(pool, server.url)  # another origin's request

        assert pool.idle_count(_origin(other.url)) == 0
        assert pool.idle_count() == 1
        pool.close()


def test_the_blocking_pool_opens_no_more_than_its_cap_and_a_request_past_it_waits_then_fails() -> None:
    hanging = KeepAliveServer(first=[None])  # the first request is never answered: its connection stays busy
    with hanging:
        pool = BlockingPool(tls_context=ssl.create_default_context, max_connections=1)
        failures: list[BaseException] = []

        def busy() -> None:
            try:
                _blocking_get(pool, hanging.url)
            except TimeoutError as exc:  # the deadline: the answer never comes
                failures.append(exc)

        stuck = threading.Thread(target=busy)
        stuck.start()
        while not hanging.requests:
            time.sleep(0.01)
        started = time.monotonic()

        with pytest.raises(PoolFull):
            _blocking_get(pool, hanging.url, connect_timeout_s=0.3)

        assert time.monotonic() - started >= 0.3
        assert hanging.connections == 1
        stuck.join(timeout=10)
        pool.close()

    assert len(failures) == 1


def test_the_async_pool_opens_no_more_than_its_cap_and_a_waiting_request_gets_the_freed_connection(
    server: KeepAliveServer,
) -> None:
    async def scenario() -> tuple[int, int]:
        pool = AsyncPool(tls_context=ssl.create_default_context, max_connections=2)
        before = server.connections
        answers = await asyncio.gather(*(_async_get(pool, server.url) for _ in range(6)))
        pool.close()
        await asyncio.sleep(0)
        return len([answer for answer in answers if answer.body == BODY]), server.connections - before

    answered, opened = asyncio.run(scenario())

    assert answered == 6
    assert opened <= 2


def test_at_the_cap_an_idle_connection_of_another_origin_gives_way(server: KeepAliveServer) -> None:
    with KeepAliveServer() as other:
        pool = BlockingPool(tls_context=ssl.create_default_context, max_connections=1)
        _blocking_get(pool, other.url)
        assert pool.idle_count(_origin(other.url)) == 1

        assert _blocking_get(pool, server.url, connect_timeout_s=0.2).body == BODY

        assert pool.idle_count(_origin(other.url)) == 0
        pool.close()


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nhi",  # repeated, even with one value
        b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nhi",
        b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nhi",
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Type: text/html\r\nContent-Length: 2\r\n\r\nhi",
        b"HTTP/1.1 200 OK\r\nMcp-Session-Id: a\r\nMcp-Session-Id: b\r\nContent-Length: 2\r\n\r\nhi",
        b"HTTP/1.1 302 Found\r\nLocation: /a\r\nLocation: /b\r\nContent-Length: 0\r\n\r\n",
    ],
)
def test_a_repeated_length_or_conflicting_single_field_is_refused_on_both_pools(answer: bytes) -> None:
    with KeepAliveServer(first=[answer, answer]) as server:
        pool = BlockingPool(tls_context=ssl.create_default_context)
        with pytest.raises(MalformedAnswer):
            _blocking_get(pool, server.url)
        pool.close()

        async def on_the_loop() -> None:
            loop_pool = AsyncPool(tls_context=ssl.create_default_context)
            try:
                await _async_get(loop_pool, server.url)
            finally:
                loop_pool.close()
                await asyncio.sleep(0)

        with pytest.raises(MalformedAnswer):
            asyncio.run(on_the_loop())


def test_repeated_fields_of_other_kinds_are_joined_never_last_wins() -> None:
    answer = b"HTTP/1.1 200 OK\r\nVary: Accept\r\nVary: Origin\r\nContent-Length: 2\r\n\r\nhi"
    with KeepAliveServer(first=[answer]) as server:
        pool = BlockingPool(tls_context=ssl.create_default_context)
        got = _blocking_get(pool, server.url)
        pool.close()

    assert got.headers["vary"] == "Accept, Origin"


@pytest.mark.parametrize(("source", "target", "docstring"), unasync.PAIRS, ids=lambda value: getattr(value, "name", ""))
def test_the_generated_blocking_modules_are_current(source, target, docstring) -> None:
    on_disk = target.read_text()

    assert on_disk == unasync.generated(source.read_text(), source.name, docstring), "run: make unasync"
    assert "async " not in on_disk
    assert "await " not in on_disk


def test_at_the_cap_without_any_timeout_a_request_waits_until_a_connection_is_put_back(server) -> None:
    pool = BlockingPool(tls_context=ssl.create_default_context, max_connections=1)
    answers = []

    def get() -> None:
        answers.append(
            pool.request(_origin(server.url), _head(server.url), b"", max_response_bytes=10_000, connect_timeout_s=None)
        )

    threads = [threading.Thread(target=get) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    pool.close()

    assert [answer.body for answer in answers] == [BODY] * 4
