# Generated from runner/http1/_async_fetch.py by runner/http1/unasync.py; edit that one, then: make unasync
"""A request and its redirects over the blocking pool, answered whole (generated).

Why: runner/http1/_async_fetch.py, its source.
"""

from __future__ import annotations

import math
from typing import Protocol, TypeVar

from runner.http1.wire import Answer, Hops, Origin, RequestHead, TooManyRedirects

Result = TypeVar("Result")


class BlockingSender(Protocol):
    """What `fetch` sends through: a pool, or a sender with its interface (runner/http1/transport.py)."""

    def request(
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


def fetch(
    pool: BlockingSender,
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
        answer = pool.request(
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
