"""Keep-alive HTTP/1.1 for the runner's HTTP capability and the gateway's plain-JSON MCP calls.

runner/http1/wire.py: the request head and llhttp's parse (why not a library's pool: there);
runner/http1/_async_pool.py: the pools, written once (the blocking one is generated from it);
runner/http1/_async_fetch.py: a request and its redirects over a pool (the blocking one generated too);
runner/http1/transport.py: httpx's own client behind the pool's interface (proxies, tracing).
"""

from runner.http1._async_fetch import fetch
from runner.http1._async_pool import IDLE_EXPIRY_S, MAX_CONNECTIONS, MAX_IDLE_PER_ORIGIN, AsyncPool
from runner.http1._sync_fetch import fetch as fetch_blocking
from runner.http1._sync_pool import BlockingPool
from runner.http1.transport import HttpxSender, proxy_applies
from runner.http1.wire import (
    DEFAULT_PORTS,
    Answer,
    ConnectFailed,
    ConnectionClosed,
    Headers,
    Hops,
    MalformedAnswer,
    Origin,
    PoolFull,
    RequestHead,
    ResponseTooLarge,
    TooManyRedirects,
    UnsendableRequest,
    answer_framing,
    encode_request,
)

__all__ = [
    "DEFAULT_PORTS",
    "IDLE_EXPIRY_S",
    "MAX_CONNECTIONS",
    "MAX_IDLE_PER_ORIGIN",
    "Answer",
    "AsyncPool",
    "BlockingPool",
    "ConnectFailed",
    "ConnectionClosed",
    "Headers",
    "Hops",
    "HttpxSender",
    "MalformedAnswer",
    "Origin",
    "PoolFull",
    "RequestHead",
    "ResponseTooLarge",
    "TooManyRedirects",
    "UnsendableRequest",
    "answer_framing",
    "encode_request",
    "fetch",
    "fetch_blocking",
    "proxy_applies",
]
