"""Budgets that survive crashes and outages.

Concurrency slots are leased: a process killed mid-call leaves a slot that the
next caller reclaims once its lease has run out, instead of a counter stuck at
its maximum for ten minutes. Each operation is one atomic round trip. Both the
Redis counters (when REDIS_URL is set) and the embedded in-process ones are
held to the same behaviour.
"""

from __future__ import annotations

import socket
import threading
import time
from datetime import UTC, datetime

import pytest
import time_machine

from config.runtime import runtime
from policies_app.counters import LocalCounters, RedisCounters
from policies_app.redis_internals import replies_parsed_by_hiredis
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import api_client, enable_tools
from tools_app.models import ToolInvocation


@pytest.fixture(params=["local", "redis"])
def counters(request):
    if request.param == "local":
        yield LocalCounters()
        return
    store = RedisCounters(request.getfixturevalue("redis_url"))
    store.clear()
    yield store
    store.clear()


def test_a_slot_left_by_a_killed_process_is_reclaimed_after_its_lease(counters):
    # given two slots taken by calls whose processes died (never given back)
    assert counters.slot_take("toolgate:inflight:t", "dead-1", limit=2, lease_s=0.2)
    assert counters.slot_take("toolgate:inflight:t", "dead-2", limit=2, lease_s=0.2)

    refused_while_leased = counters.slot_take("toolgate:inflight:t", "next", limit=2, lease_s=5)
    time.sleep(0.3)
    after_lease = counters.slot_take("toolgate:inflight:t", "next", limit=2, lease_s=5)

    assert (refused_while_leased, after_lease) == (False, True)


def test_a_given_back_slot_is_free_at_once(counters):
    assert counters.slot_take("toolgate:inflight:t", "a", limit=1, lease_s=60)
    counters.slot_give_back("toolgate:inflight:t", "a")

    assert counters.slot_take("toolgate:inflight:t", "b", limit=1, lease_s=60)


def test_concurrent_takers_never_exceed_the_limit(counters):
    won = []
    barrier = threading.Barrier(16)

    def take(index: int) -> None:
        barrier.wait()
        if counters.slot_take("toolgate:inflight:race", f"h{index}", limit=3, lease_s=60):
            won.append(index)

    threads = [threading.Thread(target=take, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(won) == 3


def test_hits_count_within_their_window(counters):
    assert [counters.hit("toolgate:fair:x:1", window_s=2) for _ in range(3)] == [1, 2, 3]
    assert counters.hit("toolgate:fair:x:2", window_s=2) == 1


@pytest.fixture
def fresh_runtime():
    """The runtime binds the fairness rate when it is built: rebuild it around a test that changes it."""
    runtime.cache_clear()
    yield
    runtime.cache_clear()


@pytest.mark.django_db
def test_calls_refused_by_the_fairness_share_are_audited_as_rate_limited(settings, fresh_runtime):
    settings.TOOLGATE_API_RATE_PER_SECOND = 2
    tenant = TenantFactory(slug="acme")
    enable_tools("core__get_current_time")
    _account, key = service_account_with_key(tenant, name="agent")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["core__get_current_time"])
    client = api_client(key)

    with time_machine.travel(datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC), tick=False):  # one one-second window
        statuses = [
            client.post("/api/v1/tools/exec", {"tool_id": "core__get_current_time", "args": {}}, format="json")
            for _ in range(3)
        ]

    assert [r.status_code for r in statuses] == [200, 200, 429]
    assert statuses[2]["Retry-After"] == "1"
    assert list(ToolInvocation.objects.order_by("id").values_list("error_code", flat=True)) == [
        "",
        "",
        "rate_limited",
    ]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.django_db
def test_an_unreachable_redis_answers_503_fast_and_runs_nothing(settings):
    tenant = TenantFactory(slug="acme")
    enable_tools("core__get_current_time")
    _account, key = service_account_with_key(tenant, name="agent")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["core__get_current_time"])
    settings.REDIS_URL = f"redis://127.0.0.1:{_closed_port()}/0"  # the counters now point at nothing

    started = time.monotonic()
    response = api_client(key).post(
        "/api/v1/tools/exec", {"tool_id": "core__get_current_time", "args": {}}, format="json"
    )
    elapsed = time.monotonic() - started

    assert (response.status_code, response.json()["error_code"]) == (503, "unavailable_dependency")
    assert response["Retry-After"] == "5"
    assert "redis" not in response.content.decode().lower()
    assert elapsed < 2.0
    row = ToolInvocation.objects.get()
    assert (row.error_code, row.executed, row.ok) == ("unavailable_dependency", False, False)


def test_redis_replies_are_parsed_by_hiredis():
    """The hot path's Redis round trip reads its reply in C (requirements.txt pins hiredis for it)."""
    assert replies_parsed_by_hiredis()
