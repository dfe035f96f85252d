"""The operators' connection screens: metadata only, read-only, revocation through the service."""

from __future__ import annotations

import base64
import re

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connection as db_connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from changes_app.models import Change
from connections_app.models import Connection, ConnectionEvent
from connections_app.services import connection_revoke, connection_use_denied
from tests.factories import ConnectionFactory, TenantFactory, UserFactory, service_account_with_key

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:connections_app_connection_changelist")
EVENTS = reverse("admin:connections_app_connectionevent_changelist")
SECRET = "ghp_admin-canary-0123456789abcdef"
CELL = re.compile(r'<t[hd] class="field-(\w+)[^"]*">(.*?)</t[hd]>')
TAG = re.compile(r"<[^>]+>")


def change_url(connection: Connection) -> str:
    return reverse("admin:connections_app_connection_change", args=[connection.pk])


def listed(response) -> list[str]:
    return [str(row.pk) for row in response.context["cl"].result_list]


def messages_of(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def leaks(content: bytes, connection: Connection) -> list[str]:
    """Which forms of the secret or of the stored envelope appear in a page."""
    blob = bytes(Connection.objects.get(pk=connection.pk).encrypted_credentials)
    body = blob[2 + blob[1] :]  # nonce and ciphertext, without the key id header
    forms = {
        "secret": SECRET.encode(),
        "raw": body,
        "hex": body.hex().encode(),
        "HEX": body.hex().upper().encode(),
        "base64": base64.b64encode(body)[:-4],
        "urlsafe base64": base64.urlsafe_b64encode(body)[:-4],
        "bytes repr": repr(body)[2:40].encode(),
        "memoryview": b"&lt;memory at",
    }
    return [name for name, form in forms.items() if form in content]


@pytest.fixture
def acme():
    return TenantFactory(slug="acme", name="Acme Corp")


@pytest.fixture
def globex():
    return TenantFactory(slug="globex", name="Globex")


# --- changelist ------------------------------------------------------------------------------


def test_changelist_shows_metadata_and_never_the_secret(admin_client, acme):
    creator = UserFactory(username="alice")
    connection = ConnectionFactory(
        tenant=acme,
        label="Deploy bot",
        credentials={"api_key": SECRET},
        scopes=["repo", "read:org"],
        created_by=creator,
    )

    response = admin_client.get(CHANGELIST)

    assert response.status_code == 200
    assert listed(response) == [str(connection.pk)]
    cells = dict(CELL.findall(response.content.decode()))
    assert list(cells) == [
        "short_id",
        "tenant",
        "provider",
        "label",
        "kind",
        "state",
        "scopes_display",
        "created",
        "creator",
        "last_used",
        "expires",
        "revoked",
    ]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", TAG.sub("", cells["created"]))  # short: fits 1280 px
    assert {name: TAG.sub("", html) for name, html in cells.items() if name != "created"} == {
        "short_id": connection.short_id,
        "tenant": "acme",
        "provider": "github",
        "label": "Deploy bot",
        "kind": "API key",
        "state": "Active",
        "scopes_display": "read:org, repo",
        "creator": "alice",
        "last_used": "-",
        "expires": "-",
        "revoked": "-",
    }
    assert f'href="{change_url(connection)}"' in cells["short_id"]
    assert leaks(response.content, connection) == []


def test_changelist_filters_and_searches(admin_client, acme, globex):
    deploy = ConnectionFactory(tenant=acme, label="Deploy bot")
    revoked = ConnectionFactory(tenant=acme, label="Old bot")
    connection_revoke(connection=revoked)
    other = ConnectionFactory(
        tenant=globex,
        label="Globex bot",
        credential_type="app_password",
        credentials={"username": "g", "password": "p"},
    )

    by_tenant = admin_client.get(CHANGELIST, {"tenant__id__exact": acme.pk})
    by_status = admin_client.get(CHANGELIST, {"status__exact": "revoked"})
    by_type = admin_client.get(CHANGELIST, {"credential_type__exact": "app_password", "provider": "github"})
    by_label = admin_client.get(CHANGELIST, {"q": "deploy"})
    by_slug = admin_client.get(CHANGELIST, {"q": "globex"})

    assert sorted(listed(by_tenant)) == sorted([str(deploy.pk), str(revoked.pk)])
    assert listed(by_status) == [str(revoked.pk)]
    assert listed(by_type) == [str(other.pk)]
    assert listed(by_label) == [str(deploy.pk)]
    assert listed(by_slug) == [str(other.pk)]


def test_changelist_queries_do_not_grow_with_rows(admin_client, acme, globex):
    def queries() -> int:
        with CaptureQueriesContext(db_connection) as captured:
            assert admin_client.get(CHANGELIST).status_code == 200
        return len(captured)

    ConnectionFactory(tenant=acme, created_by=UserFactory())
    few = queries()
    for tenant in (acme, globex, globex, acme, globex):
        connection = ConnectionFactory(tenant=tenant, created_by=UserFactory())
        connection_revoke(connection=connection, revoked_by=UserFactory())

    assert queries() == few


# --- change page -----------------------------------------------------------------------------


def test_change_page_is_read_only_metadata_without_the_envelope(admin_client, acme):
    connection = ConnectionFactory(tenant=acme, label="Deploy bot", credentials={"api_key": SECRET})

    response = admin_client.get(change_url(connection))

    content = response.content.decode()
    assert response.status_code == 200
    assert response.context["title"] == "View connection"
    assert list(response.context["adminform"].form.fields) == []
    shown = [field for fieldset in response.context["adminform"] for line in fieldset for field in line]
    assert [field.field["name"] for field in shown] == [
        "id",
        "tenant",
        "provider",
        "credential_type",
        "label",
        "owner",
        "status",
        "scopes_display",
        "expires_at",
        "created_at",
        "creator",
        "last_used_at",
        "revoked_at",
        "revoked_by",
        "encryption_key_id",
        "next_refresh_at",
        "refreshed_at",
        "refresh_failures",
        "last_refresh_error",
        "last_refresh_error_category",
        "events",
    ]
    assert f'<div class="readonly">{connection.encryption_key_id}</div>' in content
    assert "encrypted_credentials" not in content
    assert f'href="{EVENTS}?connection_id={connection.pk}"' in content
    assert leaks(response.content, connection) == []


def test_change_page_refuses_writes(admin_client, acme):
    connection = ConnectionFactory(tenant=acme, label="Deploy bot")
    before = Connection.objects.values().get(pk=connection.pk)

    response = admin_client.post(change_url(connection), {"label": "renamed", "status": "revoked"})

    assert response.status_code == 403
    assert Connection.objects.values().get(pk=connection.pk) == before


def test_connections_cannot_be_added_or_deleted(admin_client, acme):
    connection = ConnectionFactory(tenant=acme)

    add = admin_client.get(reverse("admin:connections_app_connection_add"))
    delete = admin_client.post(
        reverse("admin:connections_app_connection_delete", args=[connection.pk]), {"post": "yes"}
    )
    bulk_delete = admin_client.post(
        CHANGELIST, {"action": "delete_selected", "_selected_action": [str(connection.pk)], "post": "yes"}, follow=True
    )
    changelist = admin_client.get(CHANGELIST)

    assert (add.status_code, delete.status_code) == (403, 403)
    assert messages_of(bulk_delete) == ["No action selected."]  # delete_selected is not an action here
    assert Connection.objects.filter(pk=connection.pk).exists()
    actions = [name for name, _label in changelist.context["action_form"].fields["action"].choices]
    assert actions == ["", "revoke_selected", "resume_refresh_selected"]
    assert "Add connection" not in changelist.content.decode()


# --- revoke action -----------------------------------------------------------------------------


def test_revoke_action_revokes_through_the_service_and_records_the_operator(admin_client, admin_user, acme):
    target = ConnectionFactory(tenant=acme, label="Deploy bot")
    bystander = ConnectionFactory(tenant=acme, label="Keep me")

    response = admin_client.post(
        CHANGELIST, {"action": "revoke_selected", "_selected_action": [str(target.pk)]}, follow=True
    )

    target.refresh_from_db()
    bystander.refresh_from_db()
    assert messages_of(response) == ["Revoked 1 connection."]
    assert (target.status, target.revoked_by) == (Connection.Status.REVOKED, admin_user)
    assert target.revoked_at is not None
    assert (bystander.status, bystander.revoked_at) == (Connection.Status.ACTIVE, None)
    assert [(e.kind, e.actor) for e in ConnectionEvent.objects.filter(connection_id=target.pk)] == [
        ("revoked", admin_user),
        ("created", None),
    ]
    assert [(e.object_id, e.change_message, e.user) for e in LogEntry.objects.all()] == [
        (str(target.pk), "Revoked.", admin_user)
    ]


def test_the_changelist_says_why_a_connection_needs_attention(admin_client, acme):
    connection = ConnectionFactory(tenant=acme, label="Deploy bot")
    Connection.objects.filter(pk=connection.pk).update(
        status=Connection.Status.NEEDS_ATTENTION, refresh_failures=8, last_refresh_error="network"
    )

    response = admin_client.get(CHANGELIST, {"status__exact": "needs_attention"})

    assert listed(response) == [str(connection.pk)]
    cells = dict(CELL.findall(response.content.decode()))
    assert TAG.sub("", cells["state"]) == "Needs attention: provider unreachable"


def test_resume_action_puts_a_connection_needing_attention_back_in_the_sweep(admin_client, admin_user, acme):
    # given one connection needing attention and one active
    stuck = ConnectionFactory(tenant=acme, label="Stuck")
    fine = ConnectionFactory(tenant=acme, label="Fine")
    Connection.objects.filter(pk=stuck.pk).update(
        status=Connection.Status.NEEDS_ATTENTION, refresh_failures=8, last_refresh_error="timeout", next_refresh_at=None
    )

    # when the operator resumes both
    response = admin_client.post(
        CHANGELIST,
        {"action": "resume_refresh_selected", "_selected_action": [str(stuck.pk), str(fine.pk)]},
        follow=True,
    )

    # then the stuck one is active and due now, its failures kept (one more try), the operator recorded
    assert messages_of(response) == ["Resumed background refresh of 1 connection. 1 did not need attention."]
    stuck.refresh_from_db()
    assert (stuck.status, stuck.refresh_failures) == (Connection.Status.ACTIVE, 8)
    assert stuck.next_refresh_at <= timezone.now()
    assert next((e.kind, e.actor) for e in ConnectionEvent.objects.filter(connection_id=stuck.pk)) == (
        "refresh_resumed",
        admin_user,
    )
    entry = Change.objects.get(action="connection.resume_refresh")
    assert (entry.object_id, entry.before, entry.after) == (
        str(stuck.pk),
        {"status": "needs_attention"},
        {"status": "active"},
    )
    # and the active one is untouched
    fine.refresh_from_db()
    assert (fine.status, ConnectionEvent.objects.filter(connection_id=fine.pk, kind="refresh_resumed").count()) == (
        Connection.Status.ACTIVE,
        0,
    )


def test_revoking_an_already_revoked_connection_changes_nothing(admin_client, acme):
    connection = ConnectionFactory(tenant=acme)
    connection_revoke(connection=connection)
    revoked_at = connection.revoked_at

    response = admin_client.post(
        CHANGELIST, {"action": "revoke_selected", "_selected_action": [str(connection.pk)]}, follow=True
    )

    connection.refresh_from_db()
    assert messages_of(response) == ["Revoked 0 connections. 1 already revoked."]
    assert (connection.revoked_at, connection.revoked_by) == (revoked_at, None)
    assert LogEntry.objects.count() == 0
    assert ConnectionEvent.objects.filter(connection_id=connection.pk, kind="revoked").count() == 1


# --- audit trail ---------------------------------------------------------------------------------


@pytest.fixture
def trail(admin_user, acme, globex):
    """A created+revoked connection of acme, a refused use by acme's `agent`, and a globex connection."""
    account, _key = service_account_with_key(acme, name="agent")
    connection = ConnectionFactory(tenant=acme, credentials={"api_key": SECRET})
    connection_revoke(connection=connection, revoked_by=admin_user)
    connection_use_denied(
        tenant_id=acme.pk,
        connection_id=str(connection.pk),
        service_account_id=str(account.pk),
        tool_id="github__get_user",
        reason="connection has been revoked",
    )
    other = ConnectionFactory(tenant=globex)
    return connection, other


def test_event_changelist_lists_the_trail_with_names(admin_client, trail):
    connection, other = trail

    everything = admin_client.get(EVENTS)
    of_connection = admin_client.get(EVENTS, {"connection_id": str(connection.pk)})
    refused = admin_client.get(EVENTS, {"kind__exact": "use_denied"})

    content = everything.content.decode()
    assert everything.status_code == 200
    assert len(listed(everything)) == 4
    assert [e.kind for e in of_connection.context["cl"].result_list] == ["use_denied", "revoked", "created"]
    assert [(e.tool_id, e.detail) for e in refused.context["cl"].result_list] == [
        ("github__get_user", "connection has been revoked")
    ]
    assert '<td class="field-service_account">agent</td>' in content
    assert f'<td class="field-connection_short_id">{str(connection.pk)[-4:]}</td>' in content
    assert f'<td class="field-connection_short_id">{str(other.pk)[-4:]}</td>' in content
    assert leaks(everything.content, connection) == []


def test_events_are_viewable_but_not_added_changed_or_deleted(admin_client, trail):
    connection, _other = trail
    event = ConnectionEvent.objects.get(connection_id=connection.pk, kind="use_denied")
    url = reverse("admin:connections_app_connectionevent_change", args=[event.pk])

    view = admin_client.get(url)
    change = admin_client.post(url, {"detail": "rewritten"})
    delete = admin_client.post(reverse("admin:connections_app_connectionevent_delete", args=[event.pk]), {"post": "y"})
    add = admin_client.get(reverse("admin:connections_app_connectionevent_add"))

    assert view.status_code == 200
    assert view.context["title"] == "View connection event"
    assert (change.status_code, delete.status_code, add.status_code) == (403, 403, 403)
    event.refresh_from_db()
    assert event.detail == "connection has been revoked"
    assert ConnectionEvent.objects.count() == 4


def test_event_changelist_queries_do_not_grow_with_rows(admin_client, admin_user, acme, trail):
    def queries() -> int:
        with CaptureQueriesContext(db_connection) as captured:
            assert admin_client.get(EVENTS).status_code == 200
        return len(captured)

    few = queries()
    for n in range(4):
        account, _key = service_account_with_key(acme, name=f"agent-{n}")
        connection = ConnectionFactory(tenant=acme, created_by=UserFactory())
        connection_revoke(connection=connection, revoked_by=UserFactory())
        connection_use_denied(
            tenant_id=acme.pk,
            connection_id=str(connection.pk),
            service_account_id=str(account.pk),
            tool_id="github__get_user",
            reason="connection has been revoked",
        )

    assert queries() == few
