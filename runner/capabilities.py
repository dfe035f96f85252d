"""Capabilities: the only doors a tool has to the world.

A tool never reads the environment, builds a client or sees a credential in its
context. The composition root binds an `HttpCapability` to the tool's configured
base URL; the broker hands an `AuthCapability` per call. Secrets live inside
these objects only, and their reprs never show them. A tool that searches the
catalog (`toolgate__search_tools`) gets a `CatalogSearch`: the composition root
binds the index, the runner binds it to the call's own context.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import math
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Protocol
from urllib.parse import urljoin, urlsplit

import httpx2

from runner.errors import CapabilityError
from runner.http1 import (
    DEFAULT_PORTS,
    Answer,
    AsyncPool,
    BlockingPool,
    ConnectFailed,
    ConnectionClosed,
    HttpxSender,
    MalformedAnswer,
    Origin,
    RequestHead,
    ResponseTooLarge,
    TooManyRedirects,
    UnsendableRequest,
    fetch,
    fetch_blocking,
    proxy_applies,
)
from runner.types import ToolInvocationContext, ToolSpec

MAX_REDIRECTS = 5
DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024
DEFAULT_TIMEOUT = httpx2.Timeout(connect=5.0, read=10.0, write=10.0, pool=5.0)
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# What an httpx2.AsyncClient sends besides User-Agent and Accept (the capability sets those):
# the keep-alive path sends the same, asking only for the encodings httpx always decodes.
_CLIENT_HEADERS = {"Accept-Encoding": "gzip, deflate", "Connection": "keep-alive"}


@lru_cache(maxsize=256)
def _parsed_url(url: str) -> httpx2.URL:
    """httpx's parse of a resolved URL, once per URL rather than once per call.

    Parsing is over half of what building the blocking path's httpx2.Request
    costs, and a tool calls the same few URLs again and again. httpx2.URL is
    immutable and Request(URL) takes its parse as it is, so the request is the
    one Request(str) builds. Calls with `params` still parse (httpx merges them
    into a new URL); the cache is bounded because paths may carry arguments.
    """
    return httpx2.URL(url)


class AuthCapability(Protocol):
    """Credentials for one connection, resolved by the broker for one call."""

    def headers(self) -> dict[str, str]: ...

    def access_token(self) -> str: ...


class BearerAuth:
    """An access token or API key sent as `Authorization: Bearer`."""

    __slots__ = ("_token",)

    def __init__(self, token: str) -> None:
        self._token = token

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}"}

    def access_token(self) -> str:
        return self._token

    def __repr__(self) -> str:
        return "BearerAuth(<redacted>)"


class BasicAuth:
    """A username and app password sent as HTTP Basic."""

    __slots__ = ("_password", "_username")

    def __init__(self, username: str, password: str) -> None:
        self._username = username
        self._password = password

    def headers(self) -> dict[str, str]:
        pair = f"{self._username}:{self._password}".encode()
        return {"Authorization": "Basic " + base64.b64encode(pair).decode()}

    def access_token(self) -> str:
        return self._password

    def __repr__(self) -> str:
        return "BasicAuth(<redacted>)"


class ClockCapability(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status_code: int
    headers: Mapping[str, str]
    content: bytes

    def json(self) -> Any:
        try:
            return json.loads(self.content)
        except ValueError as exc:
            raise CapabilityError("upstream answered with a body that is not JSON") from exc


class HttpCapability:
    """HTTP to one origin only, with bounded timeouts and response size.

    Paths are resolved against the configured base URL and must stay on its
    origin. Redirects are followed by hand (at most five) so that a redirect to
    another origin is allowed to proceed only without the Authorization header,
    and only once `redirect_guard(url)` (the composition root's address guard)
    accepted its target: the upstream, not the operator, chose that address, and
    a ValueError from the guard refuses it before anything connects there.

    Two ways in: `request` on an event loop, and `request_blocking` for a caller
    on its own thread (a tool's blocking fast path: no hand-off to the loop
    thread). Both send the same requests and answer the same way.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout: httpx2.Timeout = DEFAULT_TIMEOUT,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        user_agent: str = "toolgate",
        upstream: str = "",
        keep_alive_transport: bool = True,
        redirect_guard: Callable[[str], None] | None = None,
        instrument: Callable[[Any], None] | None = None,
    ) -> None:
        """`keep_alive_transport=False` (or a proxy in the environment) sends through httpx2's own client,
        handed to `instrument` once made: the composition root asks for both when tracing is on
        (runner/http1/transport.py)."""
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"base URL must be absolute http(s): {base_url!r}")
        # For operators' logs: the provider's name and the host (never the URL's userinfo, path or query).
        self._upstream = upstream
        self._host = f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)
        self._base_url = base_url.rstrip("/") + "/"
        self._origin = _origin(self._base_url)
        timeouts = timeout.as_dict()
        self._connect_timeout_s = timeouts.get("connect")
        self._read_timeout_s = timeouts.get("read")  # each wait for more of the answer, as httpx times reads
        self._max_response_bytes = max_response_bytes
        self._user_agent = user_agent
        self._redirect_guard = redirect_guard
        self._instrument = instrument
        self._lean = keep_alive_transport and not proxy_applies(self._base_url)
        self._pool: AsyncPool | HttpxSender | None = None
        self._pool_loop: asyncio.AbstractEventLoop | None = None
        # Thread-safe, one for every thread; none where httpx2's own client must carry requests.
        self._blocking = BlockingPool(tls_context=httpx2.create_ssl_context) if self._lean else None

    @property
    def base_url(self) -> str:
        return self._base_url

    def _resolve(self, path: str) -> str:
        url, origin = _joined(self._base_url, path)
        if origin != self._origin:
            raise CapabilityError("request left the configured origin")
        return url

    def _hops(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str] | None,
        json_body: Any,
        params: Mapping[str, str] | None,
    ) -> _Hops:
        url = self._resolve(path)
        send_headers = {"User-Agent": self._user_agent, "Accept": "application/json", **(headers or {})}
        return _Hops(
            method, url, send_headers, json_body, params, guard=self._redirect_guard, limit=self._max_response_bytes
        )

    async def request(
        self,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        json_body: Any = None,
        params: Mapping[str, str] | None = None,
    ) -> HttpResponse:
        """One request and its redirects on this loop's pool, answered whole and decoded.

        The same requests as `request_blocking`, answered the same way: both run
        one `_Hops` plan (what goes out, which redirect is followed, how the body
        is decoded) through one fetch loop (runner/http1/_async_fetch.py, the
        blocking one generated from it), and `_failures` words what went wrong.
        """
        hops = self._hops(method, path, headers, json_body, params)
        with self._failures(math.inf):
            return await fetch(
                self._pool_for_running_loop(),
                hops,
                max_response_bytes=self._max_response_bytes,
                connect_timeout_s=self._connect_timeout_s,
                read_timeout_s=self._read_timeout_s,
            )

    def _failed(self, message: str) -> CapabilityError:
        return CapabilityError(message, upstream=self._upstream, host=self._host)

    def request_blocking(
        self,
        method: str,
        path: str,
        *,
        deadline: float,
        headers: Mapping[str, str] | None = None,
        json_body: Any = None,
        params: Mapping[str, str] | None = None,
    ) -> HttpResponse | None:
        """`request` on this thread's blocking sockets, answered before `deadline` (a time.monotonic() instant).

        None, having sent nothing, when only httpx2's own client may carry the
        request (a proxy from the environment, or tracing): the caller then makes
        it with `request` on the loop. Otherwise the same requests as `request` (origin, headers, body, redirects, cap,
        timeouts, errors); a TimeoutError means the deadline passed (the caller's
        budget), while the capability's own timeouts fail as "upstream timed out".
        """
        if self._blocking is None:
            return None
        hops = self._hops(method, path, headers, json_body, params)
        with self._failures(deadline):
            return fetch_blocking(
                self._blocking,
                hops,
                max_response_bytes=self._max_response_bytes,
                connect_timeout_s=self._connect_timeout_s,
                read_timeout_s=self._read_timeout_s,
                deadline=deadline,
            )

    @contextlib.contextmanager
    def _failures(self, deadline: float) -> Iterator[None]:
        """What a request raised, worded once for both ways in (the labels are those httpx gives its errors)."""
        try:
            yield
        except TooManyRedirects:
            raise self._failed("too many redirects") from None
        except ResponseTooLarge as exc:
            raise self._failed("upstream response too large") from exc
        except ConnectFailed as exc:
            if isinstance(exc.__cause__, TimeoutError):
                raise self._timed_out(deadline) from exc
            raise self._failed("upstream request failed (ConnectError)") from exc
        except TimeoutError as exc:
            raise self._timed_out(deadline) from exc
        except ConnectionClosed as exc:
            name = "ReadError" if isinstance(exc.__cause__, OSError) else "RemoteProtocolError"
            raise self._failed(f"upstream request failed ({name})") from exc
        except MalformedAnswer as exc:
            raise self._failed("upstream request failed (RemoteProtocolError)") from exc
        except UnsendableRequest as exc:
            raise self._failed("upstream request failed (LocalProtocolError)") from exc
        except (httpx2.HTTPError, httpx2.InvalidURL) as exc:
            # InvalidURL is not an HTTPError: httpx raises it on a Location such as "data:x,y".
            raise self._failed(f"upstream request failed ({type(exc).__name__})") from exc

    def _timed_out(self, deadline: float) -> Exception:
        """The caller's deadline passed (its budget: TimeoutError), or one of the capability's own timeouts."""
        if time.monotonic() >= deadline:
            return TimeoutError("the deadline passed")
        return self._failed("upstream timed out")

    def _pool_for_running_loop(self) -> AsyncPool | HttpxSender:
        """One pool per event loop: building one costs an SSL context (~10 ms)."""
        loop = asyncio.get_running_loop()
        if self._pool is None or self._pool_loop is not loop:
            if self._lean:
                self._pool = AsyncPool(tls_context=httpx2.create_ssl_context)
            else:
                self._pool = HttpxSender(instrument=self._instrument)
            self._pool_loop = loop
        return self._pool

    async def aclose(self) -> None:
        """Close the running loop's pool and its idle connections (a loop that ends closes it first)."""
        if self._pool is not None and self._pool_loop is asyncio.get_running_loop():
            if isinstance(self._pool, HttpxSender):
                await self._pool.aclose()
            else:
                self._pool.close()
            self._pool = None

    def close(self) -> None:
        """Close the blocking path's idle connections (one in use closes when its request ends)."""
        if self._blocking is not None:
            self._blocking.close()

    async def get(self, path: str, **kwargs: Any) -> HttpResponse:
        return await self.request("GET", path, **kwargs)

    async def post(self, path: str, **kwargs: Any) -> HttpResponse:
        return await self.request("POST", path, **kwargs)

    def __repr__(self) -> str:
        return f"HttpCapability({self._base_url!r})"


@lru_cache(maxsize=256)
def _joined(base_url: str, path: str) -> tuple[str, tuple[str, str]]:
    """(the URL a relative path leads to from base_url, its origin), once per (base, path).

    Joining and splitting cost a call as much as parsing its URL does, and a
    tool asks for the same few paths again and again. A path that is absolute
    or does not form a URL raises, and raising is never cached.
    """
    if urlsplit(path).scheme or path.startswith("//"):
        raise CapabilityError("only paths relative to the configured base URL are allowed")
    try:
        url = urljoin(base_url, path.lstrip("/"))
        return url, _origin(url)
    except ValueError:  # urljoin strips leading blanks, so " //host:99999/" gets here
        raise CapabilityError("path does not form a valid URL") from None


def _origin(url: str) -> tuple[str, str]:
    """(scheme, host:port) of an absolute URL; ValueError when the URL does not parse."""
    parts = urlsplit(url)
    default_port = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, f"{parts.hostname}:{parts.port or default_port}"


def _next_hop(
    url: str,
    method: str,
    body: Any,
    headers: dict[str, str],
    *,
    status: int,
    location: str,
    guard: Callable[[str], None] | None = None,
) -> tuple[str, str, Any, dict[str, str]]:
    """Where a redirect (`status`, `location`) leads, with what method, body and headers (RFC 9110 §15.4)."""
    try:
        target = urljoin(url, location)
        scheme = urlsplit(target).scheme
        cross_origin = scheme in ("http", "https") and _origin(target) != _origin(url)
    except ValueError:  # a bad port or IPv6 literal in Location: the upstream's fault, not the tool's
        raise CapabilityError("redirect to an invalid URL") from None
    if scheme not in ("http", "https"):
        raise CapabilityError("redirect to a non-HTTP URL")
    if status == 303 or (status in (301, 302) and method == "POST"):
        method, body = "GET", None
    if cross_origin:
        if guard is not None:
            try:
                guard(target)
            except ValueError as exc:  # the guard's message names the rule, never the address
                raise CapabilityError(f"redirect to another origin refused: {exc}") from None
        headers = {name: value for name, value in headers.items() if name.lower() != "authorization"}
    return target, method, body, headers


class _Hops:
    """One capability request, hop by hop, without I/O (runner.http1.Hops): what goes out, what comes back.

    httpx's Request builds each hop (the URL, headers and JSON body encoding
    httpx would send); a redirect is followed by `_next_hop`'s rules; the final
    body is decoded here, whichever way it came. Content decoding: `Accept-Encoding:
    gzip, deflate` is asked for and those codings undone (httpx's: gzip, deflate,
    identity; any other is left as sent), inflating cut at the response cap, so
    a small compressed body cannot grow past it.
    """

    max_redirects = MAX_REDIRECTS

    def __init__(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        json_body: Any,
        params: Mapping[str, str] | None,
        *,
        guard: Callable[[str], None] | None,
        limit: int,
    ) -> None:
        self._method, self._url, self._headers, self._json, self._params = method, url, headers, json_body, params
        self._guard = guard
        self._limit = limit

    def request(self) -> tuple[Origin, RequestHead, bytes]:
        target_url = _parsed_url(self._url) if self._params is None else self._url
        request = httpx2.Request(
            self._method,
            target_url,
            headers={**_CLIENT_HEADERS, **self._headers},
            json=self._json,
            params=self._params,
        )
        url = request.url
        origin = Origin(url.host, url.port or DEFAULT_PORTS[url.scheme], url.scheme == "https", url.host)
        return origin, RequestHead(request.method.encode(), url.raw_path, request.headers.raw), request.read()

    def answered(self, answer: Answer) -> HttpResponse | None:
        headers = httpx2.Headers(answer.raw_headers)
        if answer.status in REDIRECT_STATUSES and "location" in headers:
            self._url, self._method, self._json, self._headers = _next_hop(
                self._url,
                self._method,
                self._json,
                self._headers,
                status=answer.status,
                location=headers["location"],
                guard=self._guard,
            )
            self._params = None
            return None
        return HttpResponse(answer.status, dict(headers), self._decoded(headers, answer.body))

    def _decoded(self, headers: httpx2.Headers, body: bytes) -> bytes:
        """The body with its content codings undone, as httpx undoes them, never past the response cap."""
        for value in reversed(headers.get_list("content-encoding", split_commas=True)):
            coding = value.strip().lower()
            if coding == "gzip":
                body = self._inflate(body, zlib.MAX_WBITS | 16)
            elif coding == "deflate":
                try:  # zlib-wrapped as the RFC says, or raw deflate as some servers send it (httpx tries both)
                    body = self._inflate(body, zlib.MAX_WBITS)
                except httpx2.DecodingError:
                    body = self._inflate(body, -zlib.MAX_WBITS)
        return body

    def _inflate(self, body: bytes, wbits: int) -> bytes:
        try:
            inflater = zlib.decompressobj(wbits)
            plain = inflater.decompress(body, self._limit + 1)
            if len(plain) <= self._limit:
                plain += inflater.flush()
        except zlib.error as exc:
            raise httpx2.DecodingError(str(exc)) from exc
        if len(plain) > self._limit:
            raise ResponseTooLarge
        return plain


class CatalogIndex(Protocol):
    """The catalog as a search sees it: what the composition root binds to a tool declaring `catalog`."""

    def search(self, ctx: ToolInvocationContext, query: str, limit: int) -> Sequence[ToolSpec]:
        """The tools of `ctx`'s own catalog (policy, person, toolset) matching `query`, best first, at most `limit`."""
        ...


class CatalogSearch:
    """The `catalog` capability of one call: a search of the calling context's catalog, no other.

    The runner makes one per call from the bound index and the call's context
    (after lookup, policy and authorization settled who calls), so a tool can
    never rank, and so never reveal, a tool its caller could not list.
    """

    __slots__ = ("_ctx", "_index")

    def __init__(self, index: CatalogIndex, ctx: ToolInvocationContext) -> None:
        self._index = index
        self._ctx = ctx

    def search(self, query: str, limit: int) -> list[ToolSpec]:
        return list(self._index.search(self._ctx, query, limit))

    def __repr__(self) -> str:
        return f"CatalogSearch(tool_call_id={self._ctx.tool_call_id!r})"


@dataclass(frozen=True, slots=True)
class ToolCapabilities:
    """What one call of one tool may use. Absent capabilities are None."""

    clock: ClockCapability
    http: HttpCapability | None = None
    auth: AuthCapability | None = None
    catalog: CatalogSearch | None = None

    def require_http(self) -> HttpCapability:
        if self.http is None:
            raise CapabilityError("the http capability is not bound for this tool")
        return self.http

    def require_auth(self) -> AuthCapability:
        if self.auth is None:
            raise CapabilityError("no credentials were resolved for this call")
        return self.auth

    def require_catalog(self) -> CatalogSearch:
        if self.catalog is None:
            raise CapabilityError("the catalog capability is not bound for this tool")
        return self.catalog
