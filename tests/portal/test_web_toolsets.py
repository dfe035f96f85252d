"""The portal's toolsets page: members read, owners write; another tenant's rows are never reached."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.urls import reverse

from changes_app.models import Change
from tests.factories import MembershipFactory, TenantFactory, UserFactory
from tests.support.web import member_client
from tools_app.models import Toolset
from tools_app.toolsets import toolset_save

pytestmark = pytest.mark.django_db

LIST = reverse("web:toolset-list")
NEW = reverse("web:toolset-new")


@pytest.fixture
def acme():
    call_command("sync_tools", stdout=io.StringIO())
    return TenantFactory(slug="acme", name="Acme Corp")


@pytest.fixture
def owner(acme):
    user = UserFactory(username="olive")
    MembershipFactory(tenant=acme, user=user, role="owner")
    return member_client(acme, user=user)[0]


@pytest.fixture
def member(acme):
    user = UserFactory(username="mia")
    MembershipFactory(tenant=acme, user=user, role="member")
    return member_client(acme, user=user)[0]


def test_an_owner_creates_edits_and_deletes_a_toolset(acme, owner):
    response = owner.post(
        NEW, {"name": "clock", "description": "time things", "tool_ids": ["core__wait"], "tags": "time, github"}
    )
    assert response.status_code == 302, response.content.decode()
    toolset = Toolset.objects.get(tenant=acme, name="clock")
    assert (toolset.tool_ids, toolset.tags) == (["core__wait"], ["github", "time"])

    response = owner.post(
        reverse("web:toolset-edit", args=[toolset.pk]), {"name": "clock", "tool_ids": [], "tags": "time"}
    )
    assert response.status_code == 302
    toolset.refresh_from_db()
    assert (toolset.tool_ids, toolset.tags, toolset.description) == ([], ["time"], "")

    assert owner.post(reverse("web:toolset-delete", args=[toolset.pk])).status_code == 302
    assert not Toolset.objects.exists()
    changes = Change.objects.filter(object_type="tools_app.toolset").order_by("id")
    assert list(changes.values_list("action", "origin")) == [
        ("toolset.create", "tenant_ui"),
        ("toolset.update", "tenant_ui"),
        ("toolset.delete", "tenant_ui"),
    ]


def test_the_list_shows_own_and_global_toolsets_never_another_tenants(acme, member):
    toolset_save(tenant_id=acme.pk, name="mine", tool_ids=["core__wait"])
    toolset_save(tenant_id=None, name="everyones", tool_ids=["core__get_current_time"])
    toolset_save(tenant_id=TenantFactory(slug="globex").pk, name="globex-secret", tool_ids=["core__wait"])

    html = member.get(LIST).content.decode()

    assert "mine" in html
    assert "everyones" in html
    assert "globex-secret" not in html
    assert "New toolset" not in html  # a plain member does not write


def test_a_plain_member_cannot_write_and_nothing_changes(acme, member):
    toolset = toolset_save(tenant_id=acme.pk, name="mine", tool_ids=["core__wait"])

    assert member.post(NEW, {"name": "x", "tool_ids": ["core__wait"]}).status_code == 403
    assert member.post(reverse("web:toolset-delete", args=[toolset.pk])).status_code == 403
    assert list(Toolset.objects.values_list("name", flat=True)) == ["mine"]


def test_another_tenants_or_a_global_toolset_is_not_found_for_editing(acme, owner):
    theirs = toolset_save(tenant_id=TenantFactory(slug="globex").pk, name="theirs", tool_ids=["core__wait"])
    everyones = toolset_save(tenant_id=None, name="everyones", tool_ids=["core__wait"])

    for toolset in (theirs, everyones):
        assert owner.get(reverse("web:toolset-edit", args=[toolset.pk])).status_code == 404
        assert owner.post(reverse("web:toolset-delete", args=[toolset.pk])).status_code == 404
    assert Toolset.objects.count() == 2


def test_a_bad_toolset_is_refused_with_the_reason(acme, owner):
    response = owner.post(NEW, {"name": "clock", "tags": "Not A Tag"})

    assert response.status_code == 400
    assert "tags must be" in response.content.decode()
    assert not Toolset.objects.exists()


def test_a_member_is_told_why_toolsets_cannot_be_changed_and_an_owner_is_not(acme, member, owner):
    note = "You are a member of Acme Corp: you can use these toolsets; only its owners create, edit or delete them."

    refused = member.get(NEW)

    assert note in member.get(LIST).content.decode()
    assert note not in owner.get(LIST).content.decode()
    assert refused.status_code == 403
    page = refused.content.decode()
    assert "You are a member of <strong>Acme Corp</strong>, not an owner" in page
    assert f'href="{LIST}">Back</a>' in page
