"""Reading the change log: the read-only admin, the tenant's page, the JSON-lines export, and no secret anywhere."""

from __future__ import annotations

import io
import json
from datetime import datetime, time, timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from changes_app.context import Actor, change_source
from changes_app.kinds import ActorKind, Origin
from changes_app.models import Change
from changes_app.services import ObjectRef, change_record
from connections_app.models import Connection
from connections_app.services import grant_create
from tests.factories import ConnectionFactory, GrantFactory, TenantFactory, service_account_with_key
from tests.support.api import api_client
from tests.support.web import member_client

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:changes_app_change_changelist")
CANARY = "ghp_changelogcanary7c1d9e2f"
CANARY_PASSWORD = "pw-changelogcanary-4b8a"


def _switch(tool_id: str, *, origin: str = Origin.ADMIN, actor: str = "olivia") -> Change:
    with change_source(origin, Actor(kind=ActorKind.USER, id="1", label=actor)), transaction.atomic():
        change = change_record(
            action="tool.enable",
            obj=ObjectRef(type="tools_app.tool", id=tool_id, label=tool_id),
            before={"is_enabled": False},
            after={"is_enabled": True},
        )
    assert change is not None
    return change


def _listed(response) -> list[str]:
    return sorted(change.object_id for change in response.context["cl"].result_list)


# --- admin ----------------------------------------------------------------------------------


def test_admin_lists_and_filters_by_origin_object_type_actor_and_date(admin_client):
    _switch("core__wait", origin=Origin.ADMIN, actor="olivia")
    _switch("core__get_current_time", origin=Origin.COMMAND, actor="os:ops")
    old = _switch("github__get_user", actor="olivia")
    Change.objects.filter(pk=old.pk).update(at=timezone.now() - timedelta(days=30))

    everything = admin_client.get(CHANGELIST)
    by_origin = admin_client.get(CHANGELIST, {"origin__exact": "command"})
    by_type = admin_client.get(CHANGELIST, {"object_type__exact": "tools_app.tool"})
    by_actor = admin_client.get(CHANGELIST, {"actor_label": "olivia"})
    midnight = timezone.make_aware(datetime.combine(timezone.localdate(), time()))
    by_date = admin_client.get(CHANGELIST, {"at__gte": str(midnight), "at__lt": str(midnight + timedelta(days=1))})

    assert [r.status_code for r in (everything, by_origin, by_type, by_actor, by_date)] == [200] * 5
    assert _listed(everything) == ["core__get_current_time", "core__wait", "github__get_user"]
    assert _listed(by_origin) == ["core__get_current_time"]
    assert _listed(by_type) == ["core__get_current_time", "core__wait", "github__get_user"]
    assert _listed(by_actor) == ["core__wait", "github__get_user"]
    assert _listed(by_date) == ["core__get_current_time", "core__wait"]


def test_admin_is_read_only(admin_client):
    change = _switch("core__wait")
    change_url = reverse("admin:changes_app_change_change", args=[change.pk])

    add = admin_client.get(reverse("admin:changes_app_change_add"))
    view = admin_client.get(change_url)
    edit = admin_client.post(change_url, {"action": "tool.disable", "object_id": "forged"})
    delete = admin_client.post(reverse("admin:changes_app_change_delete", args=[change.pk]), {"post": "yes"})
    bulk = admin_client.post(CHANGELIST, {"action": "delete_selected", "_selected_action": [change.pk], "post": "yes"})

    assert (add.status_code, view.status_code, edit.status_code, delete.status_code) == (403, 200, 403, 403)
    assert "tool.enable" in view.content.decode()
    assert 'name="_save"' not in view.content.decode()
    assert bulk.status_code in (200, 302)
    change.refresh_from_db()
    assert (change.action, change.object_id) == ("tool.enable", "core__wait")
    assert Change.objects.count() == 1


# --- tenant UI ------------------------------------------------------------------------------


def test_a_member_reads_its_tenants_entries_and_no_other(client):
    acme, globex = TenantFactory(slug="acme"), TenantFactory(slug="globex")
    ConnectionFactory(tenant=acme, label="acme-bot")
    ConnectionFactory(tenant=globex, label="globex-bot")
    _switch("core__wait")  # no tenant: an operator's switch is not a tenant's entry
    member, _user = member_client(acme)

    response = member.get(reverse("web:change-list"))

    html = response.content.decode()
    assert response.status_code == 200
    assert [change.object_label for change in response.context["page"].object_list] == [
        str(Connection.objects.get(label="acme-bot"))
    ]
    assert "connection.create" in html
    assert "acme-bot" in html
    assert "globex-bot" not in html
    assert "core__wait" not in html
    assert 'aria-current="page">Change log<' in html


def test_the_page_needs_a_login(client):
    response = client.get(reverse("web:change-list"))

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("web:login"))


# --- export ---------------------------------------------------------------------------------


def test_export_writes_json_lines_since_a_moment_oldest_first():
    early = _switch("core__wait")
    Change.objects.filter(pk=early.pk).update(at=timezone.now() - timedelta(days=3))
    first = _switch("core__get_current_time")
    second = _switch("github__get_user", origin=Origin.COMMAND)
    out, err = io.StringIO(), io.StringIO()

    call_command(
        "changes", "export", "--since", (timezone.now() - timedelta(days=1)).isoformat(), stdout=out, stderr=err
    )

    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["id"] for line in lines] == [first.pk, second.pk]
    assert lines[1] == {
        "id": second.pk,
        "at": second.at.isoformat(),
        "action": "tool.enable",
        "origin": "command",
        "actor": {"kind": "user", "id": "1", "label": "olivia"},
        "request_id": "",
        "object": {"type": "tools_app.tool", "id": "github__get_user", "label": "github__get_user", "tenant_id": None},
        "before": {"is_enabled": False},
        "after": {"is_enabled": True},
        "links": {},
    }
    assert err.getvalue().startswith("2 entries since ")


def test_export_accepts_a_date_and_refuses_what_is_not_one():
    _switch("core__wait")
    out = io.StringIO()

    call_command("changes", "export", "--since", timezone.localdate().isoformat(), stdout=out, stderr=io.StringIO())

    assert len(out.getvalue().splitlines()) == 1
    with pytest.raises(CommandError, match="is not an ISO date or date-time"):
        call_command("changes", "export", "--since", "last tuesday", stdout=io.StringIO(), stderr=io.StringIO())
    with pytest.raises(CommandError, match="--since"):
        call_command("changes", "export", stdout=io.StringIO(), stderr=io.StringIO())


# --- secrets --------------------------------------------------------------------------------


def test_no_secret_reaches_an_entry_the_admin_the_page_or_the_export(admin_client):
    acme = TenantFactory(slug="acme")
    member, _user = member_client(acme)
    manager, manager_key = service_account_with_key(acme, name="ops", scopes=("connections:manage",))
    member.post(
        reverse("web:connection-new") + "?type=app_password",
        {"provider": "github", "label": "ui", "username": "bot", "password": CANARY_PASSWORD, "expires_at": ""},
    )
    api_client(manager_key).post(
        "/api/v1/connections",
        {"provider": "github", "credential_type": "api_key", "credentials": {"api_key": CANARY}},
        format="json",
    )
    created = member.post(reverse("web:service-account-new"), {"name": "agent", "scopes": ["tools:exec"]})
    agent_key = created.context["key"]
    connection = ConnectionFactory(tenant=acme, credentials={"api_key": CANARY})
    GrantFactory(service_account=manager, connections=[connection])
    out = io.StringIO()

    call_command("changes", "export", "--since", "2000-01-01", stdout=out, stderr=io.StringIO())
    rows = json.dumps(list(Change.objects.values()), default=str)
    pages = admin_client.get(CHANGELIST).content.decode() + member.get(reverse("web:change-list")).content.decode()
    details = "".join(
        admin_client.get(reverse("admin:changes_app_change_change", args=[pk])).content.decode()
        for pk in Change.objects.values_list("pk", flat=True)
    )

    assert Change.objects.filter(action="connection.create").count() == 3
    assert Change.objects.filter(action="service_account.create").count() == 2
    for secret in (CANARY, CANARY_PASSWORD, manager_key, agent_key, manager_key.split("_", 2)[2]):
        for where, text in (("rows", rows), ("export", out.getvalue()), ("pages", pages), ("details", details)):
            assert secret not in text, f"a secret reached the change log's {where}"
    assert "encrypted_credentials" not in rows
    assert "key_digest" not in rows


def test_the_page_names_accounts_connections_tenants_and_grants_with_their_ids_on_hover(django_assert_max_num_queries):
    # given a grant created through the service: its entry holds the tenant's, account's and connection's ids
    acme = TenantFactory(slug="acme")
    account, _key = service_account_with_key(acme, name="release-bot")
    connection = ConnectionFactory(tenant=acme, label="Work GitHub")
    grant = grant_create(tenant=acme, service_account=account, connections=[connection])
    client, _user = member_client(acme)

    # when
    with django_assert_max_num_queries(14):
        html = client.get(reverse("web:change-list")).content.decode()

    # then names are shown, ids only in the title attributes
    entry = html.split(f'title="connections_app.executiongrant {grant.pk}"', 1)[1].split("</tr>", 1)[0]
    assert entry.startswith(">grant to release-bot</span>")
    assert f'<span class="named-id" title="{account.pk}">release-bot</span>' in entry
    assert f'<span class="named-id" title="{connection.pk}">Work GitHub</span>' in entry
    assert f'<span class="named-id" title="{acme.pk}">acme</span>' in entry
    assert f">{account.pk}<" not in html
    assert f">{connection.pk}<" not in html
