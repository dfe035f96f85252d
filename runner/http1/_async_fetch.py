"""One request and the redirects it leads to, answered whole: the loop that drives a sans-I/O plan over a pool.

Why: the runner's HTTP capability sends the same requests on the event loop
and on a caller's thread; what it sends at each hop, which redirect it
follows and how it decodes the answer are its `Hops` (runner/capabilities.py,
no I/O), and this loop is the only code that differs between the two. It is
written once, async; runner/http1/_sync_fetch.py is generated from it
(runner/http1/unasync.py).
"""

from __future__ import annotations

import math
from typing import Protocol, TypeVar

from runner.http1.wire import Answer, Hops, Origin, RequestHead, TooManyRedirects

Result = TypeVar("Result")


class AsyncSender(Protocol):
    """What `fetch` sends through: a pool, or a sender with its interface (runner/http1/transport.py)."""

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
    ) -> Answer: ...


async def fetch(
    pool: AsyncSender,
    hops: Hops[Result],
    *,
    max_response_bytes: int,
    connect_timeout_s: float | None,
    read_timeout_s: float | None,
    deadline: float = math.inf,
) -> Result:
    """The plan's result; the pool's errors, TooManyRedirects, or whatever the plan raises, pass through."""
    for _hop in range(hops.max_redirects + 1):
        origin, head, body = hops.request()
        answer = await pool.request(
            origin,
            head,
            body,
            max_response_bytes=max_response_bytes,
            connect_timeout_s=connect_timeout_s,
            deadline=deadline,
            read_timeout_s=read_timeout_s,
        )
        result = hops.answered(answer)
        if result is not None:
            return result
    raise TooManyRedirects
