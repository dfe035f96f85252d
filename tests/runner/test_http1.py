"""The keep-alive transport behind HttpCapability, against real sockets on loopback.

tests/runner/test_capabilities.py holds the capability to its contract through
this transport (its loopback server closes every connection); these tests
hold what only a keep-alive server shows: connections are reused, one the
server closed while idle is not, one whose request was cancelled is not,
chunked and truncated bodies, and a proxy in the environment goes through httpx2's own
client. tests/gateway/upstream/test_http11.py holds the same pool through
the MCP plain-JSON client (the response cap, Connection: close, a pinned address).
Then tests hold `BlockingPool` (blocking sockets, any thread) to the same rules, and the
last ones what runner/http1 owns since h11 left it: the request head it writes (injection
refused, byte for byte what h11 wrote) and the answers httptools' llhttp parses for it.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
import time
from collections.abc import Iterator

import h11
import httpx
import pytest

from runner.capabilities import HttpCapability
from runner.errors import CapabilityError
from runner.http1 import (
    Answer,
    AsyncPool,
    BlockingPool,
    ConnectFailed,
    ConnectionClosed,
    MalformedAnswer,
    Origin,
    RequestHead,
    ResponseTooLarge,
    UnsendableRequest,
    encode_request,
    proxy_applies,
)
from tests.support.loopback import LoopbackServer

BODY = json.dumps({"login": "octocat"}).encode()


class KeepAliveServer:
    """HTTP/1.1 on loopback that keeps connections open (or closes them after each answer, silently)."""

    def __init__(
        self,
        *,
        close_after_answer: bool = False,
        chunked: bool = False,
        first: list[bytes | tuple[bytes, ...] | None] | None = None,
    ) -> None:
        self.close_after_answer = close_after_answer
        self.chunked = chunked
        # Answers sent first, in order, before the usual one (None: never answer; the connection hangs;
        # a tuple: its pieces 0.15 s apart).
        self.first = list(first or [])
        self.connections = 0
        self.requests: list[bytes] = []
        self._tasks: set[asyncio.Task] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.url = ""

    def __enter__(self) -> KeepAliveServer:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop
        ).result()
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    async def _stop(self) -> None:
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _answer(self) -> bytes:
        if self.chunked:
            half = len(BODY) // 2
            chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (BODY[:half], BODY[half:]))
            return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + (
                chunks + b"0\r\n\r\n"
            )
        return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
            len(BODY),
            BODY,
        )

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._tasks.add(asyncio.current_task())
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                self.requests.append(head.split(b"\r\n", 1)[0])
                answer = self.first.pop(0) if self.first else self._answer()
                if answer is None:
                    await asyncio.sleep(10)
                    break
                for index, piece in enumerate(answer if isinstance(answer, tuple) else (answer,)):
                    if index:
                        await asyncio.sleep(0.15)
                    writer.write(piece)
                await writer.drain()
                if self.close_after_answer:  # an idle timeout, without saying `Connection: close`
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


@pytest.fixture
def keep_alive() -> Iterator[KeepAliveServer]:
    with KeepAliveServer() as server:
        yield server


async def _get_many(http: HttpCapability, count: int, pause_s: float = 0.0) -> list[int]:
    statuses = []
    try:
        for _ in range(count):
            response = await http.get("/user")
            assert response.json() == {"login": "octocat"}
            statuses.append(response.status_code)
            await asyncio.sleep(pause_s)
    finally:
        await http.aclose()
    return statuses


async def _get_once(http: HttpCapability):
    try:
        return await http.get("/user")
    finally:
        await http.aclose()


def test_successive_requests_share_one_connection(keep_alive: KeepAliveServer) -> None:
    statuses = asyncio.run(_get_many(HttpCapability(keep_alive.url), 3))

    assert statuses == [200, 200, 200]
    assert keep_alive.requests == [b"GET /user HTTP/1.1"] * 3
    assert keep_alive.connections == 1


def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    with KeepAliveServer(close_after_answer=True) as server:
        statuses = asyncio.run(_get_many(HttpCapability(server.url), 3, pause_s=0.05))

    assert statuses == [200, 200, 200]  # no request failed on, or was sent twice to, a closed connection
    assert len(server.requests) == 3
    assert server.connections == 3


def test_a_chunked_body_is_read_whole_and_the_connection_kept() -> None:
    with KeepAliveServer(chunked=True) as server:
        statuses = asyncio.run(_get_many(HttpCapability(server.url), 2))

    assert statuses == [200, 200]
    assert server.connections == 1


def test_a_truncated_answer_fails_as_httpx_fails_it() -> None:
    truncated = b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\nConnection: close\r\n\r\nshort"
    failed = pytest.raises(CapabilityError, match=r"^upstream request failed \(RemoteProtocolError\)$")
    with KeepAliveServer(first=[truncated], close_after_answer=True) as server, failed:
        asyncio.run(_get_once(HttpCapability(server.url)))


def test_a_cancelled_request_closes_its_connection_and_the_next_opens_one() -> None:
    async def cancelled_then_answered(http: HttpCapability) -> int:
        try:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2):
                    await http.get("/user")
            return (await http.get("/user")).status_code
        finally:
            await http.aclose()

    with KeepAliveServer(first=[None]) as server:
        status = asyncio.run(cancelled_then_answered(HttpCapability(server.url)))

    assert status == 200
    assert server.connections == 2


def test_the_read_timeout_bounds_each_wait_not_the_whole_answer() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(BODY)
    trickled = (head, BODY[:5], BODY[5:10], BODY[10:])  # 0.45 s in all, 0.15 s between pieces
    with KeepAliveServer(first=[trickled]) as server:
        http = HttpCapability(server.url, timeout=httpx.Timeout(0.3))
        response = asyncio.run(_get_once(http))

    assert response.json() == {"login": "octocat"}


def test_a_proxy_in_the_environment_is_used_as_httpx_uses_it(keep_alive, monkeypatch) -> None:
    with LoopbackServer() as proxy:
        proxy.route("GET", f"{keep_alive.url}/user", json={"login": "octocat"})
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", "")

        response = asyncio.run(_get_once(HttpCapability(keep_alive.url)))

    assert response.json() == {"login": "octocat"}
    assert [request.target for request in proxy.requests] == [f"{keep_alive.url}/user"]
    assert keep_alive.requests == []


@pytest.mark.parametrize(
    ("environ", "applies"),
    [
        ({}, False),
        ({"HTTPS_PROXY": "http://proxy:3128"}, True),
        ({"ALL_PROXY": "http://proxy:3128"}, True),
        ({"HTTP_PROXY": "http://proxy:3128"}, False),  # another scheme's proxy
        ({"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "api.github.com"}, False),
    ],
)
def test_proxy_applies_reads_the_variables_httpx_reads(monkeypatch, environ, applies) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)

    assert proxy_applies("https://api.github.com/") is applies


# --- BlockingPool: the same rules on blocking sockets, for callers on their own threads ------


def _blocking_get(
    pool: BlockingPool,
    url: str,
    *,
    timeout_s: float = 5.0,
    cap: int = 10_000,
    method: bytes = b"GET",
    headers: tuple[tuple[bytes, bytes], ...] = (),
) -> Answer:
    host, port = url.removeprefix("http://").split(":")
    head = RequestHead(method, b"/user", [(b"host", f"{host}:{port}".encode()), *headers])
    return pool.request(
        Origin(host, int(port), False, host),
        head,
        b"",
        max_response_bytes=cap,
        connect_timeout_s=5.0,
        deadline=time.monotonic() + timeout_s,
    )


def test_blocking_requests_share_one_connection(keep_alive: KeepAliveServer) -> None:
    pool = BlockingPool(tls_context=ssl.create_default_context)

    answers = [_blocking_get(pool, keep_alive.url) for _ in range(3)]
    pool.close()

    assert [(answer.status, answer.body) for answer in answers] == [(200, BODY)] * 3
    assert keep_alive.connections == 1


def test_a_blocking_connection_the_server_closed_while_idle_is_not_reused() -> None:
    pool = BlockingPool(tls_context=ssl.create_default_context)
    with KeepAliveServer(close_after_answer=True) as server:
        statuses = []
        for _ in range(3):
            statuses.append(_blocking_get(pool, server.url).status)
            time.sleep(0.05)
    pool.close()

    assert statuses == [200, 200, 200]  # none failed on, or was sent twice to, a closed connection
    assert len(server.requests) == 3
    assert server.connections == 3


def test_a_chunked_body_is_read_whole_on_a_blocking_connection_and_the_connection_kept() -> None:
    pool = BlockingPool(tls_context=ssl.create_default_context)
    with KeepAliveServer(chunked=True) as server:
        bodies = [_blocking_get(pool, server.url).body for _ in range(2)]
    pool.close()

    assert bodies == [BODY, BODY]
    assert server.connections == 1


def test_a_truncated_answer_on_a_blocking_connection_raises_connection_closed() -> None:
    truncated = b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\nConnection: close\r\n\r\nshort"
    pool = BlockingPool(tls_context=ssl.create_default_context)
    with KeepAliveServer(first=[truncated], close_after_answer=True) as server, pytest.raises(ConnectionClosed):
        _blocking_get(pool, server.url)


def test_bytes_that_are_not_http_raise_malformed_answer() -> None:
    pool = BlockingPool(tls_context=ssl.create_default_context)
    with KeepAliveServer(first=[b"SSH-2.0-OpenSSH_9.6\r\n\r\n"]) as server, pytest.raises(MalformedAnswer):
        _blocking_get(pool, server.url)


def test_the_deadline_cuts_a_blocking_request_and_its_connection_is_not_reused() -> None:
    pool = BlockingPool(tls_context=ssl.create_default_context)
    with KeepAliveServer(first=[None]) as server:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            _blocking_get(pool, server.url, timeout_s=0.2)
        elapsed = time.monotonic() - started
        after = _blocking_get(pool, server.url)
    pool.close()

    assert 0.2 <= elapsed < 0.4
    assert after.status == 200
    assert server.connections == 2


def test_a_deadline_already_passed_sends_nothing() -> None:
    pool = BlockingPool(tls_context=ssl.create_default_context)
    with KeepAliveServer() as server, pytest.raises(ConnectFailed):
        _blocking_get(pool, server.url, timeout_s=-1.0)

    assert server.requests == []


def test_an_answer_past_the_cap_is_refused_on_a_blocking_connection() -> None:
    pool = BlockingPool(tls_context=ssl.create_default_context)
    with KeepAliveServer() as server:
        with pytest.raises(ResponseTooLarge):
            _blocking_get(pool, server.url, cap=len(BODY) - 1)
        after = _blocking_get(pool, server.url)
    pool.close()

    assert after.body == BODY
    assert server.connections == 2


def test_threads_at_once_each_use_a_connection_of_their_own(keep_alive: KeepAliveServer) -> None:
    pool = BlockingPool(tls_context=ssl.create_default_context)
    start = threading.Barrier(4)
    answers: list[Answer] = []

    def worker() -> None:
        start.wait()
        for _ in range(5):
            answers.append(_blocking_get(pool, keep_alive.url))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    pool.close()

    assert [answer.body for answer in answers] == [BODY] * 20
    assert len(keep_alive.requests) == 20
    assert 1 <= keep_alive.connections <= 4  # reused, never shared by two requests at once


# --- what runner/http1.py owns since it left h11: the request it writes, the answers it accepts -----

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
# A caller's header names and values (an MCP tool's Mcp-Param-* come from its arguments) that would write
# headers or a request of their own, or that h11 refused: each is refused before a byte is sent.
UNSENDABLE = [
    (b"x-param", b"a\r\nx-admin: 1"),
    (b"x-param", b"a\nx-admin: 1"),
    (b"x-param", b"a\rb"),
    (b"x-param", b"a\x00b"),
    (b"x-param", b"a\x7fb"),
    (b"x-param", b" leading"),
    (b"x-param", b"trailing\t"),
    (b"x-param\r\nx-admin", b"1"),
    (b"x-param\n", b"1"),
    (b"x-param\x00", b"1"),
    (b"x param", b"1"),
    (b"", b"1"),
]


@pytest.mark.parametrize(("name", "value"), UNSENDABLE)
def test_a_header_that_could_inject_is_refused_before_anything_is_sent_on_a_blocking_connection(name, value) -> None:
    pool = BlockingPool(tls_context=ssl.create_default_context)
    with KeepAliveServer() as server:
        with pytest.raises(UnsendableRequest):
            _blocking_get(pool, server.url, headers=((name, value),))
        after = _blocking_get(pool, server.url)
    pool.close()

    assert after.status == 200
    assert server.requests == [b"GET /user HTTP/1.1"]  # only the request after it


@pytest.mark.parametrize(("name", "value"), UNSENDABLE)
def test_a_header_that_could_inject_is_refused_before_anything_is_sent_on_the_loop(name, value) -> None:
    async def refused(url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        pool = AsyncPool(tls_context=ssl.create_default_context)
        head = RequestHead(b"GET", b"/user", [(b"host", f"{host}:{port}".encode()), (name, value)])
        try:
            await pool.request(
                Origin(host, int(port), False, host),
                head,
                b"",
                max_response_bytes=10_000,
                connect_timeout_s=5.0,
                read_timeout_s=5.0,
            )
        finally:
            pool.close()
            await asyncio.sleep(0)  # the transport closes on the loop's next turn

    with KeepAliveServer() as server, pytest.raises(UnsendableRequest):
        asyncio.run(refused(server.url))

    assert server.requests == []


@pytest.mark.parametrize(
    ("method", "target"), [(b"GET /admin", b"/"), (b"GET", b"/a b"), (b"GET", b"/a\r\nx: 1"), (b"", b"/")]
)
def test_a_method_or_target_that_is_not_http_is_refused(method: bytes, target: bytes) -> None:
    with pytest.raises(UnsendableRequest):
        encode_request(RequestHead(method, target, [(b"host", b"example.com")]), b"")


@pytest.mark.parametrize(
    "headers",
    [
        [(b"content-length", b"3")],  # no Host
        [(b"host", b"a"), (b"Host", b"b")],
        [(b"host", b"a"), (b"content-length", b"4")],  # not the body's length
        [(b"host", b"a"), (b"content-length", b"-3")],
        [(b"host", b"a"), (b"transfer-encoding", b"gzip")],
        [(b"host", b"a"), (b"transfer-encoding", b"chunked"), (b"content-length", b"3")],
    ],
)
def test_a_request_whose_framing_is_not_sound_is_refused(headers) -> None:
    with pytest.raises(UnsendableRequest):
        encode_request(RequestHead(b"POST", b"/", headers), b"abc")


@pytest.mark.parametrize(
    ("method", "headers", "body"),
    [
        (b"GET", [(b"accept", b"application/json"), (b"host", b"api.example.com:8443")], b""),
        (b"POST", [(b"host", b"h"), (b"Content-Type", b"application/json"), (b"content-length", b"7")], b'{"a":1}'),
        (b"POST", [(b"host", b"h"), (b"x-a", b"b \t c\xe9"), (b"transfer-encoding", b"chunked")], b"abc"),
        (b"DELETE", [(b"host", b"h"), (b"transfer-encoding", b"Chunked")], b""),
    ],
)
def test_the_request_is_written_byte_for_byte_as_h11_wrote_it(method, headers, body) -> None:
    connection = h11.Connection(h11.CLIENT)
    wire = connection.send(h11.Request(method=method, target=b"/v1/x?q=1", headers=headers))
    if body:
        wire += connection.send(h11.Data(data=body))
    wire += connection.send(h11.EndOfMessage())

    assert encode_request(RequestHead(method, b"/v1/x?q=1", headers), body) == wire


def test_a_body_delimited_by_the_close_is_complete_at_eof_and_its_connection_not_reused() -> None:
    pool = BlockingPool(tls_context=ssl.create_default_context)
    with KeepAliveServer(first=[b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end"]) as server:
        server.close_after_answer = True
        answer = _blocking_get(pool, server.url)
        server.close_after_answer = False
        after = _blocking_get(pool, server.url)
    pool.close()

    assert (answer.status, answer.body) == (200, b"until the end")
    assert after.body == BODY
    assert server.connections == 2


def test_a_chunked_answers_trailer_fields_count_against_the_cap() -> None:
    trailers = b"".join(b"x-trailer-%d: %s\r\n" % (n, b"t" * 100) for n in range(30))  # about 3.5 KB
    answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n" + trailers + b"\r\n"
    pool = BlockingPool(tls_context=ssl.create_default_context)
    with KeepAliveServer(first=[answer, answer]) as server:
        with pytest.raises(ResponseTooLarge):
            _blocking_get(pool, server.url, cap=1000)
        within = _blocking_get(pool, server.url, cap=10_000)
    pool.close()

    assert (within.status, within.body) == (200, b"hi")  # trailers are dropped, never part of the answer


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nhi",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nhi",  # h11 refused any coding but chunked
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhi\r\n0\r\n\r\n",  # a bad chunk size
        b"HTTP/1.1 200 OK\r\nX-Evil: a\x00b\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: upgrade\r\n\r\n",
    ],
)
def test_an_answer_with_conflicting_or_broken_framing_raises_malformed_answer(answer: bytes) -> None:
    pool = BlockingPool(tls_context=ssl.create_default_context)
    with KeepAliveServer(first=[answer]) as server, pytest.raises(MalformedAnswer):
        _blocking_get(pool, server.url)
    pool.close()


@pytest.mark.parametrize("ends", [True, False])
def test_a_head_past_max_head_bytes_raises_malformed_answer(ends: bool) -> None:
    head = b"HTTP/1.1 200 OK\r\n" + b"".join(b"x-filler-%d: %s\r\n" % (n, b"a" * 1000) for n in range(70))
    answer = head + (b"Content-Length: 0\r\n\r\n" if ends else b"")
    pool = BlockingPool(tls_context=ssl.create_default_context)
    with KeepAliveServer(first=[answer]) as server, pytest.raises(MalformedAnswer):
        _blocking_get(pool, server.url, timeout_s=2.0)
    pool.close()


def test_informational_answers_are_skipped_until_the_final_one() -> None:
    early = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
    pool = BlockingPool(tls_context=ssl.create_default_context)
    with KeepAliveServer(first=[(early, ANSWER)]) as server:
        answer = _blocking_get(pool, server.url)
        _blocking_get(pool, server.url)
    pool.close()

    assert (answer.status, answer.reason, answer.body) == (200, b"OK", BODY)
    assert answer.raw_headers == [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(BODY))]
    assert server.connections == 1


@pytest.mark.parametrize(
    "answer",
    [
        ANSWER.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1),
        ANSWER.replace(b"HTTP/1.1", b"HTTP/1.0"),
        ANSWER + b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",  # an answer nobody asked for
        ANSWER + b"garbage",
    ],
)
def test_an_answer_that_does_not_keep_the_connection_clean_is_read_and_its_connection_not_reused(answer) -> None:
    pool = BlockingPool(tls_context=ssl.create_default_context)
    with KeepAliveServer(first=[answer]) as server:
        first = _blocking_get(pool, server.url)
        after = _blocking_get(pool, server.url)
    pool.close()

    assert (first.status, first.body) == (200, BODY)
    assert after.body == BODY
    assert server.connections == 2


def test_the_answer_to_head_ends_at_its_head_whatever_its_content_length() -> None:
    pool = BlockingPool(tls_context=ssl.create_default_context)
    with KeepAliveServer(first=[ANSWER.split(b"\r\n\r\n")[0] + b"\r\n\r\n"]) as server:
        answer = _blocking_get(pool, server.url, method=b"HEAD", timeout_s=2.0)
        after = _blocking_get(pool, server.url)
    pool.close()

    assert (answer.status, answer.body) == (200, b"")
    assert dict(answer.raw_headers)[b"content-length"] == b"%d" % len(BODY)
    assert after.body == BODY


def test_a_connection_close_answer_on_the_loop_is_read_and_its_connection_not_reused() -> None:
    close = ANSWER.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1)
    with KeepAliveServer(first=[close]) as server:
        statuses = asyncio.run(_get_many(HttpCapability(server.url), 2))

    assert statuses == [200, 200]
    assert server.connections == 2
