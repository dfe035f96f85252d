"""Identity providers and role mappings as operators keep them: admin, sealing, key rotation, the change log."""

from __future__ import annotations

import hashlib
import io

import pytest
from django.core.management import call_command

from changes_app.models import Change
from identity_app.models import IdentityProvider, RoleMapping
from identity_app.services import provider_client_secret, provider_save
from tests.factories import TenantFactory, UserFactory

pytestmark = pytest.mark.django_db

SECRET = "s3cret-client-value-abcdef"
K1 = hashlib.sha256(b"sso test key k1").digest()
K2 = hashlib.sha256(b"sso test key k2").digest()


def operator():
    return UserFactory(username="root", is_staff=True, is_superuser=True)


def test_admin_adds_a_provider_with_a_sealed_secret_it_never_shows_again(client):
    client.force_login(operator())

    response = client.post(
        "/admin/identity_app/identityprovider/add/",
        {
            "slug": "okta",
            "display_name": "Okta",
            "issuer": "https://corp.okta.example/oauth2/default",
            "client_id": "0oa123",
            "client_secret": SECRET,
            "scopes": '["profile", "email", "groups"]',
            "username_claim": "preferred_username",
            "email_claim": "email",
            "groups_claim": "groups",
            "is_enabled": "on",
        },
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    provider = IdentityProvider.objects.get(slug="okta")
    assert SECRET.encode() not in bytes(provider.encrypted_client_secret)
    assert provider_client_secret(provider) == SECRET
    page = client.get(f"/admin/identity_app/identityprovider/{provider.pk}/change/").content.decode()
    assert SECRET not in page
    entry = Change.objects.get(action="sso.provider.save")
    assert (entry.origin, entry.actor_label, entry.after["issuer"]) == (
        "admin",
        "root",
        "https://corp.okta.example/oauth2/default",
    )
    assert SECRET not in str(entry.after)


def test_a_new_provider_without_a_secret_is_refused_by_the_form(client):
    client.force_login(operator())

    response = client.post(
        "/admin/identity_app/identityprovider/add/",
        {"slug": "g", "display_name": "Google", "issuer": "https://accounts.google.com", "client_id": "x"},
    )

    assert response.status_code == 200
    assert "A new provider needs its client secret." in response.content.decode()
    assert not IdentityProvider.objects.exists()


def test_role_mappings_edited_in_admin_are_in_the_change_log(client):
    client.force_login(operator())
    acme = TenantFactory(slug="acme")

    client.post(
        "/admin/identity_app/rolemapping/add/",
        {"group": "acme-admins", "operator_role": "", "tenant": acme.pk, "tenant_role": "owner"},
    )
    mapping = RoleMapping.objects.get()
    client.post(f"/admin/identity_app/rolemapping/{mapping.pk}/delete/", {"post": "yes"})

    assert list(Change.objects.order_by("id").values_list("action", flat=True)) == [
        "sso.role_mapping.save",
        "sso.role_mapping.delete",
    ]
    assert Change.objects.order_by("id").first().after == {
        "group": "acme-admins",
        "tenant": acme.pk,
        "tenant_role": "owner",
    } | {
        "is_staff": False,
        "operator_role": "",
        "provider": None,
    }
    assert not RoleMapping.objects.exists()


def test_a_mapping_that_grants_nothing_is_refused():
    with pytest.raises(Exception, match="grants nothing"):
        RoleMapping(group="nobody").full_clean()


def test_key_rotation_rewraps_identity_provider_secrets(settings):
    settings.TOOLGATE_KEY_RING = {"k1": K1}
    provider = provider_save(
        provider=IdentityProvider(
            slug="kc", display_name="Keycloak", issuer="https://kc.example/realms/x", client_id="t"
        ),
        client_secret=SECRET,
    )
    assert provider.encryption_key_id == "k1"

    settings.TOOLGATE_KEY_RING = {"k2": K2, "k1": K1}
    out = io.StringIO()
    call_command("rotate_encryption_keys", stdout=out, stderr=io.StringIO())

    provider.refresh_from_db()
    assert provider.encryption_key_id == "k2"
    assert "identity provider client secrets: rewrapped 1" in out.getvalue()
    settings.TOOLGATE_KEY_RING = {"k2": K2}
    assert provider_client_secret(provider) == SECRET


def test_the_permission_sets_command_builds_the_groups():
    out = io.StringIO()
    call_command("sso_permission_sets", stdout=out)

    assert [line.split(":")[0] for line in out.getvalue().splitlines()] == ["viewer", "approver", "tool_admin"]
    assert "approver: Toolgate approver (2 permissions)" in out.getvalue()
