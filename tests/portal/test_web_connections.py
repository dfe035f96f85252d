"""Connections in the tenant UI: list, add an API key or app password, detail, revoke with confirmation."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from connections_app.credentials import APP_CREDENTIAL_CHARACTERS_MESSAGE, KEY_CHARACTERS_MESSAGE
from connections_app.models import Connection, ConnectionEvent
from connections_app.services import connection_credentials_open
from tests.factories import ConnectionFactory, GrantFactory, TenantFactory, service_account_with_key
from tests.support.web import member_client

pytestmark = pytest.mark.django_db

LIST = reverse("web:connection-list")
NEW_API_KEY = reverse("web:connection-new") + "?type=api_key"
NEW_APP_PASSWORD = reverse("web:connection-new") + "?type=app_password"
SECRET = "ghp_s3cret-value-91b2c4"


@pytest.fixture
def acme():
    return TenantFactory(slug="acme", name="Acme Corp")


@pytest.fixture
def member(acme):
    return member_client(acme)


def test_list_shows_every_column_and_no_secret(acme, member):
    client, user = member
    connection = ConnectionFactory(
        tenant=acme,
        label="release bot",
        credentials={"api_key": SECRET},
        scopes=["repo", "read:user"],
        created_by=user,
        expires_at=timezone.now() + timedelta(days=30),
    )

    response = client.get(LIST)

    assert response.status_code == 200
    assert list(response.context["connections"]) == [connection]
    html = response.content.decode()
    for text in ("release bot", "github", "API key", "badge-active", "read:user", "repo", user.username, "never"):
        assert text in html
    assert reverse("web:connection-detail", args=[connection.pk]) in html
    assert SECRET not in html


def test_empty_list_says_so_and_offers_both_kinds_of_connection(member):
    client, _user = member

    html = client.get(LIST).content.decode()

    assert "No connections yet" in html
    assert 'href="/connections/new/?type=api_key"' in html
    assert 'href="/connections/new/?type=app_password"' in html


def test_add_api_key_stores_it_encrypted_and_lists_it_without_the_secret(acme, member):
    client, user = member

    response = client.post(
        NEW_API_KEY,
        {
            "provider": "github",
            "label": "release bot",
            "api_key": SECRET,
            "scopes": "repo, read:user ,",
            "expires_at": "",
        },
        follow=True,
    )

    assert response.redirect_chain == [(LIST, 302)]
    connection = Connection.objects.get()
    assert (connection.tenant, connection.provider, connection.credential_type, connection.label) == (
        acme,
        "github",
        "api_key",
        "release bot",
    )
    assert (connection.scopes, connection.created_by, connection.expires_at) == (["read:user", "repo"], user, None)
    assert connection_credentials_open(connection) == {"api_key": SECRET}
    assert SECRET.encode() not in bytes(connection.encrypted_credentials)
    html = response.content.decode()
    assert "Connection “release bot” added." in html
    assert "release bot" in html
    assert SECRET not in html
    assert list(ConnectionEvent.objects.values_list("kind", "actor")) == [("created", user.pk)]


def test_add_app_password_with_expiry(acme, member):
    client, _user = member
    expires = (timezone.now() + timedelta(days=7)).replace(second=0, microsecond=0)

    response = client.post(
        NEW_APP_PASSWORD,
        {
            "provider": "github",
            "label": "bot login",
            "username": "octo-bot",
            "password": " pass word ",
            "expires_at": expires.strftime("%Y-%m-%dT%H:%M"),
        },
    )

    assert response.status_code == 302
    connection = Connection.objects.get()
    assert (connection.credential_type, connection.expires_at) == ("app_password", expires)
    assert connection_credentials_open(connection) == {"username": "octo-bot", "password": " pass word "}


@pytest.mark.parametrize(
    ("form", "fields", "field", "message"),
    [
        (NEW_API_KEY, {"api_key": "ghp_éx"}, "api_key", KEY_CHARACTERS_MESSAGE),
        (
            NEW_APP_PASSWORD,
            {"username": "octo-bot", "password": "pässword"},
            "password",
            APP_CREDENTIAL_CHARACTERS_MESSAGE,
        ),
    ],
    ids=["api-key", "app-password"],
)
def test_a_credential_http_cannot_carry_is_refused_on_the_form(member, form, fields, field, message):
    # `ghp_éx` used to be stored, and every call with it then failed with 502
    client, _user = member

    response = client.post(form, {"provider": "github", "label": "", "scopes": "", "expires_at": "", **fields})

    assert response.status_code == 200
    assert response.context["form"].errors == {field: [message]}
    assert Connection.objects.count() == 0
    assert fields[field] not in response.content.decode()


def test_form_pages_label_every_input_and_never_prefill_a_secret(member):
    client, _user = member

    api_key_form = client.get(NEW_API_KEY).content.decode()
    app_password_form = client.get(NEW_APP_PASSWORD).content.decode()

    for name in ("provider", "label", "api_key", "scopes", "expires_at"):
        assert f'<label for="id_{name}"' in api_key_form
    for name in ("username", "password"):
        assert f'<label for="id_{name}"' in app_password_form
    assert 'type="password" name="api_key"' in api_key_form
    assert 'type="password" name="password"' in app_password_form
    assert '<option value="github">github</option>' in api_key_form


def test_unknown_credential_type_is_not_found(member):
    client, _user = member

    assert client.get(reverse("web:connection-new") + "?type=oauth2").status_code == 404
    assert client.post(reverse("web:connection-new") + "?type=oauth2", {"provider": "github"}).status_code == 404
    assert not Connection.objects.exists()


def test_a_form_shown_again_after_an_error_does_not_contain_the_secret(member):
    client, _user = member

    response = client.post(
        NEW_API_KEY,
        {"provider": "github", "label": "late", "api_key": SECRET, "expires_at": "2001-01-01T00:00"},
    )

    assert response.status_code == 200
    assert response.context["form"].errors == {"expires_at": ["must be in the future"]}
    html = response.content.decode()
    assert 'value="late"' in html  # the harmless fields are kept for the next try
    assert SECRET not in html
    assert not Connection.objects.exists()


def test_service_errors_about_credentials_land_on_their_field_without_the_value(member):
    client, _user = member
    bad_secret = "ghp_has\x07bell"

    response = client.post(NEW_API_KEY, {"provider": "github", "label": "x", "api_key": bad_secret})

    assert response.status_code == 200
    assert list(response.context["form"].errors) == ["api_key"]
    assert "ghp_has" not in response.content.decode()
    assert not Connection.objects.exists()


def test_unknown_provider_is_refused_by_the_form(member):
    client, _user = member

    response = client.post(NEW_API_KEY, {"provider": "gitlab", "label": "x", "api_key": SECRET})

    assert response.status_code == 200
    assert list(response.context["form"].errors) == ["provider"]
    assert SECRET not in response.content.decode()
    assert not Connection.objects.exists()


def test_detail_shows_metadata_events_and_the_grants_that_use_it(acme, member):
    client, user = member
    connection = ConnectionFactory(tenant=acme, label="release bot", credentials={"api_key": SECRET}, created_by=user)
    account, _key = service_account_with_key(acme, name="support-agent")
    GrantFactory(service_account=account, connections=[connection])
    other_account, _key = service_account_with_key(acme, name="unrelated")
    GrantFactory(service_account=other_account, connections=[ConnectionFactory(tenant=acme)])

    response = client.get(reverse("web:connection-detail", args=[connection.pk]))

    assert response.status_code == 200
    assert [grant.service_account.name for grant in response.context["grants"]] == ["support-agent"]
    assert [event.kind for event in response.context["events"]] == ["created"]
    html = response.content.decode()
    assert str(connection.pk) in html
    assert "support-agent" in html
    assert "unrelated" not in html
    assert SECRET not in html


def test_revoke_get_only_asks_for_confirmation(acme, member):
    client, _user = member
    connection = ConnectionFactory(tenant=acme, label="release bot")
    account, _key = service_account_with_key(acme, name="agent")
    GrantFactory(service_account=account, connections=[connection])

    response = client.get(reverse("web:connection-revoke", args=[connection.pk]))

    assert response.status_code == 200
    html = response.content.decode()
    assert "Revoke connection “release bot”?" in html
    assert 'class="confirm-form' in html
    assert ("Used by grants", "1") in response.context["details"]
    connection.refresh_from_db()
    assert (connection.status, connection.revoked_at, connection.revoked_by) == ("active", None, None)
    assert list(ConnectionEvent.objects.values_list("kind", flat=True)) == ["created"]


def test_revoke_post_revokes_and_records_who_and_when(acme, member):
    client, user = member
    connection = ConnectionFactory(tenant=acme, label="release bot")
    before = timezone.now()

    response = client.post(reverse("web:connection-revoke", args=[connection.pk]), follow=True)

    assert response.redirect_chain == [(LIST, 302)]
    assert "Connection “release bot” revoked." in response.content.decode()
    connection.refresh_from_db()
    assert (connection.status, connection.revoked_by) == ("revoked", user)
    assert before <= connection.revoked_at <= timezone.now()
    assert list(ConnectionEvent.objects.order_by("id").values_list("kind", "actor")) == [
        ("created", None),
        ("revoked", user.pk),
    ]
    detail = client.get(reverse("web:connection-detail", args=[connection.pk])).content.decode()
    assert user.username in detail
    assert "Revoke…" not in detail


def test_revoking_twice_changes_nothing_the_second_time(acme, member):
    client, _user = member
    connection = ConnectionFactory(tenant=acme)
    url = reverse("web:connection-revoke", args=[connection.pk])
    client.post(url)
    connection.refresh_from_db()
    first_revoked_at = connection.revoked_at

    again = client.post(url, follow=True)
    confirm = client.get(url)

    assert "already revoked" in again.content.decode()
    assert "already revoked" in confirm.content.decode()
    assert 'class="confirm-form' not in confirm.content.decode()
    connection.refresh_from_db()
    assert connection.revoked_at == first_revoked_at
    assert ConnectionEvent.objects.filter(kind="revoked").count() == 1


def test_a_connection_needing_attention_shows_why_and_offers_a_reconnect(acme, member):
    # given an OAuth connection whose refreshes failed eight times, the last on a timeout
    client, _user = member
    connection = ConnectionFactory(tenant=acme, label="release bot", credentials={"api_key": SECRET})
    Connection.objects.filter(pk=connection.pk).update(
        credential_type=Connection.CredentialType.OAUTH2,
        status=Connection.Status.NEEDS_ATTENTION,
        refresh_failures=8,
        last_refresh_error="timeout",
        next_refresh_at=None,
    )
    reconnect = f"{reverse('web:oauth-start', args=['github'])}?reconnect={connection.pk}"

    listing = client.get(LIST).content.decode()
    detail = client.get(reverse("web:connection-detail", args=[connection.pk])).content.decode()

    # then both pages name the status, the error's category and its code, and link to a reconnect
    for html in (listing, detail):
        assert "badge-needs_attention" in html
        assert "Needs attention" in html
        assert "provider unreachable" in html
        assert "timeout" in html
        assert reconnect in html
    assert "failed 8 times in a row" in detail
    assert "background refresh has stopped" in detail
    assert SECRET not in listing + detail


def test_an_active_oauth_connection_with_one_failure_shows_the_next_try(acme, member):
    client, _user = member
    connection = ConnectionFactory(tenant=acme, label="release bot")
    Connection.objects.filter(pk=connection.pk).update(
        credential_type=Connection.CredentialType.OAUTH2,
        refresh_failures=1,
        last_refresh_error="server_error",
        next_refresh_at=timezone.now() + timedelta(minutes=1),
    )

    detail = client.get(reverse("web:connection-detail", args=[connection.pk])).content.decode()

    assert "failed 1 time in a row: provider error" in detail
    assert "next try" in detail
    assert "?reconnect=" not in detail
