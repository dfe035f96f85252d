"""One revocation for every revocable row: revoke_once, the admin's revoke action, their change entries."""

from __future__ import annotations

import threading
import time

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.db import connection as db_connection
from django.db import transaction
from django.urls import reverse

from changes_app.models import Change
from connections_app.models import Connection, ConnectionEvent, ExecutionGrant
from connections_app.services import connection_revoke, grant_revoke
from core.models import Revocable
from policies_app.governance import governance_generation
from policies_app.models import Delegation, ServiceAccount
from policies_app.services import delegation_create, delegation_revoke, service_account_revoke
from signin.models import SigninClient
from signin.services import signin_client_revoke
from tests.factories import ConnectionFactory, GrantFactory, MembershipFactory, TenantFactory, service_account_with_key

pytestmark = pytest.mark.django_db


def _account(tenant):
    return service_account_with_key(tenant)[0]


def _delegation(tenant):
    member = MembershipFactory(tenant=tenant).user
    return delegation_create(tenant=tenant, user=member, service_account=_account(tenant), issue_token=False)[0]


def _grant(tenant):
    return GrantFactory(service_account=_account(tenant), connections=[ConnectionFactory(tenant=tenant)])


def _client(tenant):
    count = SigninClient.objects.count()
    return SigninClient.objects.create(
        client_id=f"client-{count}", kind=SigninClient.Kind.REGISTERED, redirect_uris=["http://127.0.0.1/cb"]
    )


# (changelist, how a row is made, how the service revokes it, the admin's noun, the change entry's action)
REVOCABLES = {
    "connection": (
        "admin:connections_app_connection_changelist",
        lambda tenant: ConnectionFactory(tenant=tenant),
        lambda row: connection_revoke(connection=row),
        "connection",
        "connection.revoke",
    ),
    "grant": (
        "admin:connections_app_executiongrant_changelist",
        _grant,
        lambda row: grant_revoke(grant=row),
        "grant",
        "grant.revoke",
    ),
    "service account": (
        "admin:policies_app_serviceaccount_changelist",
        _account,
        lambda row: service_account_revoke(account=row),
        "service account",
        "service_account.revoke",
    ),
    "delegation": (
        "admin:policies_app_delegation_changelist",
        _delegation,
        lambda row: delegation_revoke(delegation=row),
        "delegation",
        "delegation.revoke",
    ),
    "sign-in client": (
        "admin:signin_signinclient_changelist",
        _client,
        lambda row: signin_client_revoke(client=row),
        "client",
        "signin_client.revoke",
    ),
}


@pytest.mark.parametrize("kind", REVOCABLES)
def test_every_admin_revoke_action_counts_the_already_revoked_and_logs_each_row_it_revoked(
    kind, admin_client, admin_user
):
    changelist, make, revoke, noun, action = REVOCABLES[kind]
    tenant = TenantFactory(slug="acme")
    live, revoked = make(tenant), make(tenant)
    assert revoke(revoked) is True

    response = admin_client.post(
        reverse(changelist), {"action": "revoke_selected", "_selected_action": [str(live.pk), str(revoked.pk)]}
    )
    page = admin_client.get(reverse(changelist))

    assert response.status_code == 302
    assert [str(message) for message in page.context["messages"]] == [f"Revoked 1 {noun}. 1 already revoked."]
    live.refresh_from_db()
    assert (live.is_revoked, live.revoked_by) == (True, admin_user)
    logged = LogEntry.objects.filter(action_flag=CHANGE)
    assert [(entry.object_id, entry.get_change_message()) for entry in logged] == [(str(live.pk), "Revoked.")]
    entries = Change.objects.filter(action=action, object_id=str(live.pk))
    assert [(entry.before["revoked_at"], entry.actor_label) for entry in entries] == [(None, admin_user.username)]


def test_revoke_once_is_idempotent_a_second_revocation_writes_nothing():
    account = _account(TenantFactory(slug="acme"))
    assert service_account_revoke(account=account) is True
    first = (account.revoked_at, account.revoked_by)
    generation = governance_generation()

    again = service_account_revoke(account=ServiceAccount.objects.get(pk=account.pk), revoked_by=None)

    account.refresh_from_db()
    assert again is False
    assert (account.revoked_at, account.revoked_by) == first
    assert governance_generation() == generation  # nothing to drop from any cache
    assert Change.objects.filter(action="service_account.revoke").count() == 1


def test_a_connection_revocation_changes_its_status_in_the_same_update_and_links_its_event():
    connection = ConnectionFactory(tenant=TenantFactory(slug="acme"))
    generation = governance_generation()

    assert connection_revoke(connection=connection) is True

    event = ConnectionEvent.objects.get(connection_id=connection.pk, kind=ConnectionEvent.Kind.REVOKED)
    entry = Change.objects.get(action="connection.revoke")
    assert (connection.status, connection.next_refresh_at, connection.is_revoked) == ("revoked", None, True)
    assert entry.before == {"revoked_at": None, "status": "active"}
    assert entry.after["status"] == "revoked"
    assert entry.links == {"connection_event": event.pk}
    # Connections are not served from the governance cache (the broker reads each one), so no bump.
    assert governance_generation() == generation


def test_revoking_a_governed_row_bumps_the_generation():
    tenant = TenantFactory(slug="acme")
    delegation, grant = _delegation(tenant), _grant(tenant)
    generation = governance_generation()

    delegation_revoke(delegation=delegation)
    grant_revoke(grant=grant)

    assert governance_generation() == generation + 2


def test_the_revocable_models_share_one_definition_of_the_revocation_columns():
    for model in (Connection, ExecutionGrant, ServiceAccount, Delegation, SigninClient):
        assert issubclass(model, Revocable)
        fields = {name: model._meta.get_field(name) for name in ("revoked_at", "revoked_by")}
        assert [field.editable for field in fields.values()] == [False, False], model


def test_a_revoked_sign_in_client_remembers_who_revoked_it(admin_user):
    client = _client(None)

    signin_client_revoke(client=client, revoked_by=admin_user)

    client.refresh_from_db()
    assert client.revoked_by == admin_user


@pytest.mark.django_db(transaction=True)
def test_two_revocations_racing_count_once():
    account = _account(TenantFactory(slug="acme"))
    first_updated = threading.Event()
    results: dict[str, bool] = {}

    def slow_first() -> None:
        try:
            with transaction.atomic():
                results["first"] = service_account_revoke(account=ServiceAccount.objects.get(pk=account.pk))
                first_updated.set()
                time.sleep(0.3)  # the second revocation now waits on this row's lock
        finally:
            db_connection.close()

    def second() -> None:
        try:
            first_updated.wait(5)
            results["second"] = service_account_revoke(account=ServiceAccount.objects.get(pk=account.pk))
        finally:
            db_connection.close()

    threads = [threading.Thread(target=slow_first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)

    assert results == {"first": True, "second": False}
    assert Change.objects.filter(action="service_account.revoke").count() == 1
