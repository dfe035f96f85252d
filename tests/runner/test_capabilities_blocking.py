"""HttpCapability's blocking path (`request_blocking`) held to its loop path (`request`), on real loopback servers.

Each scenario is run both ways against the same servers, and what comes back
(the answer, or the error's type, message and attribution) and what the
servers received (request lines and every header) must be the same. What only
one side has is tested on its own: the caller's deadline (a TimeoutError, the
runner's `timeout`), and the configurations where the blocking path declines
(a proxy from the environment, httpx's own transport for tracing) and sends
nothing.
"""

from __future__ import annotations

import asyncio
import gzip
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from runner.capabilities import MAX_REDIRECTS, HttpCapability, HttpResponse
from runner.errors import CapabilityError
from tests.runner.test_http1 import BODY, KeepAliveServer
from tests.support.loopback import LoopbackServer, RecordedRequest, json_answer

TOKEN = "canary-token-7d2a91"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CAP = 100_000


def on_loop(http: HttpCapability, method: str, path: str, **kwargs: Any) -> HttpResponse:
    async def once() -> HttpResponse:
        try:
            return await http.request(method, path, **kwargs)
        finally:
            await http.aclose()

    return asyncio.run(once())


def on_thread(http: HttpCapability, method: str, path: str, **kwargs: Any) -> HttpResponse:
    response = http.request_blocking(method, path, deadline=time.monotonic() + 30, **kwargs)
    assert response is not None, "the blocking path declined"
    return response


def outcome(send: Callable[..., HttpResponse], http: HttpCapability, method: str, path: str, **kwargs: Any) -> tuple:
    """What a caller sees: the answer, or the error (type, message, attribution)."""
    try:
        response = send(http, method, path, **kwargs)
    except CapabilityError as exc:
        return ("failed", str(exc), exc.upstream, exc.host)
    headers = {name: value for name, value in response.headers.items() if name not in ("date", "server")}
    return ("answered", response.status_code, headers, response.content)


def both_ways(servers: tuple[LoopbackServer, ...], method: str, path: str, **kwargs: Any) -> tuple:
    """The scenario on the loop, then on this thread, each through a fresh capability.

    For each: (outcome, what the servers received: which server, method, target, all headers, body).
    """
    results = []
    for send in (on_loop, on_thread):
        before = [len(server.requests) for server in servers]
        http = HttpCapability(servers[0].url, max_response_bytes=CAP, upstream="github")
        seen = outcome(send, http, method, path, **kwargs)
        sent = [
            (index, r.method, r.target, dict(r.headers), r.body)
            for index, server in enumerate(servers)
            for r in server.requests[before[index] :]
        ]
        results.append((seen, sent))
    return tuple(results)


def same_both_ways(servers: tuple[LoopbackServer, ...], method: str, path: str, **kwargs: Any) -> tuple:
    (loop_seen, loop_sent), (thread_seen, thread_sent) = both_ways(servers, method, path, **kwargs)
    assert thread_seen == loop_seen
    assert thread_sent == loop_sent
    assert TOKEN not in repr(thread_seen)
    return thread_seen, thread_sent


def bomb() -> bytes:
    compressed = gzip.compress(b"\0" * 2_000_000)
    assert len(compressed) < 10_000
    return compressed


def raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


# --- the same answers, the same requests on the wire ------------------------------------------


def test_a_plain_get_sends_the_same_request_and_reads_the_same_answer(upstream: LoopbackServer) -> None:
    upstream.route("GET", "/user", json={"login": "octocat"}, headers={"X-RateLimit-Remaining": "59"})

    seen, sent = same_both_ways((upstream,), "GET", "/user", headers=AUTH, params={"q": "a b&c"})

    assert seen[:2] == ("answered", 200)
    assert seen[2]["x-ratelimit-remaining"] == "59"
    assert seen[3] == b'{"login": "octocat"}'
    [(_server, method, target, headers, _body)] = sent
    assert (method, target) == ("GET", "/user?q=a+b%26c")
    assert headers["authorization"] == f"Bearer {TOKEN}"
    assert headers["accept-encoding"] == "gzip, deflate"


def test_a_post_sends_the_same_json_body(upstream: LoopbackServer) -> None:
    upstream.handle("POST", "/issues", lambda r: json_answer(201, {"echo": r.json()}))

    seen, sent = same_both_ways((upstream,), "POST", "/issues", headers=AUTH, json_body={"title": "é", "n": 1})

    assert seen[1] == 201
    assert sent[0][3]["content-type"] == "application/json"


def test_same_origin_redirect_keeps_authorization(upstream: LoopbackServer) -> None:
    upstream.route("GET", "/old", status=302, headers={"Location": "/new"})
    upstream.route("GET", "/new", json={"ok": True})

    seen, sent = same_both_ways((upstream,), "GET", "/old", headers=AUTH)

    assert seen[1] == 200
    assert [(target, headers["authorization"]) for _s, _m, target, headers, _b in sent] == [
        ("/old", f"Bearer {TOKEN}"),
        ("/new", f"Bearer {TOKEN}"),
    ]


def test_cross_origin_redirect_drops_authorization_only(upstream, elsewhere) -> None:
    upstream.route("GET", "/moved", status=302, headers={"Location": f"{elsewhere.url}/landing"})
    elsewhere.route("GET", "/landing", status=302, headers={"Location": f"{upstream.url}/end"})
    upstream.route("GET", "/end", json={"here": True})

    seen, sent = same_both_ways((upstream, elsewhere), "GET", "/moved", headers={**AUTH, "X-Trace": "t-1"})

    assert seen[1] == 200
    hops = [(server, target, "authorization" in headers, headers["x-trace"]) for server, _, target, headers, _ in sent]
    assert hops == [
        (0, "/moved", True, "t-1"),
        (0, "/end", False, "t-1"),  # dropped once, it stays dropped back on the configured origin
        (1, "/landing", False, "t-1"),
    ]


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirected_post_changes_method_and_body_as_on_the_loop(upstream: LoopbackServer, status: int) -> None:
    upstream.route("POST", "/submit", status=status, headers={"Location": "/result"})
    upstream.handle("GET", "/result", lambda r: json_answer(200, {"method": "GET"}))
    upstream.handle("POST", "/result", lambda r: json_answer(201, {"method": "POST", "body": r.json()}))

    seen, sent = same_both_ways((upstream,), "POST", "/submit", headers=AUTH, json_body={"title": "x"})

    assert [method for _s, method, *_rest in sent] == ["POST", "POST" if status in (307, 308) else "GET"]
    assert seen[1] == (201 if status in (307, 308) else 200)


def test_exactly_max_redirects_are_followed_and_one_more_fails(upstream: LoopbackServer) -> None:
    for hop in range(MAX_REDIRECTS):
        upstream.route("GET", f"/hop{hop}", status=302, headers={"Location": f"/hop{hop + 1}"})
    upstream.route("GET", f"/hop{MAX_REDIRECTS}", json={"arrived": True})
    upstream.route("GET", "/loop", status=302, headers={"Location": "/loop"})

    arrived, sent = same_both_ways((upstream,), "GET", "/hop0")
    too_many, looped = same_both_ways((upstream,), "GET", "/loop", headers=AUTH)

    assert arrived[1] == 200
    assert len(sent) == MAX_REDIRECTS + 1
    assert too_many == ("failed", "too many redirects", "github", f"127.0.0.1:{upstream.port}")
    assert len(looped) == MAX_REDIRECTS + 1


@pytest.mark.parametrize(
    ("location", "message"),
    [
        ("ftp://127.0.0.1/x", "redirect to a non-HTTP URL"),
        ("file:///etc/passwd", "redirect to a non-HTTP URL"),
        ("javascript:alert(1)", "redirect to a non-HTTP URL"),
        ("data:text/plain,hi", "redirect to a non-HTTP URL"),
        ("http://127.0.0.1:99999/x", "redirect to an invalid URL"),
    ],
)
def test_a_redirect_the_capability_will_not_follow_fails_the_same_way(upstream, location, message) -> None:
    upstream.route("GET", "/r", status=302, headers={"Location": location})

    seen, sent = same_both_ways((upstream,), "GET", "/r", headers=AUTH)

    assert seen[:2] == ("failed", message)
    assert [target for _s, _m, target, _h, _b in sent] == ["/r"]


def test_a_redirect_status_without_location_is_answered_as_is(upstream: LoopbackServer) -> None:
    upstream.route("GET", "/r", status=302, body=b"no location")

    seen, _sent = same_both_ways((upstream,), "GET", "/r")

    assert (seen[1], seen[3]) == (302, b"no location")


def test_a_cookie_an_answer_sets_is_not_sent_with_the_next_call(upstream: LoopbackServer) -> None:
    upstream.route("GET", "/login", json={}, headers={"Set-Cookie": "session=tenant-a; Path=/"})
    upstream.route("GET", "/user", json={})
    http = HttpCapability(upstream.url)

    on_thread(http, "GET", "/login", headers=AUTH)
    on_thread(http, "GET", "/user")

    assert "cookie" not in upstream.requests[1].headers


def test_paths_off_the_origin_are_refused_before_anything_is_sent(upstream, elsewhere) -> None:
    http = HttpCapability(upstream.url)

    for path in (f"{elsewhere.url}/x", f"//127.0.0.1:{elsewhere.port}/x", f" //127.0.0.1:{elsewhere.port}/x"):
        with pytest.raises(CapabilityError):
            http.request_blocking("GET", path, deadline=time.monotonic() + 5, headers=AUTH)

    assert upstream.requests == elsewhere.requests == []


# --- the response cap and content codings ------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "coding", "expected"),
    [
        (b"x" * CAP, None, CAP),
        (b"x" * (CAP + 1), None, "upstream response too large"),
        (gzip.compress(b"x" * CAP), "gzip", CAP),
        (gzip.compress(b"x" * (CAP + 1)), "gzip", "upstream response too large"),
        (bomb(), "gzip", "upstream response too large"),
        (zlib.compress(b"x" * CAP), "deflate", CAP),
        (raw_deflate(b"x" * CAP), "deflate", CAP),
        (raw_deflate(b"x" * (CAP + 1)), "deflate", "upstream response too large"),
        (zlib.compress(gzip.compress(b"x" * 500)), "gzip, deflate", 500),
        (b"x" * 500, "br", 500),  # a coding httpx does not decode is left as sent
        (b"not gzip at all", "gzip", "upstream request failed (DecodingError)"),
    ],
    ids=["at-cap", "over-cap", "gzip-at-cap", "gzip-over-cap", "gzip-bomb", "deflate-zlib", "deflate-raw",
         "deflate-raw-over-cap", "gzip-then-deflate", "unknown-coding", "broken-gzip"],
)  # fmt: skip
def test_the_cap_counts_decoded_bytes_and_codings_decode_as_on_the_loop(upstream, body, coding, expected) -> None:
    upstream.route("GET", "/blob", body=body, headers={"Content-Encoding": coding} if coding else {})

    seen, _sent = same_both_ways((upstream,), "GET", "/blob")

    if isinstance(expected, int):  # the decoded length
        assert seen[:2] == ("answered", 200)
        assert seen[3] == b"x" * expected
    else:
        assert seen[:2] == ("failed", expected)


# --- time, and connections that end badly ------------------------------------------------------


def test_the_capabilitys_own_timeout_fails_as_upstream_timed_out(upstream: LoopbackServer) -> None:
    release = threading.Event()

    def stall(_request: RecordedRequest) -> tuple[int, dict[str, str], bytes]:
        release.wait(10)
        return json_answer(200, {})

    upstream.handle("GET", "/slow", stall)
    try:
        for send in (on_loop, on_thread):
            http = HttpCapability(upstream.url, timeout=httpx.Timeout(0.2), upstream="github")
            started = time.monotonic()
            with pytest.raises(CapabilityError, match=r"^upstream timed out$") as caught:
                send(http, "GET", "/slow")
            assert time.monotonic() - started < 1.0
            assert (caught.value.upstream, caught.value.host) == ("github", f"127.0.0.1:{upstream.port}")
    finally:
        release.set()


def test_the_callers_deadline_cuts_the_request_as_a_timeout_error(upstream: LoopbackServer) -> None:
    # A TimeoutError past the deadline: the runner's `timeout` (the loop path is cut by the loop's budget instead).
    release = threading.Event()

    def stall(_request: RecordedRequest) -> tuple[int, dict[str, str], bytes]:
        release.wait(10)
        return json_answer(200, {})

    upstream.handle("GET", "/slow", stall)
    http = HttpCapability(upstream.url)
    started = time.monotonic()
    try:
        with pytest.raises(TimeoutError):
            http.request_blocking("GET", "/slow", deadline=started + 0.3)
        elapsed = time.monotonic() - started
    finally:
        release.set()

    assert 0.3 <= elapsed < 0.6
    assert [r.path for r in upstream.requests] == ["/slow"]


def test_the_read_timeout_bounds_each_wait_not_the_whole_answer() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(BODY)
    trickled = (head, BODY[:5], BODY[5:10], BODY[10:])  # 0.45 s in all, 0.15 s between pieces
    with KeepAliveServer(first=[trickled]) as server:
        http = HttpCapability(server.url, timeout=httpx.Timeout(0.3))
        response = on_thread(http, "GET", "/user")
        http.close()

    assert response.content == BODY


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\nConnection: close\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\nContent-Le",
        b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
    ],
    ids=["body-cut", "head-cut", "not-http"],
)
def test_a_server_that_closes_mid_answer_fails_as_on_the_loop(answer: bytes) -> None:
    seen = []
    for send in (on_loop, on_thread):
        with KeepAliveServer(first=[answer], close_after_answer=True) as server:
            seen.append(outcome(send, HttpCapability(server.url, upstream="github"), "GET", "/user"))

    assert seen[0][:2] == ("failed", "upstream request failed (RemoteProtocolError)")
    assert seen[1][:3] == seen[0][:3]  # the host differs: one server each


def test_an_unreachable_upstream_fails_as_on_the_loop() -> None:
    with LoopbackServer() as gone:
        url = gone.url
    seen = {outcome(send, HttpCapability(url, upstream="github"), "GET", "/x") for send in (on_loop, on_thread)}

    assert seen == {("failed", "upstream request failed (ConnectError)", "github", url.split("://")[1])}


def test_threads_at_once_share_one_capability(upstream: LoopbackServer) -> None:
    upstream.handle("GET", "/who", lambda r: json_answer(200, {"q": r.query}))
    http = HttpCapability(upstream.url)
    start = threading.Barrier(4)
    answers: dict[int, list[bytes]] = {}

    def worker(n: int) -> None:
        start.wait()
        answers[n] = [on_thread(http, "GET", "/who", params={"n": str(n)}).content for _ in range(5)]

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)

    assert answers == {n: [b'{"q": "n=%d"}' % n] * 5 for n in range(4)}


# --- where the blocking path declines ----------------------------------------------------------


def test_a_proxy_in_the_environment_makes_the_blocking_path_decline(upstream, monkeypatch) -> None:
    upstream.route("GET", "/user", json={})
    with LoopbackServer() as proxy:
        proxy.route("GET", f"{upstream.url}/user", json={"via": "proxy"})
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", "")
        http = HttpCapability(upstream.url)

        declined = http.request_blocking("GET", "/user", deadline=time.monotonic() + 5, headers=AUTH)
        sent_before_the_loop = (list(proxy.requests), list(upstream.requests))
        on_the_loop = on_loop(http, "GET", "/user", headers=AUTH)

    assert declined is None
    assert sent_before_the_loop == ([], [])
    assert on_the_loop.json() == {"via": "proxy"}


def test_httpx_own_transport_for_tracing_makes_the_blocking_path_decline(upstream: LoopbackServer) -> None:
    http = HttpCapability(upstream.url, keep_alive_transport=False)

    assert http.request_blocking("GET", "/user", deadline=time.monotonic() + 5, headers=AUTH) is None
    assert upstream.requests == []
