"""Grants and service accounts in the tenant UI."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from connections_app.models import ExecutionGrant
from connections_app.services import connection_create
from policies_app.keys import key_matches
from policies_app.models import ServiceAccount
from policies_app.selectors import caller_for_key
from tests.factories import ConnectionFactory, GrantFactory, MembershipFactory, TenantFactory, service_account_with_key
from tests.support.web import member_client

pytestmark = pytest.mark.django_db

GRANTS = reverse("web:grant-list")
NEW_GRANT = reverse("web:grant-new")
ACCOUNTS = reverse("web:service-account-list")
NEW_ACCOUNT = reverse("web:service-account-new")


@pytest.fixture
def acme():
    return TenantFactory(slug="acme", name="Acme Corp")


@pytest.fixture
def member(acme):
    return member_client(acme)


# --- grants ---------------------------------------------------------------------------------


def test_grant_form_offers_only_live_accounts_and_connections_of_the_tenant(acme, member):
    client, _user = member
    live, _key = service_account_with_key(acme, name="agent")
    gone, _key = service_account_with_key(acme, name="retired")
    gone.revoked_at = timezone.now()
    gone.save()
    usable = ConnectionFactory(tenant=acme, label="usable")
    revoked = ConnectionFactory(tenant=acme, label="revoked-one")
    revoked.revoked_at, revoked.status = timezone.now(), "revoked"
    revoked.save()
    other = TenantFactory(slug="globex")
    service_account_with_key(other, name="globex-agent")
    ConnectionFactory(tenant=other, label="globex-conn")

    response = client.get(NEW_GRANT)

    form = response.context["form"]
    assert list(form.fields["service_account"].queryset) == [live]
    assert list(form.fields["connections"].queryset) == [usable]
    html = response.content.decode()
    for hidden in ("retired", "revoked-one", "globex-agent", "globex-conn"):
        assert hidden not in html
    assert '<label for="id_service_account"' in html
    assert '<label for="id_connections_0"' in html


def test_create_grant_for_a_service_account(acme, member):
    client, user = member
    account, _key = service_account_with_key(acme, name="agent")
    first, second = ConnectionFactory(tenant=acme), ConnectionFactory(tenant=acme)
    expires = (timezone.now() + timedelta(days=2)).replace(second=0, microsecond=0)

    response = client.post(
        NEW_GRANT,
        {
            "service_account": account.pk,
            "connections": [first.pk, second.pk],
            "expires_at": expires.strftime("%Y-%m-%dT%H:%M"),
        },
        follow=True,
    )

    assert response.redirect_chain == [(GRANTS, 302)]
    grant = ExecutionGrant.objects.get()
    assert (grant.tenant, grant.service_account, grant.created_by, grant.expires_at) == (acme, account, user, expires)
    assert set(grant.connections.all()) == {first, second}
    assert "Grant for “agent” created." in response.content.decode()


def test_create_grant_refuses_another_tenants_connection(acme, member):
    client, _user = member
    account, _key = service_account_with_key(acme, name="agent")
    foreign = ConnectionFactory(tenant=TenantFactory(slug="globex"))

    response = client.post(NEW_GRANT, {"service_account": account.pk, "connections": [foreign.pk]})

    assert response.status_code == 200
    assert list(response.context["form"].errors) == ["connections"]
    assert not ExecutionGrant.objects.exists()


def test_create_grant_shows_the_services_refusal(acme, member):
    client, _user = member
    account, _key = service_account_with_key(acme, name="agent")
    connection = ConnectionFactory(tenant=acme)

    response = client.post(
        NEW_GRANT,
        {"service_account": account.pk, "connections": [connection.pk], "expires_at": "2001-01-01T00:00"},
    )

    assert response.status_code == 200
    assert response.context["form"].non_field_errors() == ["expires_at is in the past"]
    assert not ExecutionGrant.objects.exists()


def test_grant_list_and_revoke_with_confirmation(acme, member):
    client, user = member
    account, _key = service_account_with_key(acme, name="agent")
    connection = ConnectionFactory(tenant=acme, label="release bot")
    grant = GrantFactory(service_account=account, connections=[connection])
    url = reverse("web:grant-revoke", args=[grant.pk])

    listed = client.get(GRANTS)
    confirm = client.get(url)
    grant.refresh_from_db()
    revoked_after_get = grant.revoked_at
    done = client.post(url, follow=True)

    assert [row for row, _connections in listed.context["grants"]] == [grant]
    assert "release bot" in listed.content.decode()
    # the whole id, as a service sends it, selectable in one click (no truncated copy)
    assert f'<code class="small copyable" data-grant-id="{grant.pk}"' in listed.content.decode()
    assert f">{grant.pk}</code>" in listed.content.decode()
    assert url in listed.content.decode()
    assert "Revoke grant “for agent”?" in confirm.content.decode()
    assert revoked_after_get is None
    assert done.redirect_chain == [(GRANTS, 302)]
    grant.refresh_from_db()
    assert grant.revoked_by == user
    assert grant.revoked_at is not None
    assert "badge-revoked" in done.content.decode()


# --- service accounts -------------------------------------------------------------------


def test_service_account_key_is_shown_once_and_never_again(acme, member):
    client, user = member

    created = client.post(NEW_ACCOUNT, {"name": "support-agent", "scopes": ["tools:exec", "connections:manage"]})

    assert created.status_code == 201
    assert "no-store" in created.headers["Cache-Control"]
    account = ServiceAccount.objects.get()
    key = created.context["key"]
    assert key_matches(key, account.key_digest)
    assert (account.tenant, account.name, account.scopes, account.created_by) == (
        acme,
        "support-agent",
        ["connections:manage", "tools:exec"],
        user,
    )
    assert key in created.content.decode()
    assert caller_for_key(key=key).name == "support-agent"
    for url in (ACCOUNTS, NEW_ACCOUNT, GRANTS, reverse("web:connection-list"), reverse("web:activity")):
        assert key not in client.get(url).content.decode(), url
    assert all(key not in str(value) for value in client.session.values())


def test_service_account_list_shows_scopes_and_revoked_accounts(acme, member):
    client, _user = member
    service_account_with_key(acme, name="alpha")
    gone, _key = service_account_with_key(acme, name="beta", scopes=("connections:manage",))
    gone.revoked_at = timezone.now()
    gone.save()

    response = client.get(ACCOUNTS)

    assert [account.name for account in response.context["accounts"]] == ["alpha", "beta"]
    html = response.content.decode()
    assert "connections:manage" in html
    assert "badge-revoked" in html
    assert reverse("web:service-account-revoke", args=[gone.pk]) not in html


def test_duplicate_service_account_name_is_a_field_error(acme, member):
    client, _user = member
    service_account_with_key(acme, name="agent")

    response = client.post(NEW_ACCOUNT, {"name": "agent", "scopes": ["tools:exec"]})

    assert response.status_code == 200
    assert "key" not in response.context
    assert response.context["form"].errors == {
        "name": ["A service account with this name already exists in this tenant."]
    }
    assert ServiceAccount.objects.count() == 1


def test_a_tenant_creates_an_account_that_reads_every_call_record(member):
    client, _user = member

    page = client.get(NEW_ACCOUNT).content.decode()
    created = client.post(NEW_ACCOUNT, {"name": "auditor", "scopes": ["invocations:read"]})

    assert 'value="invocations:read"' in page
    assert created.status_code == 201
    assert ServiceAccount.objects.get().scopes == ["invocations:read"]


def test_service_account_needs_a_scope(member):
    client, _user = member

    response = client.post(NEW_ACCOUNT, {"name": "agent"})

    assert list(response.context["form"].errors) == ["scopes"]
    assert not ServiceAccount.objects.exists()


def test_service_account_revoke_with_confirmation(acme, member):
    client, user = member
    account, key = service_account_with_key(acme, name="agent")
    url = reverse("web:service-account-revoke", args=[account.pk])

    confirm = client.get(url)
    account.refresh_from_db()
    revoked_after_get = account.revoked_at
    done = client.post(url, follow=True)

    assert "Revoke service account “agent”?" in confirm.content.decode()
    assert revoked_after_get is None
    assert done.redirect_chain == [(ACCOUNTS, 302)]
    assert "Service account “agent” revoked." in done.content.decode()
    account.refresh_from_db()
    assert account.revoked_by == user
    assert caller_for_key(key=key) is None


def test_another_members_personal_connection_is_unnamed_in_grants_and_the_change_log(acme):
    # given a grant that covers another member's personal connection, created through the service
    client, _user = member_client(acme, user=MembershipFactory(tenant=acme, role="member").user)
    other_client, other = member_client(acme, user=MembershipFactory(tenant=acme, role="member").user)
    owner_client, _owner = member_client(acme, user=MembershipFactory(tenant=acme, role="owner").user)
    account, _key = service_account_with_key(acme, name="agent")
    personal = connection_create(
        tenant=acme,
        provider="github",
        credential_type="api_key",
        credentials={"api_key": "ghp_personalToken123"},
        label="Alex's private GitHub",
        created_by=other,
        owner=other,
    )
    GrantFactory(service_account=account, connections=[personal])

    # when the plain member, the connection's owner and a tenant owner look
    member_view = client.get(GRANTS).content.decode() + client.get(reverse("web:change-list")).content.decode()
    its_owner_view = other_client.get(GRANTS).content.decode()
    owner_view = (
        owner_client.get(GRANTS).content.decode() + owner_client.get(reverse("web:change-list")).content.decode()
    )

    # then only the plain member sees it unnamed
    assert "Alex&#x27;s private GitHub" not in member_view
    assert "another member's personal connection" in member_view
    assert reverse("web:connection-detail", args=[personal.pk]) not in member_view
    assert "Alex&#x27;s private GitHub" in its_owner_view
    assert owner_view.count("Alex&#x27;s private GitHub") >= 2  # the grant and the change log entry


# --- only owners create, scope and revoke service accounts ------------------------------------------------


@pytest.fixture
def plain_member(acme):
    return member_client(acme, user=MembershipFactory(tenant=acme, role="member").user)


@pytest.mark.parametrize(
    "scopes", [["tools:exec"], ["invocations:read"], ["connections:manage"], ["tools:exec", "connections:manage"]]
)
def test_a_plain_member_cannot_create_a_service_account_of_any_scope(plain_member, scopes):
    client, _user = plain_member

    page = client.get(NEW_ACCOUNT)
    created = client.post(NEW_ACCOUNT, {"name": "mine", "scopes": scopes})

    assert (page.status_code, created.status_code) == (403, 403)
    assert "Only owners change this" in created.content.decode()
    assert "key" not in created.context
    assert not ServiceAccount.objects.exists()


def test_a_plain_member_cannot_revoke_a_service_account(acme, plain_member):
    client, _user = plain_member
    account, key = service_account_with_key(acme, name="agent")
    url = reverse("web:service-account-revoke", args=[account.pk])

    shown = client.get(url)
    posted = client.post(url)

    assert (shown.status_code, posted.status_code) == (403, 403)
    account.refresh_from_db()
    assert (account.revoked_at, account.revoked_by) == (None, None)
    assert caller_for_key(key=key).name == "agent"


def test_a_plain_member_sees_the_accounts_without_the_owners_buttons(acme, plain_member):
    client, _user = plain_member
    account, _key = service_account_with_key(acme, name="agent")

    html = client.get(ACCOUNTS).content.decode()

    assert "agent" in html
    assert "Owners create and revoke them." in html
    assert NEW_ACCOUNT not in html
    assert reverse("web:service-account-revoke", args=[account.pk]) not in html


def test_an_owner_sees_the_create_and_revoke_buttons(acme, member):
    client, _user = member  # member_client's default membership is an owner's
    account, _key = service_account_with_key(acme, name="agent")

    html = client.get(ACCOUNTS).content.decode()

    assert NEW_ACCOUNT in html
    assert reverse("web:service-account-revoke", args=[account.pk]) in html
    assert "Owners create and revoke them." not in html


def test_another_tenants_account_is_not_found_for_an_owner_either(member):
    client, _user = member
    foreign, _key = service_account_with_key(TenantFactory(slug="globex"), name="theirs")

    response = client.post(reverse("web:service-account-revoke", args=[foreign.pk]))

    assert response.status_code == 404
    foreign.refresh_from_db()
    assert foreign.revoked_at is None
