"""Shared counters for the budgets: fixed-window rates and leased concurrency slots.

Redis when REDIS_URL is set (every process and node shares it), else this
process's memory (the embedded default runs one web process). Each operation
is one atomic round trip: a Lua script, never a read followed by a write, so
two processes can never both take the last slot.

A concurrency slot is a member of a sorted set scored by its deadline (the
call's whole budget): a process killed mid-call cannot leak its slot, which is
reclaimed by the next caller once the deadline has passed.
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from functools import cache
from typing import Protocol

import redis
from django.conf import settings

# Bounded so that a frozen Redis costs a request at most about a second, then 503.
REDIS_TIMEOUT_S = 0.5

_HIT = """
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return n
"""
_LEASE = """
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
local granted = math.min(tonumber(ARGV[1]), tonumber(ARGV[2]) - n)
if granted <= 0 then return 0 end
redis.call('INCRBY', KEYS[1], granted)
redis.call('EXPIRE', KEYS[1], ARGV[3])
return granted
"""
_TAKE_SLOT = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""


class Counters(Protocol):
    def hit(self, key: str, *, window_s: int) -> int:
        """Count one hit in a fixed window that `key` names; the new count."""
        ...

    def lease(self, key: str, *, want: int, limit: int, window_s: int) -> int:
        """Take up to `want` of the `limit` hits left in a fixed window; how many were taken (0: none left)."""
        ...

    def slot_take(self, key: str, holder: str, *, limit: int, lease_s: float) -> bool:
        """Take one of `limit` slots for `lease_s` seconds, reclaiming slots whose lease ran out."""
        ...

    def slot_give_back(self, key: str, holder: str) -> None: ...

    def clear(self) -> None:
        """Forget every counter (tests)."""
        ...


class RedisCounters:
    def __init__(self, url: str) -> None:
        self._redis = redis.Redis.from_url(url, socket_connect_timeout=REDIS_TIMEOUT_S, socket_timeout=REDIS_TIMEOUT_S)
        self._hit = self._redis.register_script(_HIT)
        self._take_slot = self._redis.register_script(_TAKE_SLOT)
        self._lease = self._redis.register_script(_LEASE)

    def hit(self, key: str, *, window_s: int) -> int:
        return int(self._hit(keys=[key], args=[window_s]))

    def lease(self, key: str, *, want: int, limit: int, window_s: int) -> int:
        return int(self._lease(keys=[key], args=[want, limit, window_s]))

    def slot_take(self, key: str, holder: str, *, limit: int, lease_s: float) -> bool:
        now = time.time()
        expire_s = int(lease_s) + 1
        return bool(self._take_slot(keys=[key], args=[now, limit, now + lease_s, holder, expire_s]))

    def slot_give_back(self, key: str, holder: str) -> None:
        self._redis.zrem(key, holder)

    def clear(self) -> None:
        for key in self._redis.scan_iter("toolgate:*"):
            self._redis.delete(key)


class LocalCounters:
    """The same semantics in this process's memory, for the embedded default."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hits: dict[str, tuple[float, int]] = {}
        self._slots: dict[str, dict[str, float]] = defaultdict(dict)

    def hit(self, key: str, *, window_s: int) -> int:
        now = time.monotonic()
        with self._lock:
            expires, count = self._hits.get(key, (now + window_s, 0))
            if expires <= now:
                expires, count = now + window_s, 0
            self._hits[key] = (expires, count + 1)
            if len(self._hits) > 10_000:  # windows that ended are dead weight
                self._hits = {k: v for k, v in self._hits.items() if v[0] > now}
            return count + 1

    def lease(self, key: str, *, want: int, limit: int, window_s: int) -> int:
        now = time.monotonic()
        with self._lock:
            expires, count = self._hits.get(key, (now + window_s, 0))
            if expires <= now:
                expires, count = now + window_s, 0
            granted = max(0, min(want, limit - count))
            self._hits[key] = (expires, count + granted)
            return granted

    def slot_take(self, key: str, holder: str, *, limit: int, lease_s: float) -> bool:
        now = time.monotonic()
        with self._lock:
            slots = self._slots[key]
            for stale in [name for name, deadline in slots.items() if deadline <= now]:
                del slots[stale]
            if len(slots) >= limit:
                return False
            slots[holder] = now + lease_s
            return True

    def slot_give_back(self, key: str, holder: str) -> None:
        with self._lock:
            self._slots[key].pop(holder, None)

    def clear(self) -> None:
        with self._lock:
            self._hits.clear()
            self._slots.clear()


def counters() -> Counters:
    """This process's counters (a forked worker builds its own Redis connection pool)."""
    return _counters_for(os.getpid(), settings.REDIS_URL)


@cache
def _counters_for(pid: int, redis_url: str) -> Counters:
    return RedisCounters(redis_url) if redis_url else LocalCounters()
