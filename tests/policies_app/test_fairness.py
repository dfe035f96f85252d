"""The fairness share: leased in small chunks per process, never more than the rate a second."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import time_machine

from policies_app import fairness
from policies_app.counters import LocalCounters, RedisCounters

SECOND = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


class CountingCounters:
    """The real counters, counting the round trips made to them."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.leases = 0

    def lease(self, key: str, *, want: int, limit: int, window_s: int) -> int:
        self.leases += 1
        return self.inner.lease(key, want=want, limit=limit, window_s=window_s)


@pytest.fixture(params=["local", "redis"])
def shared(request, monkeypatch):
    if request.param == "local":
        store = LocalCounters()
    else:
        store = RedisCounters(request.getfixturevalue("redis_url"))
        store.clear()
    counting = CountingCounters(store)
    monkeypatch.setattr(fairness, "counters", lambda: counting)
    yield counting
    store.clear()


def _processes(monkeypatch, count: int):
    """`count` processes' own allowances over the one shared counter; call one with its index."""
    allowances = [fairness._Allowances() for _ in range(count)]

    def admit(process: int, account: str = "sa-1", rate: int = 100) -> bool:
        monkeypatch.setattr(fairness, "allowances", allowances[process])
        return fairness.fairness_check(service_account_id=account, rate_per_second=rate) is None

    return admit


def test_a_process_spends_its_lease_locally_and_asks_again_when_it_is_spent(shared, monkeypatch):
    admit = _processes(monkeypatch, 1)

    with time_machine.travel(SECOND, tick=False):
        admitted = [admit(0) for _ in range(9)]

    assert all(admitted)
    assert fairness.lease_size(100) == 3
    assert shared.leases == 3


def test_processes_together_never_admit_more_than_the_rate_and_lose_at_most_their_unspent_leases(shared, monkeypatch):
    admit = _processes(monkeypatch, 4)

    with time_machine.travel(SECOND, tick=False):
        admitted = sum(admit(index % 4) for index in range(400))

    assert admitted <= 100
    assert admitted >= 100 - (fairness.lease_size(100) - 1) * 4


def test_a_rate_below_the_lease_divisor_is_counted_exactly_one_hit_at_a_time(shared, monkeypatch):
    admit = _processes(monkeypatch, 2)

    with time_machine.travel(SECOND, tick=False):
        admitted = [admit(index % 2, rate=5) for index in range(8)]

    assert admitted == [True] * 5 + [False] * 3
    assert shared.leases == 8


def test_a_lease_left_over_from_a_past_second_is_not_spent(shared, monkeypatch):
    admit = _processes(monkeypatch, 1)

    with time_machine.travel(SECOND, tick=False):
        assert admit(0)  # leases 3, spends 1
    with time_machine.travel(SECOND.replace(second=1), tick=False):
        assert admit(0)

    assert shared.leases == 2


def test_accounts_have_separate_shares(shared, monkeypatch):
    admit = _processes(monkeypatch, 1)

    with time_machine.travel(SECOND, tick=False):
        first = [admit(0, account="sa-1", rate=2) for _ in range(3)]
        second = [admit(0, account="sa-2", rate=2) for _ in range(3)]

    assert first == second == [True, True, False]


def test_the_remembered_allowances_stay_bounded(monkeypatch):
    monkeypatch.setattr(fairness, "MAX_ALLOWANCES", 3)
    allowances = fairness._Allowances()

    allowances.keep("old", 1, 2)
    for index in range(5):
        allowances.keep(f"sa-{index}", 2, 2)

    assert len(allowances._left) <= 3
    assert not allowances.spend("old", 1)
