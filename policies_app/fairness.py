"""Each service account's share of the API: at most TOOLGATE_API_RATE_PER_SECOND requests a second.

A fixed one-second window per service account, counted in the shared
counters (Redis when configured). Counting every request with its own round
trip cost about a tenth of an exec call's CPU, so a process takes its share in
small leases: one atomic round trip takes up to `lease_size(rate)` hits of the
window for this process, and the next requests of that account in the same
window spend them locally. The shared count includes every leased hit, so
more than `rate` requests a second are never admitted; a hit leased by one
process and not used by it is lost to the others for the rest of that second,
so an account right at its limit may be refused up to (lease - 1) requests per
process early. Rates under LEASE_DIVISOR lease one hit at a time: exact, as
before.
"""

from __future__ import annotations

import threading
import time

from policies_app.counters import counters
from runner.ports import RateLimited

# A lease is at most 1/LEASE_DIVISOR of the rate: 3 of the default 100 a second.
LEASE_DIVISOR = 32
# Accounts a process remembers leases for; leases of past windows are worthless anyway.
MAX_ALLOWANCES = 10_000


def lease_size(rate_per_second: int) -> int:
    return max(1, rate_per_second // LEASE_DIVISOR)


class _Allowances:
    """This process's unspent leased hits: service account -> (window, hits left)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._left: dict[str, tuple[int, int]] = {}

    def spend(self, service_account_id: str, window: int) -> bool:
        with self._lock:
            leased_window, left = self._left.get(service_account_id, (window, 0))
            if leased_window != window or left <= 0:
                return False
            self._left[service_account_id] = (window, left - 1)
            return True

    def keep(self, service_account_id: str, window: int, left: int) -> None:
        with self._lock:
            if len(self._left) >= MAX_ALLOWANCES:  # past windows first; a flood of accounts drops them all
                current = {key: value for key, value in self._left.items() if value[0] == window}
                self._left = current if len(current) < MAX_ALLOWANCES else {}
            self._left[service_account_id] = (window, left)

    def clear(self) -> None:
        with self._lock:
            self._left.clear()


allowances = _Allowances()


def fairness_check(*, service_account_id: str, rate_per_second: int) -> RateLimited | None:
    """Admit one request of this service account in the current second, or say when to retry."""
    if rate_per_second <= 0:
        return None
    window = int(time.time())
    if allowances.spend(service_account_id, window):
        return None
    granted = counters().lease(
        f"toolgate:fair:{service_account_id}:{window}",
        want=lease_size(rate_per_second),
        limit=rate_per_second,
        window_s=2,
    )
    if granted > 0:
        allowances.keep(service_account_id, window, granted - 1)
        return None
    return RateLimited(
        retry_after_s=1,
        safe_message=f"more than {rate_per_second} requests per second from this service account; slow down",
    )
