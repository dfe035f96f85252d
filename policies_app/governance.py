"""The in-process governance cache and the generation that invalidates it.

Service accounts, effective policies and tool switches are read on every call
but change rarely. Each process keeps them here and re-reads one row, the
generation, once per request: every governance write bumps it in its own
transaction, so the next call in every process sees the change for one
indexed SELECT per request instead of three (key, policy, switches).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from django.db.models import F

from policies_app.models import GovernanceState

T = TypeVar("T")


def governance_bump() -> None:
    """Mark every process's cache stale; call inside the transaction of the change."""
    updated = GovernanceState.objects.filter(pk=1).update(generation=F("generation") + 1)
    if not updated:
        GovernanceState.objects.get_or_create(pk=1, defaults={"generation": 1})


def governance_generation() -> int:
    row = GovernanceState.objects.filter(pk=1).values_list("generation", flat=True).first()
    return 0 if row is None else row


class GovernanceCache:
    """Lazily filled, dropped whole when the generation moves."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation: int | None = None
        self._entries: dict[Any, Any] = {}

    def refresh(self) -> None:
        """Re-read the generation (one query); call once at the start of each request."""
        generation = governance_generation()
        with self._lock:
            if generation != self._generation:
                self._entries = {}
                self._generation = generation

    def get(self, key: Any, load: Callable[[], T]) -> T:
        with self._lock:
            if key in self._entries:
                return self._entries[key]  # type: ignore[no-any-return]
        value = load()
        with self._lock:
            self._entries[key] = value
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries = {}
            self._generation = None


governance_cache = GovernanceCache()
