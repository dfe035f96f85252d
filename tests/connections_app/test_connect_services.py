"""The writes behind a call's connect page: grant and declare a new connection for the person's client, once.

The end to end paths (SDK clients, the page over a live socket) are in
test_connect_elicitation.py; these pin what the service keeps, drops and refuses,
and that an ask outlives neither its time nor its person.
"""

from __future__ import annotations

import pytest

from changes_app.models import Change
from connections_app.models import ExecutionGrant
from connections_app.services import connection_declare_for_call, connection_revoke
from core.errors import AppError
from gateway import elicitation
from gateway.elicitation import Principal, connect_ask_create, connect_ask_get, connect_ask_open_for_call
from policies_app.models import Delegation
from policies_app.services import delegation_create
from tests.factories import ConnectionFactory, MembershipFactory, TenantFactory, UserFactory, service_account_with_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def acme():
    tenant = TenantFactory(slug="acme")
    account, _key = service_account_with_key(tenant, name="desktop")
    alice = MembershipFactory(tenant=tenant, user=UserFactory(username="alice")).user
    bob = MembershipFactory(tenant=tenant, user=UserFactory(username="bob")).user
    delegation, _token = delegation_create(tenant=tenant, user=alice, service_account=account)
    return tenant, account, alice, bob, delegation


def test_declaring_grants_once_keeps_what_is_still_usable_and_drops_revoked_rows(acme):
    tenant, account, alice, _bob, delegation = acme
    kept = ConnectionFactory(tenant=tenant, owner=alice)
    gone = ConnectionFactory(tenant=tenant, provider="github")
    Delegation.objects.filter(pk=delegation.pk).update(connection_ids=[str(kept.pk), str(gone.pk)])
    delegation.refresh_from_db()
    connection_revoke(connection=gone)
    new = ConnectionFactory(tenant=tenant, provider="github", owner=alice)

    connection_declare_for_call(delegation=delegation, connection=new, user=alice)
    connection_declare_for_call(delegation=delegation, connection=new, user=alice)  # a second time adds nothing

    assert Delegation.objects.get(pk=delegation.pk).connection_ids == sorted([str(kept.pk), str(new.pk)])
    grant = ExecutionGrant.objects.get()
    assert (grant.service_account, list(grant.connections.all()), grant.created_by) == (account, [new], alice)
    assert Change.objects.filter(action="grant.create").count() == 1


def test_declaring_refuses_another_persons_delegation_or_connection(acme):
    tenant, _account, alice, bob, delegation = acme
    bobs = ConnectionFactory(tenant=tenant, owner=bob)
    mine = ConnectionFactory(tenant=tenant, owner=alice)

    with pytest.raises(AppError):
        connection_declare_for_call(delegation=delegation, connection=bobs, user=alice)
    with pytest.raises(AppError):
        connection_declare_for_call(delegation=delegation, connection=mine, user=bob)

    assert ExecutionGrant.objects.count() == 0
    assert Delegation.objects.get(pk=delegation.pk).connection_ids == []


def test_an_ask_is_found_only_for_its_person_and_call_and_not_after_it_expires(acme, monkeypatch):
    tenant, account, alice, bob, delegation = acme
    alices = Principal(str(account.pk), f"user:{alice.pk}", str(delegation.pk), tenant.pk)
    bobs = Principal(str(account.pk), f"user:{bob.pk}", str(delegation.pk), tenant.pk)

    ask = connect_ask_create(
        principal=alices, provider="github", tool_id="github__get_user", args={}, tool_call_id="c1"
    )

    assert ask is not None
    assert connect_ask_get(ask.ask_id) == ask
    assert connect_ask_open_for_call(principal=alices, tool_id="github__get_user", args={}) == ask
    assert connect_ask_open_for_call(principal=alices, tool_id="github__get_user", args={"other": 1}) is None
    assert connect_ask_open_for_call(principal=bobs, tool_id="github__get_user", args={}) is None
    assert connect_ask_get("not-an-id") is None
    monkeypatch.setattr(elicitation, "STATE_TTL_S", -1)
    stale = connect_ask_create(principal=alices, provider="github", tool_id="core__x", args={}, tool_call_id="c2")
    assert stale is not None
    assert connect_ask_get(stale.ask_id) is None
