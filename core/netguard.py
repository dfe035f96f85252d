"""Where Toolgate may connect (every outbound URL), and connecting only to the address that was checked.

A URL must be http(s) without user info. Its host is resolved once per
connection; every address must be globally routable unless the caller allows
private networks (a setting per use: upstream MCP servers, webhooks, sign-in), and the connection then goes to
that checked address (with the original Host header and TLS server name), so
a DNS answer that changes between the check and the connect (rebinding) cannot
point Toolgate at an internal service.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx2

from core.framing import framing_checked_transport

# An upstream answer larger than this is cut off before it is parsed: the SDK caps only SSE events.
MAX_UPSTREAM_RESPONSE_BYTES = 16 * 1024 * 1024
AUTH_REJECTED_STATUSES = frozenset({401, 403})


NOT_ALLOWED = "the URL points at an address that is not allowed (loopback, private, link-local or reserved)"


class UpstreamAddressRefused(ValueError):
    """The URL or the address it resolves to is not allowed; the message is safe to show."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    scheme: str
    host: str
    port: int


def parse_endpoint(url: str) -> Endpoint:
    """The scheme, host and port of an upstream URL, or UpstreamAddressRefused."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise UpstreamAddressRefused("the URL is malformed") from None
    if parts.scheme not in ("http", "https"):
        raise UpstreamAddressRefused("the URL must use http or https")
    if not parts.hostname:
        raise UpstreamAddressRefused("the URL has no host")
    if parts.username is not None or parts.password is not None:
        raise UpstreamAddressRefused("the URL must not carry credentials; use --secret-env")
    return Endpoint(parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80))


# Ranges refused although Python's tables (IANA's "globally reachable" column, as of
# this Python) call some of their addresses global: the whole IETF protocol assignments
# blocks (anycast services no MCP server or webhook lives on), the retired 6to4 relay
# anycast, 6to4 and Teredo (their packets end at an IPv4 address we cannot check here)
# and the IPv6 documentation prefix of 2024.
_REFUSED_V4 = tuple(ipaddress.IPv4Network(network) for network in ("192.0.0.0/24", "192.88.99.0/24"))
_REFUSED_V6 = tuple(ipaddress.IPv6Network(network) for network in ("2001::/23", "2002::/16", "3fff::/20"))
# Only this block holds global unicast IPv6 today; everything else is reserved or special
# (fec0::/10, 5f00::/16, 100::/8 and the like, which some Python versions call global).
_GLOBAL_UNICAST_V6 = ipaddress.IPv6Network("2000::/3")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def is_private_address(address: str) -> bool:
    """True unless the address is globally routable unicast: the one guard for every outbound URL.

    Refused: what is not global (loopback, private, shared 100.64/10, link-local,
    documentation, benchmarking, reserved, ...), multicast, the ranges above, IPv6
    outside 2000::/3, and IPv6 forms that carry a refused IPv4 address (mapped
    ``::ffff:a.b.c.d``, NAT64 ``64:ff9b::a.b.c.d``; the deprecated compatible form
    ``::a.b.c.d`` lies outside 2000::/3).
    """
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv4Address):
        return not ip.is_global or ip.is_multicast or any(ip in network for network in _REFUSED_V4)
    embedded = _embedded_ipv4(ip)
    if embedded is not None:
        return is_private_address(str(embedded))
    return ip not in _GLOBAL_UNICAST_V6 or not ip.is_global or any(ip in network for network in _REFUSED_V6)


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


class HostDoesNotResolve(UpstreamAddressRefused):
    """The host has no address now: refused when connecting, accepted when a URL is saved."""


def check_addresses(addresses: list[str], *, allow_private: bool) -> str:
    """The address to connect to: the first, once every address passed the check."""
    if not addresses:
        raise HostDoesNotResolve("the host does not resolve")
    if not allow_private and any(is_private_address(address) for address in addresses):
        raise UpstreamAddressRefused(NOT_ALLOWED)
    return addresses[0]


def literal_address(host: str) -> str | None:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


def resolve_checked_now(endpoint: Endpoint, *, allow_private: bool) -> str:
    """Resolve once (blocking), check every address, return the one to connect to."""
    literal = literal_address(endpoint.host)
    if literal is not None:
        return check_addresses([literal], allow_private=allow_private)
    try:
        infos = socket.getaddrinfo(endpoint.host, endpoint.port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise HostDoesNotResolve("the host does not resolve") from None
    return check_addresses(_unique(str(info[4][0]) for info in infos), allow_private=allow_private)


def check_url_now(url: str, *, allow_private: bool) -> None:
    """Save-time check: scheme, user info, a literal address, and what the host resolves to now.

    A literal address is judged here, when the URL is saved. A host that does not
    resolve yet is accepted (discovery or delivery will say so); the connect-time
    check is the one that counts.
    """
    try:
        resolve_checked_now(parse_endpoint(url), allow_private=allow_private)
    except HostDoesNotResolve:
        return


async def resolve_checked(endpoint: Endpoint, *, allow_private: bool) -> str:
    """Resolve once, check every address, return the one to connect to."""
    literal = literal_address(endpoint.host)
    if literal is not None:
        return check_addresses([literal], allow_private=allow_private)
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(endpoint.host, endpoint.port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise HostDoesNotResolve("the host does not resolve") from None
    return check_addresses(_unique(str(info[4][0]) for info in infos), allow_private=allow_private)


def _unique(addresses: object) -> list[str]:
    seen: list[str] = []
    for address in addresses:  # type: ignore[attr-defined]
        if address not in seen:
            seen.append(address)
    return seen


class ResponseTooLarge(httpx2.StreamError):
    """The upstream's answer went past MAX_UPSTREAM_RESPONSE_BYTES (counted after decompression)."""


class UnaskedContentEncoding(httpx2.DecodingError):
    """The upstream encoded its answer in a way the transport did not ask for (ACCEPTED_ENCODINGS)."""

    MESSAGE = "the upstream answered in a content encoding Toolgate did not ask for"


# What the transport asks for and undoes itself, whatever the client in front of it would ask.
ACCEPTED_ENCODINGS = ("gzip", "deflate")
MAX_CONTENT_CODINGS = 2  # "gzip, gzip" is legal; a longer chain is only ever a bomb
_DECODE_STEP = 64 * 1024  # at most this many decoded bytes exist at once per coding


class _Inflater:
    """One content coding undone in bounded steps: never more than `_DECODE_STEP` bytes per output.

    zlib's `max_length` keeps a chunk that expands a thousandfold from ever
    existing whole in memory; the cap is checked between steps, so a
    decompression bomb stops at the cap plus one step.
    """

    def __init__(self, coding: str) -> None:
        self._coding = coding
        self._zlib = self._fresh(zlib.MAX_WBITS | 16 if coding == "gzip" else zlib.MAX_WBITS)
        self._first = True

    @staticmethod
    def _fresh(wbits: int) -> Any:
        return zlib.decompressobj(wbits)

    def feed(self, data: bytes) -> Iterator[bytes]:
        try:
            yield from self._feed(data)
        except zlib.error as exc:
            raise httpx2.DecodingError(f"the upstream's {self._coding} body is corrupt") from exc

    def _feed(self, data: bytes) -> Iterator[bytes]:
        if self._first and data:
            self._first = False
            if self._coding == "deflate" and not _zlib_header(data):
                self._zlib = self._fresh(-zlib.MAX_WBITS)  # raw deflate, as some servers send it (httpx accepts both)
        pending = data
        while True:
            plain = self._zlib.decompress(pending, _DECODE_STEP)
            if plain:
                yield plain
            pending = self._zlib.unconsumed_tail
            if self._zlib.eof and self._coding == "gzip" and self._zlib.unused_data:
                pending = self._zlib.unused_data  # the next member of a multi-member gzip body
                self._zlib = self._fresh(zlib.MAX_WBITS | 16)
                continue
            if not pending and len(plain) < _DECODE_STEP:
                return

    def flush(self) -> bytes:
        try:
            return self._zlib.flush()
        except zlib.error as exc:
            raise httpx2.DecodingError(f"the upstream's {self._coding} body is corrupt") from exc


def _zlib_header(data: bytes) -> bool:
    return len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0


def content_codings(headers: httpx2.Headers) -> list[str]:
    """The answer's content codings in the order they were applied, `identity` left out."""
    codings = [value.strip().lower() for value in headers.get_list("content-encoding", split_commas=True)]
    return [coding for coding in codings if coding and coding != "identity"]


class _CappedStream(httpx2.AsyncByteStream):
    """The answer's body, decoded here, cut off once more than `cap` bytes came out of it.

    The cap counts what the caller will parse (decoded bytes) and, before any
    decoding, what came over the wire: a small gzip body that inflates to
    gigabytes stops at the cap like a large plain one.
    """

    def __init__(self, inner: httpx2.AsyncByteStream, cap: int, on_overflow: object, codings: list[str]) -> None:
        self._inner = inner
        self._cap = cap
        self._on_overflow = on_overflow
        self._codings = codings

    async def __aiter__(self):  # type: ignore[no-untyped-def]
        inflaters = [_Inflater(coding) for coding in reversed(self._codings)]  # the last applied is undone first
        received = 0
        decoded = 0
        async for chunk in self._inner:
            received += len(chunk)
            if received > self._cap:
                self._too_large()
            for piece in _through(inflaters, chunk):
                decoded += len(piece)
                if decoded > self._cap:
                    self._too_large()
                yield piece
        for index, inflater in enumerate(inflaters):
            for piece in _through(inflaters[index + 1 :], inflater.flush()):
                decoded += len(piece)
                if decoded > self._cap:
                    self._too_large()
                yield piece

    def _too_large(self) -> None:
        self._on_overflow()  # type: ignore[operator]
        raise ResponseTooLarge("the upstream's response is too large")

    async def aclose(self) -> None:
        await self._inner.aclose()


def _through(inflaters: list[_Inflater], chunk: bytes) -> Iterator[bytes]:
    """`chunk` undone by each inflater in turn, step by step (no coding: the chunk itself)."""
    if not chunk:
        return
    if not inflaters:
        yield chunk
        return
    first, rest = inflaters[0], inflaters[1:]
    for piece in first.feed(chunk):
        yield from _through(rest, piece)


_DECODED_HEADERS = frozenset({"content-encoding", "content-length"})


class PinnedTransport(httpx2.AsyncBaseTransport):
    """Sends every request to the checked address, caps decoded response bodies, counts auth refusals.

    It asks for gzip or deflate and undoes them itself, counting decoded bytes
    against the cap; an answer in any other coding is refused unread.

    The counters let a caller tell "the upstream refused the credential" (401/403)
    and "the answer was too large" apart from other failures, which the SDK
    folds into one generic JSON-RPC error.
    """

    def __init__(self, *, address: str, hostname: str, max_response_bytes: int = MAX_UPSTREAM_RESPONSE_BYTES) -> None:
        # A connection whose answer is framed ambiguously (or followed by more bytes) is never reused.
        self._inner = framing_checked_transport(on_anomaly=self._count_framing_error)
        self._address = address
        self._hostname = hostname
        self._max_response_bytes = max_response_bytes
        self.auth_rejections = 0
        self.not_found = 0
        self.oversized = 0
        self.framing_errors = 0
        # What the upstream showed of itself (read once a session is open): a session id it
        # issued, an event stream it answered with. Either keeps calls on the SDK's path.
        self.session_ids = 0
        self.event_streams = 0
        self.unasked_encodings = 0  # answers refused for a content coding that was not asked for

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.url = request.url.copy_with(host=self._address)
        request.extensions = {**request.extensions, "sni_hostname": self._hostname}
        request.headers["Accept-Encoding"] = ", ".join(ACCEPTED_ENCODINGS)
        response = await self._inner.handle_async_request(request)
        codings = content_codings(response.headers)
        if any(coding not in ACCEPTED_ENCODINGS for coding in codings) or len(codings) > MAX_CONTENT_CODINGS:
            await response.aclose()
            self.unasked_encodings += 1
            raise UnaskedContentEncoding(UnaskedContentEncoding.MESSAGE)
        if response.status_code in AUTH_REJECTED_STATUSES:
            self.auth_rejections += 1
        elif response.status_code == 404:
            self.not_found += 1
        if "mcp-session-id" in response.headers:
            self.session_ids += 1
        if response.headers.get("content-type", "").lower().startswith("text/event-stream"):
            self.event_streams += 1
        headers = response.headers
        if codings:  # decoded here, so the client in front must not decode again (nor trust the length)
            headers = httpx2.Headers(
                [(name, value) for name, value in headers.multi_items() if name.lower() not in _DECODED_HEADERS]
            )
        stream = _CappedStream(response.stream, self._max_response_bytes, self._count_oversized, codings)  # type: ignore[arg-type]
        return httpx2.Response(
            status_code=response.status_code,
            headers=headers,
            stream=stream,
            extensions=response.extensions,
            request=request,
        )

    @property
    def address(self) -> str:
        return self._address

    @property
    def hostname(self) -> str:
        return self._hostname

    @property
    def max_response_bytes(self) -> int:
        return self._max_response_bytes

    def _count_oversized(self) -> None:
        self.oversized += 1

    def _count_framing_error(self) -> None:
        self.framing_errors += 1

    async def aclose(self) -> None:
        await self._inner.aclose()
