"""Telling an unreachable database or cache apart from a bug, for every adapter and the API.

A call that meets an outage fails closed with `unavailable_dependency` (503,
Retry-After) instead of a 500: the runner's ports raise the runner's
DependencyUnavailable, and the API's exception handler maps the drivers' own
errors the same way when they surface outside the runner (authentication, reads).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from django.db import InterfaceError, OperationalError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from runner.errors import DependencyUnavailable

# What the drivers raise when their server is down, frozen past its timeout, or refusing connections.
OUTAGE_ERRORS: tuple[type[Exception], ...] = (
    OperationalError,
    InterfaceError,
    RedisConnectionError,
    RedisTimeoutError,
    DependencyUnavailable,
)

P = ParamSpec("P")
T = TypeVar("T")


def outage_guard(method: Callable[P, T]) -> Callable[P, T]:
    """Re-raise a driver's outage as DependencyUnavailable (its message names no host or credential)."""

    @functools.wraps(method)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(*args, **kwargs)
        except DependencyUnavailable:
            raise
        except OUTAGE_ERRORS as exc:
            raise DependencyUnavailable(type(exc).__name__) from None

    return guarded
