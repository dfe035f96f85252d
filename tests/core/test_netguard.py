"""Upstream addresses: http(s) only, no private networks by default, resolved once and pinned."""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import zlib

import httpx2
import pytest

from core.netguard import (
    Endpoint,
    PinnedTransport,
    ResponseTooLarge,
    UnaskedContentEncoding,
    UpstreamAddressRefused,
    check_url_now,
    is_private_address,
    parse_endpoint,
    resolve_checked,
)
from tests.support.loopback import LoopbackServer

# One address from every entry of IANA's IPv4 and IPv6 Special-Purpose Address Registries
# (2025), plus multicast, the embedded-IPv4 forms and the site-local leftovers.
REFUSED = [
    ("0.0.0.0", "this host on this network"),  # noqa: S104 - an address under test, nothing binds it
    ("0.1.2.3", "this network"),
    ("10.0.0.8", "private-use"),
    ("100.64.0.1", "shared address space"),
    ("100.100.100.200", "shared address space (a cloud metadata service)"),
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("169.254.169.254", "link local (a cloud metadata service)"),
    ("172.16.3.4", "private-use"),
    ("192.0.0.1", "IETF protocol assignments"),
    ("192.0.0.6", "DS-Lite"),
    ("192.0.0.8", "IPv4 dummy address"),
    ("192.0.0.9", "port control protocol anycast"),
    ("192.0.0.10", "traversal using relays around NAT anycast"),
    ("192.0.0.170", "NAT64/DNS64 discovery"),
    ("192.0.0.171", "NAT64/DNS64 discovery"),
    ("192.0.2.1", "documentation (TEST-NET-1)"),
    ("192.88.99.1", "deprecated 6to4 relay anycast"),
    ("192.168.1.1", "private-use"),
    ("198.18.0.1", "benchmarking"),
    ("198.19.255.254", "benchmarking"),
    ("198.51.100.7", "documentation (TEST-NET-2)"),
    ("203.0.113.9", "documentation (TEST-NET-3)"),
    ("224.0.0.1", "multicast, local"),
    ("224.0.1.1", "multicast, internetwork"),
    ("239.255.255.250", "multicast, administratively scoped"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "limited broadcast"),
    ("::", "unspecified"),
    ("::1", "loopback"),
    ("::ffff:127.0.0.1", "IPv4-mapped loopback"),
    ("::ffff:10.0.0.1", "IPv4-mapped private"),
    ("::ffff:100.100.100.200", "IPv4-mapped shared address space"),
    ("::127.0.0.1", "deprecated IPv4-compatible"),
    ("::8.8.8.8", "deprecated IPv4-compatible, even of a public address"),
    ("64:ff9b::7f00:1", "NAT64 of loopback"),
    ("64:ff9b::a9fe:a9fe", "NAT64 of link local"),
    ("64:ff9b:1::1", "local-use IPv4/IPv6 translation"),
    ("100::1", "discard-only"),
    ("100:0:0:1::1", "dummy IPv6 prefix"),
    ("2001::1", "Teredo"),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
    ("2001:1::1", "port control protocol anycast"),
    ("2001:1::2", "traversal using relays around NAT anycast"),
    ("2001:1::3", "DNS-SD service registration protocol anycast"),
    ("2001:2::1", "benchmarking"),
    ("2001:3::1", "automatic multicast tunneling"),
    ("2001:4:112::1", "AS112-v6"),
    ("2001:10::1", "deprecated ORCHID"),
    ("2001:20::1", "ORCHIDv2"),
    ("2001:30::1", "drone remote ID"),
    ("2001:db8::1", "documentation"),
    ("2002:7f00:1::", "6to4 of loopback"),
    ("2002:808:808::1", "6to4, even of a public address"),
    ("3fff::1", "documentation (2024)"),
    ("5f00::1", "segment routing SIDs"),
    ("fc00::1", "unique local"),
    ("fd00::1", "unique local"),
    ("fe80::1", "link local"),
    ("fe80::1%eth0", "link local with a zone"),
    ("fec0::1", "deprecated site local"),
    ("ff02::1", "multicast, link local"),
    ("ff0e::1", "multicast, global scope"),
]

ALLOWED = [
    ("93.184.216.34", "public"),
    ("1.1.1.1", "public"),
    ("100.63.255.255", "public, just below the shared address space"),
    ("100.128.0.1", "public, just above the shared address space"),
    ("192.31.196.1", "AS112-v4, globally reachable"),
    ("192.175.48.1", "AS112 direct delegation, globally reachable"),
    ("2606:4700:4700::1111", "public"),
    ("2620:4f:8000::1", "AS112 direct delegation, globally reachable"),
    ("::ffff:8.8.8.8", "IPv4-mapped public"),
    ("64:ff9b::808:808", "NAT64 of a public address"),
]


@pytest.mark.parametrize(("address", "why"), REFUSED)
def test_addresses_that_are_not_globally_routable_are_refused(address, why):
    assert is_private_address(address) is True, why


@pytest.mark.parametrize(("address", "why"), ALLOWED)
def test_globally_routable_addresses_are_allowed(address, why):
    assert is_private_address(address) is False, why


@pytest.mark.parametrize(("address", "why"), REFUSED)
def test_a_url_with_a_refused_literal_address_is_refused_when_saved(address, why):
    host = f"[{address.replace('%', '%25')}]" if ":" in address else address

    with pytest.raises(UpstreamAddressRefused, match="not allowed"):
        check_url_now(f"http://{host}/mcp", allow_private=False)


def test_the_refusal_names_no_setting():
    """Tenants see this text (webhooks): it says what is wrong, not how operators configure Toolgate."""
    with pytest.raises(UpstreamAddressRefused) as refused:
        check_url_now("http://100.100.100.200/latest/meta-data/", allow_private=False)

    assert "TOOLGATE" not in str(refused.value)


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
    with pytest.raises(UpstreamAddressRefused, match="not allowed"):
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

    with pytest.raises(UpstreamAddressRefused, match="not allowed"):
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


# --- content codings: counted after decoding, only what was asked for ------------------------------------


def gzipped(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9)


def deflated(data: bytes, *, raw: bool = False) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS if raw else zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


def post_through_transport(server: LoopbackServer, *, cap: int) -> tuple[PinnedTransport, httpx2.Response | Exception]:
    async def send() -> tuple[PinnedTransport, httpx2.Response | Exception]:
        transport = PinnedTransport(address="127.0.0.1", hostname="127.0.0.1", max_response_bytes=cap)
        async with httpx2.AsyncClient(transport=transport) as client:
            try:
                return transport, await client.post(f"http://127.0.0.1:{server.port}/mcp", json={})
            except Exception as exc:  # the test looks at which one
                return transport, exc

    return asyncio.run(send())


BOMB = b'{"padding": "' + b" " * (8 * 1024 * 1024) + b'"}'  # 8 MiB that compresses to about 8 KiB


@pytest.mark.parametrize(
    ("coding", "encode"),
    [("gzip", gzipped), ("deflate", deflated), ("deflate", lambda data: deflated(data, raw=True))],
    ids=["gzip", "deflate", "raw-deflate"],
)
def test_a_compressed_answer_is_counted_after_decoding(coding, encode):
    # given a body far under the cap on the wire, far over it once decoded
    body = encode(BOMB)
    assert len(body) < 64 * 1024
    with LoopbackServer() as server:
        server.route(
            "POST", "/mcp", body=body, headers={"Content-Type": "application/json", "Content-Encoding": coding}
        )

        transport, outcome = post_through_transport(server, cap=1024 * 1024)

    assert isinstance(outcome, ResponseTooLarge)
    assert transport.oversized == 1
    assert server.requests[0].headers["accept-encoding"] == "gzip, deflate"


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_a_compressed_answer_under_the_cap_arrives_decoded(coding):
    document = json.dumps({"tools": [{"name": f"tool_{n}"} for n in range(2000)]}).encode()
    encode = gzipped if coding == "gzip" else deflated
    with LoopbackServer() as server:
        server.route(
            "POST",
            "/mcp",
            body=encode(document),
            headers={"Content-Type": "application/json", "Content-Encoding": coding},
        )

        transport, outcome = post_through_transport(server, cap=len(document))

    assert isinstance(outcome, httpx2.Response)
    assert outcome.content == document
    assert "content-encoding" not in outcome.headers
    assert transport.oversized == 0


def test_gzip_inside_gzip_is_undone_and_counted_at_each_layer():
    body = gzipped(gzipped(BOMB))
    with LoopbackServer() as server:
        server.route("POST", "/mcp", body=body, headers={"Content-Encoding": "gzip, gzip"})

        transport, outcome = post_through_transport(server, cap=1024 * 1024)

    assert isinstance(outcome, ResponseTooLarge)
    assert transport.oversized == 1


@pytest.mark.parametrize("coding", ["br", "zstd", "compress", "x-custom", "gzip, gzip, gzip"])
def test_an_encoding_that_was_not_asked_for_is_refused_unread(coding):
    with LoopbackServer() as server:
        server.route("POST", "/mcp", body=b"\x00" * 100, headers={"Content-Encoding": coding})

        transport, outcome = post_through_transport(server, cap=1024 * 1024)

    assert isinstance(outcome, UnaskedContentEncoding)
    assert str(outcome) == "the upstream answered in a content encoding Toolgate did not ask for"
    assert transport.unasked_encodings == 1


def test_a_corrupt_gzip_body_is_a_decoding_error():
    with LoopbackServer() as server:
        server.route("POST", "/mcp", body=b"\x1f\x8b" + b"\x00" * 50, headers={"Content-Encoding": "gzip"})

        _transport, outcome = post_through_transport(server, cap=1024 * 1024)

    assert isinstance(outcome, httpx2.DecodingError)
    assert str(outcome) == "the upstream's gzip body is corrupt"
