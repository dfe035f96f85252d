"""Client CPU per keep-alive request: runner/http1's pools against httpcore2 (httpx2's core) and urllib3.

Two request shapes, each on one warm keep-alive connection to a loopback
upstream that runs in a process of its own (so its CPU is not counted):

- proxied call: the plain-JSON `tools/call` POST the gateway sends an MCP
  upstream (gateway/upstream/lean.py), with its MCP headers, answered with
  a small JSON-RPC result;
- provider call: what the runner's HTTP capability sends a provider API (a
  GET with User-Agent, Accept, Accept-Encoding and a bearer token, and a small
  JSON POST), answered with a ~1 KB JSON body.

Every client connects to the checked address (127.0.0.1) and sends the URL's
host as Host, as the pinned paths do. Measured per client: CPU (process time,
this process only) per request and wall time per request, as the median of
ROUNDS rounds of CALLS requests, the clients interleaved round by round so
that drift on a shared machine hits all of them alike. Ratios are to the
hand-written pool of the same kind (async or blocking) in the same run. The
last lines are the whole HttpCapability (async and blocking) over the same
upstream, to show what the capability adds above its transport.

    python -m bench.http_clients        (or: make bench)

Not a test: nothing passes or fails.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import httpcore2
import urllib3

from runner.capabilities import BearerAuth, HttpCapability
from runner.http1 import AsyncPool, BlockingPool, Origin, RequestHead

ROUNDS = 7
CALLS = 1_000
WARMUP = 200

RPC_BODY = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1073741824,
        "method": "tools/call",
        "params": {"name": "search_issues", "arguments": {"query": "is:open label:bug", "limit": 10}},
    },
    separators=(",", ":"),
).encode()
RPC_ANSWER = json.dumps(
    {"jsonrpc": "2.0", "id": 1073741824, "result": {"content": [{"type": "text", "text": "ok " * 40}]}}
).encode()
API_ANSWER = json.dumps({"items": [{"id": n, "title": f"issue {n}", "state": "open"} for n in range(16)]}).encode()
POST_BODY = json.dumps({"title": "a new issue", "body": "steps to reproduce"}).encode()
MCP_HEADERS = [
    (b"accept", b"application/json, text/event-stream"),
    (b"content-type", b"application/json"),
    (b"mcp-protocol-version", b"2025-11-25"),
    (b"authorization", b"Bearer bench-token"),
]
API_HEADERS = [
    (b"user-agent", b"toolgate"),
    (b"accept", b"application/json"),
    (b"accept-encoding", b"gzip, deflate"),
    (b"authorization", b"Bearer bench-token"),
]


# --- the upstream, in a process of its own ------------------------------------------------


class _Upstream(asyncio.Protocol):
    """HTTP/1.1 keep-alive: POST /mcp answers RPC_ANSWER, anything else API_ANSWER."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._buffer = b""

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while True:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self._buffer[:end].lower()
            length = 0
            for line in head.split(b"\r\n")[1:]:
                if line.startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            if len(self._buffer) < end + 4 + length:
                return
            self._buffer = self._buffer[end + 4 + length :]
            body = RPC_ANSWER if head.startswith(b"post /mcp") else API_ANSWER
            self._transport.write(  # type: ignore[attr-defined]
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
            )


def serve() -> None:
    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(_Upstream, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent goes

    asyncio.run(main())


# --- the clients ----------------------------------------------------------------------------

Call = Callable[[], object]
AsyncCall = Callable[[], Awaitable[object]]


def _hand_written(port: int, method: bytes, path: bytes, headers, body: bytes):
    """runner/http1: the AsyncPool and the BlockingPool generated from it."""
    origin = Origin("127.0.0.1", port, False, "localhost")
    wire_headers = [(b"host", b"localhost:%d" % port), *headers]
    if body:
        wire_headers.append((b"content-length", b"%d" % len(body)))
    head = RequestHead(method, path, wire_headers)
    pool = AsyncPool(tls_context=ssl.create_default_context)
    blocking = BlockingPool(tls_context=ssl.create_default_context)

    async def async_call() -> object:
        answer = await pool.request(
            origin, head, body, max_response_bytes=1 << 20, connect_timeout_s=5.0, read_timeout_s=5.0
        )
        assert answer.status == 200
        return answer

    def blocking_call() -> object:
        answer = blocking.request(
            origin, head, body, max_response_bytes=1 << 20, connect_timeout_s=5.0, deadline=time.monotonic() + 5.0
        )
        assert answer.status == 200
        return answer

    return async_call, blocking_call


def _httpcore2(port: int, method: bytes, path: bytes, headers, body: bytes):
    """httpcore2 (what httpx2, so the MCP SDK, brings): its async pool on anyio, its sync pool on sockets.

    Pinned as netguard.PinnedTransport pins httpx2: the URL carries the checked address, Host the name.
    """
    url = f"http://127.0.0.1:{port}{path.decode()}"
    wire_headers = [(b"host", b"localhost:%d" % port), *headers]
    extensions = {"timeout": {"connect": 5.0, "read": 5.0, "write": 5.0, "pool": 5.0}}
    pool = httpcore2.AsyncConnectionPool(max_connections=10, keepalive_expiry=60.0)
    blocking = httpcore2.ConnectionPool(max_connections=10, keepalive_expiry=60.0)

    async def async_call() -> object:
        response = await pool.request(method, url, headers=wire_headers, content=body, extensions=extensions)
        assert response.status == 200
        return response

    def blocking_call() -> object:
        response = blocking.request(method, url, headers=wire_headers, content=body, extensions=extensions)
        assert response.status == 200
        return response

    return async_call, blocking_call


def _urllib3(port: int, method: bytes, path: bytes, headers, body: bytes) -> Call:
    """urllib3's HTTPConnectionPool (blocking only: urllib3 2.x has no async pool)."""
    pool = urllib3.HTTPConnectionPool("127.0.0.1", port, maxsize=10, retries=False, timeout=5.0)
    send = {name.decode(): value.decode() for name, value in headers}
    send["Host"] = f"localhost:{port}"

    def blocking_call() -> object:
        response = pool.request(
            method.decode(), path.decode(), headers=send, body=body or None, redirect=False, decode_content=False
        )
        assert response.status == 200
        return response

    return blocking_call


def _capability(port: int, method: str, body: bytes):
    """The whole runner HttpCapability over the same upstream (redirect and decoding rules included)."""
    http = HttpCapability(f"http://127.0.0.1:{port}/")
    headers = BearerAuth("bench-token").headers()
    payload = json.loads(body) if body else None

    async def async_call() -> object:
        return await http.request(method, "repos/o/r/issues", headers=headers, json_body=payload)

    def blocking_call() -> object:
        return http.request_blocking(
            method, "repos/o/r/issues", headers=headers, json_body=payload, deadline=time.monotonic() + 5.0
        )

    return async_call, blocking_call


# --- measuring ------------------------------------------------------------------------------


def _round_blocking(call: Call) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(CALLS):
        call()
    return (time.process_time() - cpu) / CALLS * 1e6, (time.perf_counter() - wall) / CALLS * 1e6


def _round_async(loop: asyncio.AbstractEventLoop, call: AsyncCall) -> tuple[float, float]:
    async def run() -> None:
        for _ in range(CALLS):
            await call()

    cpu, wall = time.process_time(), time.perf_counter()
    loop.run_until_complete(run())
    return (time.process_time() - cpu) / CALLS * 1e6, (time.perf_counter() - wall) / CALLS * 1e6


def _measure(loop: asyncio.AbstractEventLoop, clients: dict[str, tuple[str, object]]) -> dict[str, tuple[float, float]]:
    """Median (CPU µs, wall µs) per request of each client, interleaved round by round."""
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in clients}
    for kind, call in clients.values():  # warm: connect, import, fill caches
        for _ in range(WARMUP):
            if kind == "async":
                loop.run_until_complete(call())  # type: ignore[operator]
            else:
                call()  # type: ignore[operator]
    for _ in range(ROUNDS):
        for name, (kind, call) in clients.items():
            run = _round_async(loop, call) if kind == "async" else _round_blocking(call)  # type: ignore[arg-type]
            samples[name].append(run)
    return {
        name: (statistics.median(cpu for cpu, _ in runs), statistics.median(wall for _, wall in runs))
        for name, runs in samples.items()
    }


def _report(title: str, figures: dict[str, tuple[float, float]], baselines: dict[str, str]) -> None:
    print(f"\n{title}")
    for name, (cpu, wall) in figures.items():
        base = baselines.get(name)
        ratio = f"  x{cpu / figures[base][0]:.2f} CPU of {base}" if base and base != name else ""
        print(f"  {name:<34} {cpu:7.1f} us CPU/call  {wall:7.1f} us wall/call{ratio}")


def _shape(loop, port: int, method: bytes, path: bytes, headers, body: bytes, capability: str | None):  # noqa: PLR0917
    own_async, own_blocking = _hand_written(port, method, path, headers, body)
    core_async, core_blocking = _httpcore2(port, method, path, headers, body)
    clients: dict[str, tuple[str, object]] = {
        "http1.AsyncPool (llhttp)": ("async", own_async),
        "httpcore2.AsyncConnectionPool": ("async", core_async),
        "http1.BlockingPool (llhttp)": ("blocking", own_blocking),
        "httpcore2.ConnectionPool": ("blocking", core_blocking),
        "urllib3.HTTPConnectionPool": ("blocking", _urllib3(port, method, path, headers, body)),
    }
    if capability is not None:
        cap_async, cap_blocking = _capability(port, capability, body)
        clients["HttpCapability.request (async)"] = ("async", cap_async)
        clients["HttpCapability.request_blocking"] = ("blocking", cap_blocking)
    baselines = {
        name: "http1.AsyncPool (llhttp)" if kind == "async" else "http1.BlockingPool (llhttp)"
        for name, (kind, _call) in clients.items()
    }
    return _measure(loop, clients), baselines


def main() -> None:
    upstream = subprocess.Popen(
        [sys.executable, "-m", "bench.http_clients", "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        port = int(upstream.stdout.readline())  # type: ignore[union-attr]
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        loop = asyncio.new_event_loop()
        print(f"HTTP clients, one warm keep-alive connection to a loopback upstream; {ROUNDS} rounds x {CALLS} calls")
        figures, baselines = _shape(loop, port, b"POST", b"/mcp", MCP_HEADERS, RPC_BODY, None)
        _report("(a) proxied call: JSON-RPC tools/call POST to an MCP upstream", figures, baselines)
        figures, baselines = _shape(loop, port, b"GET", b"/repos/o/r/issues", API_HEADERS, b"", "GET")
        _report("(b) provider call: GET to a provider API (1 KB JSON answer)", figures, baselines)
        post_headers = [*API_HEADERS, (b"content-type", b"application/json")]
        figures, baselines = _shape(loop, port, b"POST", b"/repos/o/r/issues", post_headers, POST_BODY, "POST")
        _report("(b) provider call: JSON POST to a provider API", figures, baselines)
        loop.close()
    finally:
        upstream.stdin.close()  # type: ignore[union-attr]
        upstream.wait(timeout=10)


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        main()
