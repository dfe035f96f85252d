"""The in-process governance cache and the generation that invalidates it.

Service accounts, effective policies and tool switches are read on every call
but change rarely. Each process keeps them here. Every governance write bumps
the generation row in its own transaction; a process drops its cache when it
sees a generation other than the one it loaded under.

How a process learns of a bump without a database round trip per request:
with Redis configured, `governance_bump` publishes the new generation once its
transaction commits, and every process holds a subscription that `refresh()`
drains without blocking (a local socket read, no round trip). A message means
"re-read the generation now". Pushes can be lost (Redis restarting, a
publisher that died between commit and publish), so a process also re-reads
the generation at least every MAX_STALENESS_S, and on every request while its
subscription is down. Without Redis (the embedded default, one process) the
generation is read on every request, as it always was.

Some cached rows change far more often than governance: a connection's tokens
change with every OAuth refresh. Dropping every process's whole cache for each
would cost every call its warm keys and policies, so such rows have a lane of
their own: `cached_row_changed` pushes the one row's name (every process
forgets just that row) and bumps a second counter, read in the same query as
the generation, so a process that missed the push drops all such rows within
MAX_STALENESS_S.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import redis
from django.conf import settings
from django.db import transaction
from django.db.models import BooleanField, Exists, ExpressionWrapper, F

from policies_app.models import ArgumentRule, GovernanceState, ResultGuard
from policies_app.redis_internals import connection_socket, parser_holds_bytes

T = TypeVar("T")
logger = logging.getLogger(__name__)

# Pub/sub channels are server-wide, not per database: the channel names the database, so two
# deployments (or test runs) sharing one Redis server on different databases do not hear each other.
CHANNEL_PREFIX = "toolgate:governance"
# A change reaches every process within this, even when a push is lost.
MAX_STALENESS_S = 1.0
# How long a process waits before subscribing again after its subscription broke.
RESUBSCRIBE_AFTER_S = 5.0
REDIS_TIMEOUT_S = 0.5
# Entries a process keeps at most (keys, policies, grants): beyond it the cache starts over, so
# a flood of made-up keys or grant ids cannot grow a worker's memory.
MAX_ENTRIES = 20_000
# The GovernanceState rows: the generation of governance, and the counter of changes to cached rows.
GENERATION_PK, ROW_CHANGES_PK = 1, 2
BUMP_MESSAGE = b"bump"
ROW_MESSAGE_PREFIX = b"row:"  # row:<kind>:<key>


def governance_bump() -> None:
    """Mark every process's cache stale; call inside the transaction of the change."""
    _increment(GENERATION_PK)
    governance_cache.mark_stale()  # this process, now: it may read its own uncommitted change
    transaction.on_commit(lambda: _publish(BUMP_MESSAGE))


def cached_row_changed(*, kind: str, key: str) -> None:
    """One row served by `GovernanceCache.get_row` changed: every process forgets that row, and only it.

    Call inside the transaction of the change.
    """
    _increment(ROW_CHANGES_PK)
    governance_cache.forget_row(kind, key)  # this process, now
    message = ROW_MESSAGE_PREFIX + f"{kind}:{key}".encode()
    transaction.on_commit(lambda: _publish(message))


def _increment(pk: int) -> None:
    if not GovernanceState.objects.filter(pk=pk).update(generation=F("generation") + 1):
        GovernanceState.objects.get_or_create(pk=pk, defaults={"generation": 1})


def governance_generation() -> int:
    return governance_generations()[0]


def governance_generations() -> tuple[int, int]:
    """(the governance generation, the count of cached-row changes), in one query."""
    generation, row_changes, _rules = _governance_state()
    return generation, row_changes


def _governance_state() -> tuple[int, int, bool]:
    """The two counters and whether any argument rule or result guard is active, in one round trip.

    The EXISTS rides on the generation read a process makes anyway, so a deployment
    without rules never queries the rule tables: not per call, not per generation.
    """
    rules = Exists(ArgumentRule.objects.filter(is_active=True)) | Exists(ResultGuard.objects.filter(is_active=True))
    rows = (
        GovernanceState.objects.filter(pk__in=(GENERATION_PK, ROW_CHANGES_PK))
        .annotate(rules=ExpressionWrapper(rules, output_field=BooleanField()))
        .values_list("pk", "generation", "rules")
    )
    counts, any_rules = {}, False
    for pk, generation, has_rules in rows:
        counts[pk] = generation
        any_rules = any_rules or bool(has_rules)
    if not counts:
        # No counter row yet (a fresh or flushed database): the EXISTS had no row to ride on. Assume rules;
        # the rule cache loads them once for this generation, and the first write of one creates the rows.
        any_rules = True
    return counts.get(GENERATION_PK, 0), counts.get(ROW_CHANGES_PK, 0), any_rules


def _publish(message: bytes) -> None:
    if not settings.REDIS_URL:
        return
    try:
        _subscription().publish(message)
    except redis.RedisError as exc:  # the other processes' staleness bound still applies
        logger.warning("governance change not pushed (%s); processes pick it up within %ss", exc, MAX_STALENESS_S)


@dataclass(slots=True)
class Pushes:
    """What the pushes read since the last look say: governance changed, and which cached rows did."""

    governance: bool = False
    rows: set[tuple[str, str]] = field(default_factory=set)


class _Subscription:
    """This process's subscription to governance pushes, read without blocking.

    Not a thread: `pending()` is called at the start of each request and reads
    whatever the kernel has buffered. Redis writes a push to its subscribers in
    the same turn as its answer to the publisher (microseconds apart, in either
    order), so a request elsewhere that starts in that gap still reads the old
    state and the next one sees the change.
    """

    def __init__(self, url: str) -> None:
        self._client = redis.Redis.from_url(url, socket_connect_timeout=REDIS_TIMEOUT_S, socket_timeout=REDIS_TIMEOUT_S)
        self._channel = f"{CHANNEL_PREFIX}:{self._client.connection_pool.connection_kwargs.get('db', 0)}"
        self._pubsub: redis.client.PubSub | None = None
        self._confirmed = False
        self._retry_at = 0.0

    def publish(self, message: bytes) -> None:
        self._client.publish(self._channel, message)

    def pending(self) -> Pushes | None:
        """What arrived since the last look (governance also when a push may have been missed); None while
        unsubscribed."""
        pubsub = self._pubsub or self._subscribe()
        if pubsub is None:
            return None
        pushes = Pushes()
        if self._confirmed and _quiet(pubsub):
            return pushes
        try:
            while (message := pubsub.get_message(timeout=0.0)) is not None:
                if message["type"] == "subscribe":
                    self._confirmed = True
                    pushes.governance = True  # anything before the subscription took effect went unheard
                elif message["type"] == "message":
                    _read_push(message["data"], pushes)
        except (redis.RedisError, OSError):
            logger.warning("governance subscription lost; reading the generation on every request until it is back")
            self._drop()
            return None
        return pushes if self._confirmed else None

    def _subscribe(self) -> redis.client.PubSub | None:
        if time.monotonic() < self._retry_at:
            return None
        try:
            self._pubsub = self._client.pubsub()
            self._pubsub.subscribe(self._channel)
        except (redis.RedisError, OSError):
            self._drop()
            return None
        return self._pubsub

    def _drop(self) -> None:
        if self._pubsub is not None:
            with contextlib.suppress(redis.RedisError, OSError):
                self._pubsub.close()
        self._pubsub = None
        self._confirmed = False
        self._retry_at = time.monotonic() + RESUBSCRIBE_AFTER_S


def _read_push(data: bytes, pushes: Pushes) -> None:
    if data.startswith(ROW_MESSAGE_PREFIX):
        kind, _, key = data[len(ROW_MESSAGE_PREFIX) :].decode(errors="replace").partition(":")
        pushes.rows.add((kind, key))
    else:  # a bump, or anything this version does not know: the safe reading is "governance changed"
        pushes.governance = True


def _quiet(pubsub: redis.client.PubSub) -> bool:
    """Nothing buffered and nothing on the socket: no push arrived, known without a read.

    redis-py answers the same question with a zero-timeout `recv` framed by two
    `settimeout` calls; asking the kernel with `poll(0)` costs one syscall. A
    socket the server closed is readable too, so it still goes to get_message
    and is dropped there. The socket and the parser's buffer are redis-py's
    private parts (`policies_app.redis_internals`): if their shape changes the
    answer is "not quiet", and get_message decides as before.
    """
    connection = pubsub.connection
    try:
        sock = connection_socket(connection)
        if sock is None or parser_holds_bytes(connection):
            return False
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        return not poller.poll(0)
    except (AttributeError, OSError, ValueError):
        return False


_subscriptions: dict[tuple[int, str], _Subscription] = {}


def _subscription() -> _Subscription:
    """This process's subscription (a forked gunicorn worker opens its own)."""
    key = (os.getpid(), settings.REDIS_URL)
    if key not in _subscriptions:
        _subscriptions[key] = _Subscription(settings.REDIS_URL)
    return _subscriptions[key]


class GovernanceCache:
    """Lazily filled, dropped whole when the generation moves; single rows (`get_row`) forgotten one by one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation: int | None = None
        self._row_changes: int | None = None
        self._entries: dict[Any, Any] = {}
        self._rows: dict[tuple[str, str], Any] = {}
        self._stale = True
        self._read_at = 0.0
        # Whether any argument rule or result guard was active at the last generation read (None: unread).
        self._rules: bool | None = None

    @property
    def rules_active(self) -> bool:
        """Any active argument rule or result guard, as of the last read of the generation (True until read)."""
        return self._rules is not False

    def refresh(self) -> None:
        """Make sure the cache is current: the runner calls it first thing in every call, and the
        key lookup before it reads a key.

        Forgets the rows that pushes named. Reads the counters (one query)
        only when governance was pushed, the subscription is down, no Redis
        is configured, or the last read is older than MAX_STALENESS_S.
        """
        with self._lock:
            pushes = _subscription().pending() if settings.REDIS_URL else None
            if pushes is not None:
                for row in pushes.rows:
                    self._rows.pop(row, None)
            due = time.monotonic() - self._read_at >= MAX_STALENESS_S
            if not (self._stale or pushes is None or pushes.governance or due):
                return
            self._stale = False
        generation, row_changes, rules = _governance_state()
        with self._lock:
            self._read_at = time.monotonic()
            self._rules = rules
            if generation != self._generation:
                self._entries, self._rows = {}, {}
                self._generation = generation
            if row_changes != self._row_changes:  # rows changed that this process may not have heard of
                self._rows = {}
                self._row_changes = row_changes

    def mark_stale(self) -> None:
        with self._lock:
            self._stale = True
            self._rules = None  # this process may have just written the first rule: ask again

    def get(self, key: Any, load: Callable[[], T], *, remember_missing: bool = True) -> T:
        """The cached value, loaded on first use; `remember_missing=False` reloads while it is None."""
        with self._lock:
            if key in self._entries:
                return self._entries[key]  # type: ignore[no-any-return]
        value = load()
        if value is None and not remember_missing:
            return value
        with self._lock:
            if len(self._entries) >= MAX_ENTRIES:
                self._entries = {}
            self._entries[key] = value
        return value

    def get_row(self, kind: str, key: str, load: Callable[[], T | None]) -> T | None:
        """A row whose changes are announced with `cached_row_changed(kind=, key=)`; a missing row is not kept."""
        with self._lock:
            if (kind, key) in self._rows:
                return self._rows[(kind, key)]  # type: ignore[no-any-return]
        value = load()
        if value is None:
            return value
        with self._lock:
            if len(self._rows) >= MAX_ENTRIES:
                self._rows = {}
            self._rows[(kind, key)] = value
        return value

    def forget_row(self, kind: str, key: str) -> None:
        with self._lock:
            self._rows.pop((kind, key), None)

    def clear(self) -> None:
        with self._lock:
            self._entries, self._rows = {}, {}
            self._generation = self._row_changes = None
            self._rules = None
            self._stale = True


governance_cache = GovernanceCache()
