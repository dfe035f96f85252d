"""httpx2's own client behind the async pool's interface: for proxies from the environment, and tracing.

`HttpxSender` sends what a pool would send (the same head and body) through
an `httpx2.AsyncClient` and answers as a pool answers (an `Answer` read whole,
raw bytes cut at the cap, the pool's exception types), so the runner's HTTP
capability follows redirects, decodes and words its errors in one place
whichever carries the request. The composition root asks for it when an
HTTP(S)/ALL_PROXY variable applies (`proxy_applies`: httpx2 honours those, the
pool never does) or when tracing is on: the composition root then hands an
`instrument` callable (OpenTelemetry's httpx2 instrumentation of this one
client, config/runtime.py; the runner never imports OpenTelemetry).
"""

from __future__ import annotations

import http.cookiejar
import math
import urllib.request
from collections.abc import Callable
from typing import Any

import httpx2

from runner.http1.wire import (
    Answer,
    ConnectFailed,
    ConnectionClosed,
    MalformedAnswer,
    Origin,
    RequestHead,
    ResponseTooLarge,
    UnsendableRequest,
)


def proxy_applies(url: str) -> bool:
    """Would httpx2 (trust_env) send a request for this URL through a proxy from the environment?"""
    parts = httpx2.URL(url)
    proxies = urllib.request.getproxies_environment()
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass_environment(parts.host, proxies)  # type: ignore[attr-defined]  # in 3.11, untyped


def _cookie_jar_keeping_none() -> http.cookiejar.CookieJar:
    """One client serves every tenant's connections: a cookie one answer sets must not ride along
    with the next call (the pool has no jar at all)."""
    return http.cookiejar.CookieJar(policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))


class HttpxSender:
    """`AsyncPool.request` over an httpx2.AsyncClient (proxies from the environment, tracing)."""

    def __init__(self, *, instrument: Callable[[Any], None] | None = None) -> None:
        """`instrument(client)`, if given, is called once on the new client (tracing)."""
        self._client = httpx2.AsyncClient(cookies=_cookie_jar_keeping_none(), follow_redirects=False)
        if instrument is not None:
            instrument(self._client)

    async def request(
        self,
        origin: Origin,
        head: RequestHead,
        body: bytes,
        *,
        max_response_bytes: int,
        connect_timeout_s: float | None,
        deadline: float = math.inf,
        read_timeout_s: float | None = None,
    ) -> Answer:
        """As the pool answers; `deadline` is not used (the loop's callers bound a call by cancelling it)."""
        scheme = "https" if origin.tls else "http"
        url = httpx2.URL(scheme=scheme, host=origin.server_name, port=origin.port, raw_path=head.target)
        timeout = httpx2.Timeout(connect=connect_timeout_s, read=read_timeout_s, write=read_timeout_s, pool=None)
        try:
            request = self._client.build_request(
                head.method.decode(), url, headers=list(head.headers), content=body, timeout=timeout
            )
            response = await self._client.send(request, stream=True)
            try:
                chunks, size = [], 0
                async for chunk in response.aiter_raw():  # still encoded: the caller decodes, as for the pool
                    size += len(chunk)
                    if size > max_response_bytes:
                        raise ResponseTooLarge
                    chunks.append(chunk)
            finally:
                await response.aclose()
        except httpx2.ConnectTimeout as exc:
            raise ConnectFailed(str(exc)) from TimeoutError(str(exc))
        except httpx2.ConnectError as exc:
            raise ConnectFailed(str(exc)) from OSError(str(exc))
        except httpx2.TimeoutException as exc:
            raise TimeoutError(str(exc)) from exc
        except httpx2.LocalProtocolError as exc:
            raise UnsendableRequest(str(exc)) from exc
        except httpx2.RemoteProtocolError as exc:
            raise ConnectionClosed(str(exc)) from exc
        except httpx2.ReadError as exc:
            closed = ConnectionClosed(str(exc))
            raise closed from OSError(str(exc))
        except httpx2.HTTPError as exc:  # a proxy that failed, a write error: the connection went wrong
            raise MalformedAnswer(str(exc)) from exc
        reason = response.extensions.get("reason_phrase", b"")
        headers = [(name.lower(), value) for name, value in response.headers.raw]
        return Answer(response.status_code, reason, headers, b"".join(chunks))

    async def aclose(self) -> None:
        await self._client.aclose()
