"""The egress proxy of one sandboxed stdio child: named hosts only, the outbound guard on every connection.

A child runs in a network namespace of its own (bubblewrap `--unshare-net`): its loopback
is its own and nothing else is reachable. When the operator allowed hosts
(`mcp_upstream add --allow-host HOST:PORT`), the host serves this proxy on a Unix socket
bound into the sandbox, and a relay inside the child's namespace (relay.py) makes it a
loopback TCP port that HTTP_PROXY/HTTPS_PROXY name, since most clients cannot speak to
a proxy over a Unix socket.

The proxy takes `CONNECT host:port` (TLS and anything else tunnelled) and plain HTTP
requests in absolute form (`GET http://host/path`, sent on with `Connection: close`,
one request per connection). Each target must be one of the server's allowed
`host:port` names, and it is resolved and checked by the same guard as upstream URLs
and webhooks: loopback, private, link-local and metadata addresses are refused even
when named, unless TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS is true. The connection goes
to the checked address, so a DNS answer that changes after the check is never used.
Connections, header size, time-outs and bytes are bounded; refusals are logged with the
server's slug and the target's host and port, never paths, queries or headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from core.netguard import Endpoint, UpstreamAddressRefused, resolve_checked

logger = logging.getLogger(__name__)

HOSTNAME = re.compile(r"^(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9])?)(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9])?)*$")
MAX_ALLOWED_HOSTS = 64
HOP_BY_HOP = frozenset({"connection", "proxy-connection", "proxy-authorization", "keep-alive", "te", "upgrade"})


@dataclass(frozen=True, slots=True)
class ProxyLimits:
    """Bounds of one child's proxy: concurrent connections, request head, time-outs, bytes each way."""

    max_connections: int = 32
    max_head_bytes: int = 16 * 1024
    head_timeout_s: float = 10.0
    connect_timeout_s: float = 10.0
    idle_timeout_s: float = 120.0
    max_bytes: int = 512 * 1024 * 1024


class AllowedHostInvalid(ValueError):
    """An --allow-host value that is not HOST:PORT; the message is safe to show."""


def parse_allowed_host(text: str) -> str:
    """`HOST:PORT` normalised (lower case, no trailing dot, IPv6 in brackets), or AllowedHostInvalid."""
    host, sep, port_text = text.strip().rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise AllowedHostInvalid(f"{text[:80]!r} is not HOST:PORT (e.g. api.github.com:443)")
    host = host.lower().rstrip(".")
    if host.startswith("[") and host.endswith("]"):
        try:
            return f"[{ipaddress.IPv6Address(host[1:-1])}]:{int(port_text)}"
        except ValueError:
            raise AllowedHostInvalid(f"{text[:80]!r} does not hold an IPv6 address in brackets") from None
    if "*" in host:
        raise AllowedHostInvalid(f"{text[:80]!r}: name each host; wildcards are not allowed")
    if not HOSTNAME.match(host):
        raise AllowedHostInvalid(f"{text[:80]!r} does not name a host (a DNS name or an IP address)")
    return f"{host}:{int(port_text)}"


def parse_allowed_hosts(values: Iterable[str]) -> list[str]:
    """Each value checked and normalised, duplicates dropped, order kept."""
    hosts: list[str] = []
    for value in values:
        host = parse_allowed_host(value)
        if host not in hosts:
            hosts.append(host)
    if len(hosts) > MAX_ALLOWED_HOSTS:
        raise AllowedHostInvalid(f"at most {MAX_ALLOWED_HOSTS} allowed hosts per server")
    return hosts


def _target_key(host: str, port: int) -> str:
    host = host.lower().rstrip(".")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Refused(Exception):
    """A request the proxy will not carry: (HTTP status, reason for the log and the child)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class EgressProxy:
    """One child's forward proxy on a Unix socket; `allow_private` is read at every connection."""

    def __init__(
        self,
        *,
        slug: str,
        allowed_hosts: Iterable[str],
        path: Path,
        allow_private: Callable[[], bool],
        limits: ProxyLimits | None = None,
    ) -> None:
        self.slug = slug
        self.allowed = frozenset(allowed_hosts)
        self.path = path
        self.limits = limits or ProxyLimits()
        self._allow_private = allow_private
        self._server: asyncio.Server | None = None
        self._active = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(
            self._handle, path=str(self.path), limit=self.limits.max_head_bytes
        )
        self.path.chmod(0o666)  # the sandbox may map the child to another uid; the directory guards it

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            if self._active >= self.limits.max_connections:
                self._log_refusal("-", Refused(503, f"more than {self.limits.max_connections} connections at once"))
                async with asyncio.timeout(self.limits.head_timeout_s):
                    await reader.readuntil(b"\r\n\r\n")  # read, so that the client sees the answer
                await _answer(writer, 503, "too many connections through the egress proxy")
                return
            self._active += 1
            try:
                await self._serve(reader, writer)
            finally:
                self._active -= 1
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        except asyncio.CancelledError:
            pass  # the proxy is closing with its child: this connection simply ends
        finally:
            writer.close()
            if task is not None:
                self._tasks.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        target = "-"
        try:
            try:
                async with asyncio.timeout(self.limits.head_timeout_s):
                    head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.LimitOverrunError, ValueError):
                raise Refused(431, "the request head is too large") from None
            method, target, host, port, forward = _parse_head(head)
            if _target_key(host, port) not in self.allowed:
                raise Refused(403, "not an allowed host of this server (mcp_upstream add --allow-host)")
            try:
                address = await resolve_checked(Endpoint("https", host, port), allow_private=self._allow_private())
            except UpstreamAddressRefused as exc:
                raise Refused(403, str(exc)) from None
            try:
                async with asyncio.timeout(self.limits.connect_timeout_s):
                    upstream_reader, upstream_writer = await asyncio.open_connection(address, port)
            except (OSError, TimeoutError) as exc:
                raise Refused(502, f"cannot connect ({type(exc).__name__})") from None
        except Refused as refusal:
            self._log_refusal(target, refusal)
            await _answer(writer, refusal.status, f"egress refused: {refusal.reason}")
            return
        try:
            if method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
            else:
                upstream_writer.write(forward)
            await asyncio.gather(
                self._pipe(reader, upstream_writer), self._pipe(upstream_reader, writer), return_exceptions=True
            )
        finally:
            upstream_writer.close()

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        """Copy one direction; its end of file half-closes the other side, which may still answer."""
        sent = 0
        try:
            while True:
                async with asyncio.timeout(self.limits.idle_timeout_s):
                    chunk = await source.read(64 * 1024)
                if not chunk:
                    break
                sent += len(chunk)
                if sent > self.limits.max_bytes:
                    logger.warning("mcp server %s: egress connection cut after %d bytes", self.slug, sent)
                    sink.close()
                    return
                sink.write(chunk)
                await sink.drain()
            if sink.can_write_eof():
                sink.write_eof()
        except (OSError, TimeoutError):
            sink.close()  # an idle or broken direction ends the whole conversation

    def _log_refusal(self, target: str, refusal: Refused) -> None:
        logger.warning("mcp server %s: egress to %s refused: %s", self.slug, target, refusal.reason)


def _parse_head(head: bytes) -> tuple[str, str, str, int, bytes]:
    """(method, host:port for the log, host, port, the head to send on for plain HTTP)."""
    try:
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        method, target, version = request_line.split(" ")
    except ValueError:
        raise Refused(400, "not an HTTP proxy request") from None
    if not version.startswith("HTTP/1."):
        raise Refused(400, "not an HTTP/1.x proxy request")
    if method == "CONNECT":
        host, sep, port_text = target.rpartition(":")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise Refused(400, "CONNECT needs HOST:PORT")
        port = int(port_text)
        return method, _target_key(host, port), host, port, b""
    try:
        parts = urlsplit(target)
        port = parts.port or 80
    except ValueError:
        raise Refused(400, "the request's URL is malformed") from None
    if parts.scheme != "http" or not parts.hostname:
        raise Refused(400, "a plain request needs an absolute http:// URL (use CONNECT for https)")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    kept = [line for line in header_lines if line and line.split(":", 1)[0].strip().lower() not in HOP_BY_HOP]
    forward = "\r\n".join([f"{method} {path} {version}", *kept, "Connection: close", "", ""]).encode("latin-1")
    return method, _target_key(parts.hostname, port), parts.hostname, port, forward


async def _answer(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    reasons = {400: "Bad Request", 403: "Forbidden", 431: "Request Header Fields Too Large", 502: "Bad Gateway"}
    body = f"{text}\n".encode()
    head = (
        f"HTTP/1.1 {status} {reasons.get(status, 'Service Unavailable')}\r\n"
        f"Content-Type: text/plain\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    with contextlib.suppress(ConnectionError):
        writer.write(head.encode() + body)
        await writer.drain()
