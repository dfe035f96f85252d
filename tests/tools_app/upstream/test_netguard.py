"""Upstream addresses: http(s) only, no private networks by default, resolved once and pinned."""

from __future__ import annotations

import asyncio
import socket

import httpx2
import pytest

from tests.support.loopback import LoopbackServer
from tools_app.upstream.netguard import (
    Endpoint,
    PinnedTransport,
    UpstreamAddressRefused,
    check_url_now,
    is_private_address,
    parse_endpoint,
    resolve_checked,
)


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.0.0.8",
        "172.16.3.4",
        "192.168.1.1",
        "169.254.169.254",
        "::1",
        "fe80::1",
        "0.0.0.0",  # noqa: S104 - an address under test, nothing binds it
        "::ffff:127.0.0.1",
        "fd00::1",
    ],
)
def test_private_loopback_and_link_local_addresses_are_private(address):
    assert is_private_address(address) is True


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:4700:4700::1111", "1.1.1.1"])
def test_public_addresses_are_not(address):
    assert is_private_address(address) is False


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://example.com/mcp", "http or https"),
        ("https://user:pw@example.com/mcp", "must not carry credentials"),
        ("https:///mcp", "no host"),
        ("http://[::1/mcp", "malformed"),
    ],
)
def test_urls_that_are_not_plain_http_endpoints_are_refused(url, message):
    with pytest.raises(UpstreamAddressRefused, match=message):
        parse_endpoint(url)


def test_a_name_that_resolves_to_loopback_is_refused_unless_allowed():
    with pytest.raises(UpstreamAddressRefused, match="private"):
        check_url_now("http://localhost:8000/mcp", allow_private=False)
    check_url_now("http://localhost:8000/mcp", allow_private=True)


def test_one_private_answer_among_public_ones_refuses_the_host(monkeypatch):
    async def rebinding_answer(host, port, **kwargs):
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port)),
        ]

    async def check() -> str:
        monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", rebinding_answer)
        return await resolve_checked(Endpoint("https", "mcp.example.com", 443), allow_private=False)

    with pytest.raises(UpstreamAddressRefused, match="private"):
        asyncio.run(check())


def test_the_transport_connects_to_the_checked_address_with_the_original_host_header():
    # given a host name that resolves nowhere: only the pinned address can be reached
    with LoopbackServer() as server:
        server.route("POST", "/mcp", json={"ok": True})

        async def send() -> httpx2.Response:
            transport = PinnedTransport(address="127.0.0.1", hostname="mcp.invalid")
            async with httpx2.AsyncClient(transport=transport) as client:
                return await client.post(f"http://mcp.invalid:{server.port}/mcp", json={})

        response = asyncio.run(send())

    assert response.status_code == 200
    assert [request.headers["host"] for request in server.requests] == [f"mcp.invalid:{server.port}"]


def test_the_transport_cuts_an_oversized_answer():
    with LoopbackServer() as server:
        server.route("POST", "/mcp", body=b"x" * 5000, headers={"Content-Type": "application/json"})

        async def send() -> PinnedTransport:
            transport = PinnedTransport(address="127.0.0.1", hostname="127.0.0.1", max_response_bytes=1000)
            async with httpx2.AsyncClient(transport=transport) as client:
                with pytest.raises(httpx2.StreamError, match="too large"):
                    await client.post(f"http://127.0.0.1:{server.port}/mcp", json={})
            return transport

        transport = asyncio.run(send())

    assert transport.oversized == 1
