"""The egress proxy of a sandboxed stdio child, on its own: what it carries, what it refuses, its bounds.

Real parts: the proxy on a real Unix socket, real loopback TCP servers as the targets, raw
HTTP/1.1 from a client that speaks to the socket. Loopback targets need the private-networks
switch, as upstreams on loopback do; a refusal under the guard is checked without it.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from pathlib import Path

import pytest

from core.netguard import NOT_ALLOWED
from gateway.host.egress import AllowedHostInvalid, EgressProxy, ProxyLimits, parse_allowed_hosts

NOT_LISTED = "not an allowed host of this server (mcp_upstream add --allow-host)"
PLAIN_HTTPS = "a plain request needs an absolute http:// URL (use CONNECT for https)"


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        (["API.GitHub.com.:443"], ["api.github.com:443"]),
        (["[::1]:8080", "127.0.0.1:80", "127.0.0.1:80"], ["[::1]:8080", "127.0.0.1:80"]),
    ],
)
def test_allowed_hosts_are_normalised(given, stored):
    assert parse_allowed_hosts(given) == stored


@pytest.mark.parametrize(
    ("given", "reason"),
    [
        ("api.github.com", "is not HOST:PORT"),
        ("api.github.com:0", "is not HOST:PORT"),
        ("api.github.com:99999", "is not HOST:PORT"),
        ("*.github.com:443", "wildcards are not allowed"),
        ("http://api.github.com:443", "does not name a host"),
        ("[nonsense]:443", "IPv6 address in brackets"),
        ("::1:443", "does not name a host"),
    ],
)
def test_malformed_allowed_hosts_are_refused_with_the_reason(given, reason):
    with pytest.raises(AllowedHostInvalid, match=reason.replace("*", r"\*")):
        parse_allowed_hosts([given])


class Target:
    """A loopback TCP server answering one HTTP response per connection; records what reached it."""

    def __init__(self) -> None:
        self.received: list[bytes] = []

    async def __aenter__(self) -> Target:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        self.received.append(head)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()


async def exchange(path: Path, data: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(data)
    await writer.drain()
    try:
        async with asyncio.timeout(10):
            return await reader.read()
    finally:
        writer.close()


def run_with_proxy(allowed, scenario, *, allow_private=True, limits=None):  # type: ignore[no-untyped-def]
    async def main():  # type: ignore[no-untyped-def]
        directory = Path(tempfile.mkdtemp(prefix="toolgate-egress-test-"))
        async with Target() as target:
            proxy = EgressProxy(
                slug="kit",
                allowed_hosts=[host.format(port=target.port) for host in allowed],
                path=directory / "proxy.sock",
                allow_private=lambda: allow_private,
                limits=limits,
            )
            await proxy.start()
            try:
                return await scenario(proxy, target)
            finally:
                await proxy.close()

    return asyncio.run(main())


def test_a_plain_request_goes_to_the_allowed_host_in_origin_form_with_proxy_headers_dropped():
    async def scenario(proxy, target):  # type: ignore[no-untyped-def]
        request = (
            f"GET http://127.0.0.1:{target.port}/v1/items?page=2 HTTP/1.1\r\nHost: 127.0.0.1:{target.port}\r\n"
            "Proxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\n\r\n"
        )
        return await exchange(proxy.path, request.encode()), target.received

    answer, received = run_with_proxy(["127.0.0.1:{port}"], scenario)

    assert answer == b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
    assert len(received) == 1
    lines = received[0].decode().split("\r\n")
    assert lines[0] == "GET /v1/items?page=2 HTTP/1.1"
    assert "Connection: close" in lines
    assert not any(line.lower().startswith(("proxy-authorization", "proxy-connection")) for line in lines)


def test_connect_tunnels_to_the_allowed_host():
    async def scenario(proxy, target):  # type: ignore[no-untyped-def]
        reader, writer = await asyncio.open_unix_connection(str(proxy.path))
        writer.write(f"CONNECT 127.0.0.1:{target.port} HTTP/1.1\r\n\r\n".encode())
        established = await reader.readuntil(b"\r\n\r\n")
        writer.write(b"GET /inside HTTP/1.1\r\nHost: x\r\n\r\n")
        writer.write_eof()  # a client that half-closes still gets its answer
        answer = await reader.read()
        writer.close()
        return established, answer, target.received

    established, answer, received = run_with_proxy(["127.0.0.1:{port}"], scenario)

    assert established == b"HTTP/1.1 200 Connection established\r\n\r\n"
    assert answer.endswith(b"\r\n\r\nok")
    assert received == [b"GET /inside HTTP/1.1\r\nHost: x\r\n\r\n"]


@pytest.mark.parametrize(
    ("allowed", "allow_private", "request_line", "refusal"),
    [
        (["127.0.0.1:1"], True, "CONNECT 127.0.0.1:{port} HTTP/1.1", (403, NOT_LISTED)),
        (["127.0.0.1:{port}"], False, "CONNECT 127.0.0.1:{port} HTTP/1.1", (403, NOT_ALLOWED)),
        (["localhost:{port}"], False, "GET http://localhost:{port}/ HTTP/1.1", (403, NOT_ALLOWED)),
        (["127.0.0.1:{port}"], True, "GET https://127.0.0.1:{port}/ HTTP/1.1", (400, PLAIN_HTTPS)),
        (["127.0.0.1:{port}"], True, "HELLO", (400, "not an HTTP proxy request")),
    ],
)
def test_what_is_not_allowed_is_refused_logged_and_never_reaches_the_target(
    allowed, allow_private, request_line, refusal, caplog
):
    status, reason = refusal
    caplog.set_level(logging.WARNING, logger="gateway.host.egress")

    async def scenario(proxy, target):  # type: ignore[no-untyped-def]
        line = request_line.format(port=target.port)
        return await exchange(proxy.path, f"{line}\r\nAuthorization: Bearer sk-secret-1234\r\n\r\n".encode()), target

    answer, target = run_with_proxy(allowed, scenario, allow_private=allow_private)

    assert answer.split(b"\r\n", 1)[0].startswith(f"HTTP/1.1 {status} ".encode())
    assert answer.split(b"\r\n\r\n", 1)[1] == f"egress refused: {reason}\n".encode()
    assert target.received == []
    logged = [record.getMessage() for record in caplog.records if record.name == "gateway.host.egress"]
    assert len(logged) == 1
    assert logged[0].startswith("mcp server kit: egress to ")
    assert "sk-secret" not in logged[0]


def test_the_proxy_bounds_the_request_head_and_the_number_of_connections():
    limits = ProxyLimits(max_connections=2, max_head_bytes=1024, head_timeout_s=5)

    async def scenario(proxy, target):  # type: ignore[no-untyped-def]
        too_large = await exchange(proxy.path, b"GET http://127.0.0.1/ HTTP/1.1\r\nX: " + b"a" * 1500 + b"\r\n\r\n")
        held = [await asyncio.open_unix_connection(str(proxy.path)) for _ in range(2)]
        await asyncio.sleep(0.1)  # both are being served (waiting for their request heads)
        over = await exchange(proxy.path, f"CONNECT 127.0.0.1:{target.port} HTTP/1.1\r\n\r\n".encode())
        for _reader, writer in held:
            writer.close()
        return too_large, over, target.received

    too_large, over, received = run_with_proxy(["127.0.0.1:{port}"], scenario, limits=limits)

    assert too_large.startswith(b"HTTP/1.1 431 ")
    assert over.startswith(b"HTTP/1.1 503 ")
    assert received == []


def test_a_tunnel_is_cut_once_it_carried_its_byte_bound():
    limits = ProxyLimits(max_bytes=64 * 1024)

    async def scenario(proxy, _target):  # type: ignore[no-untyped-def]
        async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    writer.write(b"x" * 16384)
                    await writer.drain()
            except ConnectionError:
                pass

        flooder = await asyncio.start_server(flood, "127.0.0.1", 0)
        port = flooder.sockets[0].getsockname()[1]
        proxy.allowed = frozenset({f"127.0.0.1:{port}"})
        reader, writer = await asyncio.open_unix_connection(str(proxy.path))
        writer.write(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
        await reader.readuntil(b"\r\n\r\n")
        received = 0
        async with asyncio.timeout(10):
            while chunk := await reader.read(65536):
                received += len(chunk)
        writer.close()
        flooder.close()
        return received

    received = run_with_proxy([], scenario, limits=limits)

    assert 0 < received <= 64 * 1024
