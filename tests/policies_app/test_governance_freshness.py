"""Freshness belongs to the runner and the key lookup, not to the REST authentication class.

A call made straight to the runner (as a Celery task or a management command
would make it) must see a change another process made, and the process's
bookkeeping of key use stays bounded whatever the number of accounts.
"""

from __future__ import annotations

import time
import uuid

import pytest
import redis
from django.conf import settings
from django.core.management import call_command
from django.db.models import F

from config.runtime import runtime
from policies_app import governance, services
from policies_app.governance import _publish
from policies_app.models import GovernanceState, ServiceAccount
from runner.types import ErrorCode, ToolInvocationContext
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tools_app.models import Tool

TOOL = "core__get_current_time"


def _direct_call(account: ServiceAccount):
    ctx = ToolInvocationContext(
        run_id="task",
        tool_call_id=f"call_{uuid.uuid4().hex}",
        tenant_id=str(account.tenant_id),
        actor_id=str(account.id),
    )
    return runtime().runner.exec(TOOL, {}, ctx)


def _wait_until(predicate, seconds: float = 2.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def _wait_for_the_push_to_arrive() -> None:
    """Redis may answer the publisher before it writes to the subscribers: the push is on its way."""
    if not settings.REDIS_URL:  # the embedded default reads the generation on every call instead
        return
    subscription = governance._subscription()
    assert _wait_until(lambda: subscription._pubsub is None or not governance._quiet(subscription._pubsub))


@pytest.mark.django_db(transaction=True)
def test_a_call_made_without_the_api_sees_a_change_another_process_made():
    # given: this process has served a call, so its governance cache is warm
    call_command("sync_tools")
    Tool.objects.filter(pk=TOOL).update(is_enabled=True)
    GovernanceState.objects.update(generation=F("generation") + 1)
    account, _key = service_account_with_key(TenantFactory(slug="task"))
    ToolPolicyFactory(tenant=account.tenant, allowed_tools=[TOOL])
    assert _direct_call(account).ok

    # when: another process flips the kill switch: its rows change and its commit pushes the bump
    # (bare UPDATEs here, so nothing tells this process's cache directly)
    Tool.objects.filter(pk=TOOL).update(is_enabled=False)
    GovernanceState.objects.update(generation=F("generation") + 1)
    _publish(governance.BUMP_MESSAGE)
    _wait_for_the_push_to_arrive()

    # then: the next call, made straight to the runner, is refused
    result = _direct_call(account)
    assert (result.error_code, result.safe_message) == (ErrorCode.POLICY_DENIED, "tool is disabled")


@pytest.mark.django_db
def test_the_notes_of_recorded_use_keep_only_the_most_recent_accounts(monkeypatch):
    monkeypatch.setattr(services, "MAX_USE_NOTES", 3)
    monkeypatch.setattr(services, "_use_notes", services._UseNotes())
    tenant = TenantFactory(slug="notes")
    accounts = [service_account_with_key(tenant, name=f"agent-{index}")[0] for index in range(5)]

    for account in accounts:
        services.service_account_note_use(service_account_id=str(account.id), loaded_last_used_at=None)

    assert len(services._use_notes) == 3
    noted = [services._use_notes.get(str(account.id)) is not None for account in accounts]
    assert noted == [False, False, True, True, True]
    assert ServiceAccount.objects.filter(last_used_at__isnull=False).count() == 5


def test_the_subscription_is_quiet_until_a_push_arrives_and_hears_every_push(redis_url):
    # given: a confirmed subscription with nothing pending
    subscription = governance._Subscription(redis_url)
    assert _wait_until(lambda: subscription.pending() is not None)  # the subscribe confirmation
    assert subscription.pending() == governance.Pushes()
    assert governance._quiet(subscription._pubsub)

    # when: a push arrives (two, in fact)
    subscription.publish(governance.BUMP_MESSAGE)
    subscription.publish(governance.BUMP_MESSAGE)

    # then: the socket is no longer quiet, the push is heard once, and quiet follows
    assert _wait_until(lambda: not governance._quiet(subscription._pubsub))
    assert subscription.pending() == governance.Pushes(governance=True)
    assert subscription.pending() == governance.Pushes()
    assert governance._quiet(subscription._pubsub)
    subscription._drop()


def test_a_push_reaches_the_subscriptions_of_its_own_database_only(redis_url):
    """Channels are server-wide: a deployment (or a test run) on another database must not cost reads here."""
    db = redis.Redis.from_url(redis_url).connection_pool.connection_kwargs.get("db", 0)
    other_url = redis_url.rsplit("/", 1)[0] + f"/{(db + 1) % 16}"
    ours, theirs = governance._Subscription(redis_url), governance._Subscription(other_url)
    for subscription in (ours, theirs):
        assert _wait_until(lambda subscription=subscription: subscription.pending() is not None)

    theirs.publish(governance.BUMP_MESSAGE)  # another database's bump: unheard here
    assert _wait_until(lambda: theirs.pending() == governance.Pushes(governance=True))
    assert ours.pending() == governance.Pushes()

    governance._Subscription(redis_url).publish(governance.BUMP_MESSAGE)  # this database's, from another process
    assert _wait_until(lambda: not governance._quiet(ours._pubsub))
    assert ours.pending() == governance.Pushes(governance=True)
    for subscription in (ours, theirs):
        subscription._drop()


def test_a_subscription_whose_server_connection_died_is_not_quiet_and_is_dropped(redis_url):
    # given: a confirmed subscription
    subscription = governance._Subscription(redis_url)
    assert _wait_until(lambda: subscription.pending() is not None)
    host, port = subscription._pubsub.connection._sock.getsockname()[:2]

    # when: the server closes that connection (and only that one)
    assert redis.Redis.from_url(redis_url).client_kill(f"{host}:{port}")

    # then: the closed socket reads as "not quiet", and pending() reports the subscription down
    assert _wait_until(lambda: not governance._quiet(subscription._pubsub))
    assert subscription.pending() is None
    assert subscription._pubsub is None


def test_a_push_that_names_a_row_is_read_as_that_row_and_not_as_a_governance_change(redis_url):
    subscription = governance._Subscription(redis_url)
    assert _wait_until(lambda: subscription.pending() is not None)

    subscription.publish(governance.ROW_MESSAGE_PREFIX + b"connection:c1")
    subscription.publish(governance.ROW_MESSAGE_PREFIX + b"connection:c2")
    subscription.publish(b"something a newer version says")  # unknown: read as the safe "governance changed"

    assert _wait_until(lambda: not governance._quiet(subscription._pubsub))
    assert _wait_until(
        lambda: subscription.pending() == governance.Pushes(True, {("connection", "c1"), ("connection", "c2")})
    )
    subscription._drop()


@pytest.mark.django_db(transaction=True)
def test_a_changed_row_is_forgotten_everywhere_while_the_governance_cache_stays_warm(redis_url):
    """An OAuth refresh must not cost every process its warm keys and policies: only the one row goes."""
    # given: a warm cache (its subscription confirmed) holding a governance entry and two cached rows
    assert _wait_until(lambda: governance._subscription().pending() is not None)
    cache = governance.governance_cache
    cache.refresh()
    loads: list[str] = []

    def load(name):
        return lambda: loads.append(name) or name

    cache.get(("policy", 1), load("policy"))
    cache.get_row("connection", "c1", load("c1"))
    cache.get_row("connection", "c2", load("c2"))

    # when: another process changes row c1 and pushes it
    governance._increment(governance.ROW_CHANGES_PK)
    governance._Subscription(redis_url).publish(governance.ROW_MESSAGE_PREFIX + b"connection:c1")
    _wait_for_the_push_to_arrive()
    cache._read_at = time.monotonic()  # the periodic re-read is not due: only the push speaks
    cache.refresh()

    # then: c1 is read again, c2 and the governance entry are not
    for key in ("policy", "c1", "c2"):
        getter = cache.get_row("connection", key, load(key)) if key != "policy" else cache.get(("policy", 1), load(key))
        assert getter == key
    assert loads == ["policy", "c1", "c2", "c1"]


@pytest.mark.django_db(transaction=True)
def test_a_process_that_missed_a_row_push_forgets_every_cached_row_within_the_staleness_bound(redis_url):
    # given: a warm cache with a cached row and a governance entry
    cache = governance.governance_cache
    cache.refresh()
    cache.get(("policy", 1), lambda: "policy")
    cache.get_row("connection", "c1", lambda: "old")

    # when: a row changed elsewhere and its push was lost (only the counter moved)
    governance._increment(governance.ROW_CHANGES_PK)
    cache._read_at -= governance.MAX_STALENESS_S  # the periodic re-read is due
    cache.refresh()

    # then: the rows are read again; governance is not
    assert cache.get_row("connection", "c1", lambda: "new") == "new"
    assert cache.get(("policy", 1), lambda: "reloaded") == "policy"
