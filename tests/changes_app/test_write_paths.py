"""Every governance write path leaves exactly one change-log entry, with its actor, origin and diff.

Admin, tenant UI, REST and commands each go through the service that writes,
and the service records the change in its transaction; a refused write (a
form or body that does not validate, a file that is refused) leaves none.
"""

from __future__ import annotations

import getpass
import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.core.serializers.json import DjangoJSONEncoder
from django.urls import reverse

from changes_app.models import Change
from connections_app.models import Connection, ConnectionEvent, ExecutionGrant
from policies_app.models import ApprovalRequest, ServiceAccount, ToolPolicy
from tests.changes_app.helpers import entries_since, mark, only_entry_since
from tests.factories import ConnectionFactory, GrantFactory, TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import api_client
from tests.support.approvals import pending_approval
from tests.support.web import member_client
from tools_app.models import Tool

pytestmark = pytest.mark.django_db

OS_USER = f"os:{getpass.getuser()}"
SECRET = "ghp_changelogcanary0d1e2f3a4b"


@pytest.fixture
def acme():
    return TenantFactory(slug="acme")


@pytest.fixture
def catalog() -> None:
    call_command("sync_tools", stdout=io.StringIO())


@pytest.fixture
def admin_actor(admin_user) -> tuple[str, str]:
    return ("user", admin_user.get_username())


def _open_approval(account: ServiceAccount) -> ApprovalRequest:
    return pending_approval(account, {"title": "a title"}, tool_call_id="call_1")


def _policy_form(**overrides: object) -> dict:
    data = {
        "name": "acme-default",
        "tenant": "",
        "service_account": "",
        "is_active": "on",
        "allowed_tools": ["core__wait"],
        "require_approval_for_effects": [],
        "require_approval_at_or_above": "",
        "require_approval_for_tools": [],
        "approver": "operator",
        "approval_ttl_s": "3600",
        "max_runtime_ms": "",
        "max_result_bytes": "",
        "rate_limit_per_minute": "",
        "max_concurrency": "",
    }
    data.update(overrides)
    return data


# --- admin ----------------------------------------------------------------------------------


def test_admin_tool_switch(admin_client, admin_actor, catalog):
    since = mark()

    response = admin_client.post(reverse("admin:tools_app_tool_change", args=["core__wait"]), {"is_enabled": "on"})

    assert response.status_code == 302
    assert only_entry_since(since) == {
        "action": "tool.enable",
        "origin": "admin",
        "actor": admin_actor,
        "object": ("tools_app.tool", "core__wait"),
        "tenant_id": None,
        "before": {"is_enabled": False},
        "after": {"is_enabled": True},
    }


def test_admin_bulk_switch_leaves_one_entry_per_tool_that_changed(admin_client, catalog):
    Tool.objects.filter(pk="core__wait").update(is_enabled=True)
    since = mark()

    admin_client.post(
        reverse("admin:tools_app_tool_changelist"),
        {"action": "enable_selected", "_selected_action": ["core__wait", "core__get_current_time"]},
    )

    assert [(c.action, c.object_id, c.origin) for c in entries_since(since)] == [
        ("tool.enable", "core__get_current_time", "admin")
    ]


def test_admin_policy_create_edit_delete(admin_client, admin_actor, acme, catalog):
    since = mark()
    admin_client.post(reverse("admin:policies_app_toolpolicy_add"), _policy_form(tenant=acme.pk))
    policy = ToolPolicy.objects.get()
    created = only_entry_since(since)

    since = mark()
    admin_client.post(
        reverse("admin:policies_app_toolpolicy_change", args=[policy.pk]),
        _policy_form(tenant=acme.pk, allowed_tools=["core__wait", "core__get_current_time"], max_concurrency="2"),
    )
    edited = only_entry_since(since)

    since = mark()
    admin_client.post(reverse("admin:policies_app_toolpolicy_delete", args=[policy.pk]), {"post": "yes"})
    deleted = only_entry_since(since)

    assert (created["action"], created["origin"], created["actor"], created["tenant_id"]) == (
        "policy.create",
        "admin",
        admin_actor,
        acme.pk,
    )
    assert created["after"]["allowed_tools"] == ["core__wait"]
    assert created["before"] == {}
    assert (edited["action"], edited["before"]) == (
        "policy.update",
        {"allowed_tools": ["core__wait"], "max_concurrency": None},
    )
    assert set(edited["after"]) == {"allowed_tools", "max_concurrency"}
    assert (sorted(edited["after"]["allowed_tools"]), edited["after"]["max_concurrency"]) == (
        ["core__get_current_time", "core__wait"],
        2,
    )
    assert (deleted["action"], deleted["object"], deleted["after"]) == (
        "policy.delete",
        ("policies_app.toolpolicy", str(policy.pk)),
        {},
    )
    assert deleted["before"]["name"] == "acme-default"
    assert not ToolPolicy.objects.exists()


def test_admin_policy_bulk_delete_leaves_one_entry_per_policy(admin_client, acme):
    first = ToolPolicyFactory(name="first", tenant=acme)
    second = ToolPolicyFactory(name="second", tenant=acme, is_active=False)
    since = mark()

    admin_client.post(
        reverse("admin:policies_app_toolpolicy_changelist"),
        {"action": "delete_selected", "_selected_action": [first.pk, second.pk], "post": "yes"},
    )

    assert sorted((c.action, c.object_label) for c in entries_since(since)) == [
        ("policy.delete", "first"),
        ("policy.delete", "second"),
    ]
    assert not ToolPolicy.objects.exists()


def test_an_invalid_policy_form_leaves_no_entry(admin_client, catalog):
    since = mark()

    response = admin_client.post(reverse("admin:policies_app_toolpolicy_add"), _policy_form(allowed_tools=["nope"]))

    assert response.status_code == 200
    assert entries_since(since) == []
    assert not ToolPolicy.objects.exists()


def test_admin_service_account_create_edit_revoke(admin_client, admin_actor, acme):
    since = mark()
    admin_client.post(
        reverse("admin:policies_app_serviceaccount_add"), {"tenant": acme.pk, "name": "agent", "scopes": ["tools:exec"]}
    )
    created = only_entry_since(since)
    account = ServiceAccount.objects.get()

    since = mark()
    admin_client.post(
        reverse("admin:policies_app_serviceaccount_change", args=[account.pk]),
        {"name": "agent-2", "scopes": ["tools:exec", "connections:manage"]},
    )
    edited = only_entry_since(since)

    since = mark()
    admin_client.post(
        reverse("admin:policies_app_serviceaccount_changelist"),
        {"action": "revoke_selected", "_selected_action": [str(account.pk)]},
    )
    revoked = only_entry_since(since)

    account.refresh_from_db()
    assert (created["action"], created["origin"], created["actor"], created["tenant_id"]) == (
        "service_account.create",
        "admin",
        admin_actor,
        acme.pk,
    )
    assert created["after"] == {
        "tenant": acme.pk,
        "name": "agent",
        "scopes": ["tools:exec"],
        "revoked_at": None,
        "consent_redirect_uris": [],
    }
    assert (edited["action"], edited["before"], edited["after"]) == (
        "service_account.update",
        {"name": "agent", "scopes": ["tools:exec"]},
        {"name": "agent-2", "scopes": ["connections:manage", "tools:exec"]},
    )
    assert (account.name, account.scopes) == ("agent-2", ["connections:manage", "tools:exec"])
    assert (revoked["action"], revoked["before"], revoked["after"]) == (
        "service_account.revoke",
        {"revoked_at": None},
        {"revoked_at": DjangoJSONEncoder().default(account.revoked_at)},
    )


def test_admin_grant_revoke(admin_client, admin_actor, acme):
    account, _key = service_account_with_key(acme, name="agent")
    grant = GrantFactory(service_account=account, connections=[ConnectionFactory(tenant=acme)])
    since = mark()

    admin_client.post(
        reverse("admin:connections_app_executiongrant_changelist"),
        {"action": "revoke_selected", "_selected_action": [str(grant.pk)]},
    )

    entry = only_entry_since(since)
    assert (entry["action"], entry["origin"], entry["actor"], entry["object"], entry["tenant_id"]) == (
        "grant.revoke",
        "admin",
        admin_actor,
        ("connections_app.executiongrant", str(grant.pk)),
        acme.pk,
    )
    assert entry["before"] == {"revoked_at": None}
    assert entry["after"]["revoked_at"] is not None


def test_admin_approval_decision(admin_client, admin_actor, admin_user, acme):
    account, _key = service_account_with_key(acme, name="agent")
    approval = _open_approval(account)
    since = mark()

    admin_client.post(
        reverse("admin:policies_app_approvalrequest_changelist"),
        {"action": "approve_selected", "_selected_action": [str(approval.pk)]},
    )

    assert only_entry_since(since) == {
        "action": "approval.approved",
        "origin": "admin",
        "actor": admin_actor,
        "object": ("policies_app.approvalrequest", str(approval.pk)),
        "tenant_id": acme.pk,
        "before": {"status": "pending", "decided_by_name": ""},
        "after": {"status": "approved", "decided_by_name": admin_user.get_username()},
    }


def test_admin_connection_revoke_links_its_connection_event(admin_client, admin_actor, acme):
    connection = ConnectionFactory(tenant=acme)
    since = mark()

    admin_client.post(
        reverse("admin:connections_app_connection_changelist"),
        {"action": "revoke_selected", "_selected_action": [str(connection.pk)]},
    )

    entry = Change.objects.get(id__gt=since)
    event = ConnectionEvent.objects.get(connection_id=connection.pk, kind="revoked")
    assert (entry.action, entry.origin, (entry.actor_kind, entry.actor_label), entry.tenant_id) == (
        "connection.revoke",
        "admin",
        admin_actor,
        acme.pk,
    )
    assert (entry.before["status"], entry.after["status"]) == ("active", "revoked")
    assert entry.links == {"connection_event": event.pk}


# --- tenant UI ------------------------------------------------------------------------------


def test_ui_connection_create_and_revoke(acme):
    client, user = member_client(acme)
    since = mark()
    client.post(
        reverse("web:connection-new") + "?type=api_key",
        {"provider": "github", "label": "bot", "api_key": SECRET, "scopes": "repo", "expires_at": ""},
    )
    created = only_entry_since(since)
    connection = Connection.objects.get()

    since = mark()
    client.post(reverse("web:connection-revoke", args=[connection.pk]))
    revoked = only_entry_since(since)

    assert (created["action"], created["origin"], created["actor"], created["tenant_id"]) == (
        "connection.create",
        "tenant_ui",
        ("user", user.get_username()),
        acme.pk,
    )
    assert created["after"] == {
        "owner": None,
        "provider": "github",
        "credential_type": "api_key",
        "label": "bot",
        "scopes": ["repo"],
        "expires_at": None,
        "status": "active",
        "revoked_at": None,
    }
    assert (revoked["action"], revoked["origin"], revoked["before"]["status"], revoked["after"]["status"]) == (
        "connection.revoke",
        "tenant_ui",
        "active",
        "revoked",
    )


def test_ui_grant_create_and_revoke(acme):
    client, user = member_client(acme)
    account, _key = service_account_with_key(acme, name="agent")
    connection = ConnectionFactory(tenant=acme)
    since = mark()
    client.post(reverse("web:grant-new"), {"service_account": account.pk, "connections": [connection.pk]})
    created = only_entry_since(since)
    grant = ExecutionGrant.objects.get()

    since = mark()
    client.post(reverse("web:grant-revoke", args=[grant.pk]))
    revoked = only_entry_since(since)

    assert (created["action"], created["origin"], created["actor"], created["object"]) == (
        "grant.create",
        "tenant_ui",
        ("user", user.get_username()),
        ("connections_app.executiongrant", str(grant.pk)),
    )
    assert created["after"] == {
        "tenant": acme.pk,
        "service_account": str(account.pk),
        "connections": [str(connection.pk)],
        "expires_at": None,
        "revoked_at": None,
    }
    assert (revoked["action"], revoked["origin"]) == ("grant.revoke", "tenant_ui")


def test_ui_service_account_create_and_revoke(acme):
    client, user = member_client(acme)
    since = mark()
    client.post(reverse("web:service-account-new"), {"name": "agent", "scopes": ["tools:exec"]})
    created = only_entry_since(since)
    account = ServiceAccount.objects.get()

    since = mark()
    client.post(reverse("web:service-account-revoke", args=[account.pk]))
    revoked = only_entry_since(since)

    assert (created["action"], created["origin"], created["actor"]) == (
        "service_account.create",
        "tenant_ui",
        ("user", user.get_username()),
    )
    assert (revoked["action"], revoked["origin"], revoked["before"]) == (
        "service_account.revoke",
        "tenant_ui",
        {"revoked_at": None},
    )


def test_ui_forms_that_do_not_validate_leave_no_entry(acme):
    client, _user = member_client(acme)
    account, _key = service_account_with_key(acme, name="agent")
    since = mark()

    bad_connection = client.post(
        reverse("web:connection-new") + "?type=api_key",
        {"provider": "github", "label": "bot", "api_key": "", "scopes": "", "expires_at": ""},
    )
    bad_grant = client.post(reverse("web:grant-new"), {"service_account": account.pk, "connections": []})
    bad_account = client.post(reverse("web:service-account-new"), {"name": "agent"})

    assert [r.status_code for r in (bad_connection, bad_grant, bad_account)] == [200, 200, 200]
    assert entries_since(since) == []


# --- REST -----------------------------------------------------------------------------------


@pytest.fixture
def manager(acme):
    account, key = service_account_with_key(acme, name="ops", scopes=("connections:manage",))
    return account, api_client(key)


def test_rest_connection_create_and_revoke_name_the_service_account_and_the_request(acme, manager):
    account, client = manager
    since = mark()
    response = client.post(
        "/api/v1/connections",
        {"provider": "github", "credential_type": "api_key", "credentials": {"api_key": SECRET}},
        format="json",
        HTTP_X_REQUEST_ID="req-create-1",
    )
    created = Change.objects.get(id__gt=since)
    connection_id = response.json()["id"]

    since = mark()
    client.post(f"/api/v1/connections/{connection_id}/revoke", HTTP_X_REQUEST_ID="req-revoke-1")
    revoked = Change.objects.get(id__gt=since)

    assert response.status_code == 201
    assert (created.action, created.origin, created.actor_kind, created.actor_id, created.actor_label) == (
        "connection.create",
        "rest",
        "service_account",
        str(account.pk),
        "acme/ops",
    )
    assert (created.request_id, revoked.request_id) == ("req-create-1", "req-revoke-1")
    assert response["X-Request-ID"] == "req-create-1"
    assert (revoked.action, revoked.origin, revoked.actor_label, revoked.object_id) == (
        "connection.revoke",
        "rest",
        "acme/ops",
        connection_id,
    )


def test_rest_grant_create_and_revoke(acme, manager):
    _account, client = manager
    agent, _key = service_account_with_key(acme, name="agent")
    connection = ConnectionFactory(tenant=acme)
    since = mark()
    response = client.post(
        "/api/v1/grants", {"service_account": "agent", "connection_ids": [str(connection.pk)]}, format="json"
    )
    created = only_entry_since(since)

    since = mark()
    client.post(f"/api/v1/grants/{response.json()['id']}/revoke")
    revoked = only_entry_since(since)

    assert (created["action"], created["origin"], created["actor"], created["after"]["connections"]) == (
        "grant.create",
        "rest",
        ("service_account", "acme/ops"),
        [str(connection.pk)],
    )
    assert created["after"]["service_account"] == str(agent.pk)
    assert (revoked["action"], revoked["origin"], revoked["actor"]) == (
        "grant.revoke",
        "rest",
        ("service_account", "acme/ops"),
    )


def test_rest_writes_that_are_refused_leave_no_entry(acme, manager):
    _account, client = manager
    agent, _key = service_account_with_key(acme, name="agent")
    revoked = ConnectionFactory(tenant=acme)
    revoked.revoked_at, revoked.status = revoked.created_at, "revoked"
    revoked.save()
    since = mark()

    bad_connection = client.post(
        "/api/v1/connections", {"provider": "nope", "credential_type": "api_key", "credentials": {}}, format="json"
    )
    bad_grant = client.post(
        "/api/v1/grants", {"service_account": str(agent.pk), "connection_ids": [str(revoked.pk)]}, format="json"
    )

    assert (bad_connection.status_code, bad_grant.status_code) == (422, 422)
    assert entries_since(since) == []


# --- commands -------------------------------------------------------------------------------


def _policy_file(tmp_path, document: dict) -> str:
    path = tmp_path / "policies.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return str(path)


def test_policy_import_records_each_policy_and_switch_it_writes(tmp_path, acme, catalog):
    document = {
        "tools": {"core__wait": {"enabled": True}},
        "policies": [{"name": "acme-default", "tenant": "acme", "allowed_tools": ["core__wait"]}],
    }
    since = mark()

    call_command("policy", "import", _policy_file(tmp_path, document), stdout=io.StringIO())

    entries = entries_since(since)
    assert [(c.action, c.origin, c.actor_kind, c.actor_id, c.object_label) for c in entries] == [
        ("tool.enable", "command", "command", OS_USER, "core__wait"),
        ("policy.create", "command", "command", OS_USER, "acme-default"),
    ]
    assert entries[1].tenant_id == acme.pk

    since = mark()
    call_command("policy", "import", _policy_file(tmp_path, document), stdout=io.StringIO())
    assert entries_since(since) == []  # nothing changed, nothing to remember


def test_a_refused_policy_import_leaves_no_entry(tmp_path, catalog):
    document = {
        "tools": {"core__wait": {"enabled": True}},
        "policies": [{"name": "ghost", "tenant": "no-such-tenant", "allowed_tools": ["core__wait"]}],
    }
    since = mark()

    with pytest.raises(CommandError):
        call_command("policy", "import", _policy_file(tmp_path, document), stdout=io.StringIO())

    assert entries_since(since) == []
    assert Tool.objects.get(pk="core__wait").is_enabled is False


def test_approvals_decide_command(acme):
    account, _key = service_account_with_key(acme, name="agent")
    approval = _open_approval(account)
    since = mark()

    call_command("approvals", "decide", str(approval.pk), "--deny", "--reason", "freeze", stdout=io.StringIO())

    entry = only_entry_since(since)
    assert (entry["action"], entry["origin"], entry["actor"][0], entry["after"]) == (
        "approval.denied",
        "command",
        "command",
        {"status": "denied", "decided_by_name": OS_USER, "reason": "freeze"},
    )


def test_create_service_account_command(acme):
    since = mark()

    call_command("create_service_account", "--tenant", "acme", "bot", stdout=io.StringIO(), stderr=io.StringIO())

    entry = only_entry_since(since)
    assert (entry["action"], entry["origin"], entry["actor"][0], entry["tenant_id"]) == (
        "service_account.create",
        "command",
        "command",
        acme.pk,
    )


def test_key_rotation_run_leaves_one_entry_with_its_counts(settings, acme):
    old_ring = {"k1": b"\x01" * 32}
    settings.TOOLGATE_KEY_RING = old_ring
    ConnectionFactory(tenant=acme)
    ConnectionFactory(tenant=acme)
    settings.TOOLGATE_KEY_RING = {"k2": b"\x02" * 32, **old_ring}
    since = mark()

    call_command("rotate_encryption_keys", stdout=io.StringIO(), stderr=io.StringIO())
    call_command("rotate_encryption_keys", "--dry-run", stdout=io.StringIO(), stderr=io.StringIO())

    assert only_entry_since(since) == {
        "action": "keys.rotate",
        "origin": "command",
        "actor": ("command", OS_USER),
        "object": ("connections_app.keyring", "k2"),
        "tenant_id": None,
        "before": {},
        "after": {
            "primary_key_id": "k2",
            "connections_rewrapped": 2,
            "connections_skipped": 0,
            "connections_failed": 0,
            "key_ids_in_use": ["k2"],
        },
    }
