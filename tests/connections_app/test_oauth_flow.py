"""The authorization-code flow in the tenant UI, against a fake OAuth provider on a real socket.

The browser's part (following redirects to the provider and back) is played
by the Django test client and an httpx client: the provider really issues the
code, and really verifies the PKCE verifier and the redirect URI.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from django.test import Client

from connections_app.models import Connection, ConnectionEvent
from connections_app.services import connection_credentials_open
from tests.factories import ConnectionFactory, MembershipFactory, TenantFactory, UserFactory
from tests.support.fake_oauth import CLIENT_ID, CLIENT_SECRET, FakeOAuthProvider

pytestmark = pytest.mark.django_db

START = "/connections/oauth/github/start"
CALLBACK = "/connections/oauth/callback"
REDIRECT_URI = "http://testserver/connections/oauth/callback"


@pytest.fixture
def provider():
    with FakeOAuthProvider() as fake:
        fake.register(scopes=("repo", "read:user"))
        yield fake


@pytest.fixture
def member():
    membership = MembershipFactory(tenant=TenantFactory(slug="acme"), user=UserFactory(username="alice"))
    client = Client()
    client.force_login(membership.user)
    return client, membership


def authorize(client: Client) -> tuple[str, dict[str, list[str]]]:
    """Start the flow and let the provider answer: (the authorize URL we sent, the callback's query)."""
    start = client.get(START)
    assert start.status_code == 302
    location = start["Location"]
    answer = httpx.get(location, follow_redirects=False)
    assert answer.status_code == 302
    return location, parse_qs(urlsplit(answer.headers["location"]).query)


def test_the_flow_sends_pkce_s256_and_stores_the_tokens_encrypted(provider, member):
    client, membership = member

    location, callback = authorize(client)
    response = client.get(CALLBACK, {"code": callback["code"][0], "state": callback["state"][0]})

    sent = parse_qs(urlsplit(location).query)
    assert sent["code_challenge_method"] == ["S256"]
    assert len(sent["code_challenge"][0]) == 43
    assert sent["redirect_uri"] == [REDIRECT_URI]
    assert sent["client_id"] == [CLIENT_ID]
    assert sent["scope"] == ["read:user repo"]
    assert response.status_code == 302
    assert response["Location"] == "/connections/"
    connection = Connection.objects.get()
    assert connection.tenant == membership.tenant
    assert connection.created_by == membership.user
    assert connection.credential_type == "oauth2"
    assert connection.scopes == ["read:user", "repo"]
    assert connection.expires_at is not None
    assert connection.next_refresh_at is not None
    credentials = connection_credentials_open(connection)
    assert provider.is_live_access_token(credentials["access_token"])
    assert credentials["access_token"].encode() not in bytes(connection.encrypted_credentials)
    assert provider.code_calls == 1


def test_a_reused_state_is_refused_without_a_second_exchange(provider, member):
    client, _ = member
    _location, callback = authorize(client)
    query = {"code": callback["code"][0], "state": callback["state"][0]}
    client.get(CALLBACK, query)

    again = client.get(CALLBACK, query)

    assert again.status_code == 400
    assert b"expired or was already used" in again.content
    assert provider.code_calls == 1
    assert Connection.objects.count() == 1


@pytest.mark.parametrize("state", ["", "forged-state-value", "x" * 500])
def test_a_missing_or_forged_state_is_refused_before_any_exchange(provider, member, state):
    client, _ = member
    _location, callback = authorize(client)

    response = client.get(CALLBACK, {"code": callback["code"][0], "state": state})

    assert response.status_code == 400
    assert provider.code_calls == 0
    assert Connection.objects.count() == 0


def test_a_state_from_another_session_is_refused(provider, member):
    client, membership = member
    _location, callback = authorize(client)
    other = Client()
    other.force_login(MembershipFactory(tenant=membership.tenant).user)

    response = other.get(CALLBACK, {"code": callback["code"][0], "state": callback["state"][0]})

    assert response.status_code == 400
    assert provider.code_calls == 0


def test_consent_denied_stores_nothing(provider, member):
    client, _ = member
    provider.auto_approve = False

    _location, callback = authorize(client)
    response = client.get(CALLBACK, {"error": callback["error"][0], "state": callback["state"][0]})

    assert response.status_code == 400
    assert b"declined" in response.content
    assert provider.code_calls == 0
    assert Connection.objects.count() == 0


def test_a_token_endpoint_error_is_a_friendly_400_and_stores_nothing(provider, member):
    client, _ = member
    _location, callback = authorize(client)
    provider.fail_status = 500

    response = client.get(CALLBACK, {"code": callback["code"][0], "state": callback["state"][0]})

    assert response.status_code == 400
    assert b"refused to hand over the tokens" in response.content
    assert Connection.objects.count() == 0
    assert ConnectionEvent.objects.count() == 0


def test_the_provider_verifies_the_pkce_verifier(provider, member):
    """A code presented without the flow's verifier is refused by the provider: PKCE is really checked."""
    client, _ = member
    _location, callback = authorize(client)

    answer = httpx.post(
        provider.token_url,
        data={"grant_type": "authorization_code", "code": callback["code"][0], "redirect_uri": REDIRECT_URI},
        auth=(CLIENT_ID, CLIENT_SECRET),
    )

    assert answer.status_code == 400
    assert answer.json()["error_description"] == "PKCE verification failed"


def test_reconnect_replaces_the_tokens_of_a_connection_needing_reauthorisation(provider, member):
    client, _ = member
    _location, callback = authorize(client)
    client.get(CALLBACK, {"code": callback["code"][0], "state": callback["state"][0]})
    connection = Connection.objects.get()
    Connection.objects.filter(pk=connection.pk).update(status=Connection.Status.NEEDS_REAUTH)

    start = client.get(START, {"reconnect": str(connection.pk)})
    answer = httpx.get(start["Location"], follow_redirects=False)
    callback = parse_qs(urlsplit(answer.headers["location"]).query)
    response = client.get(CALLBACK, {"code": callback["code"][0], "state": callback["state"][0]})

    assert response.status_code == 302
    connection.refresh_from_db()
    assert Connection.objects.count() == 1
    assert connection.status == Connection.Status.ACTIVE
    assert provider.is_live_access_token(connection_credentials_open(connection)["access_token"])


def test_another_tenants_connection_cannot_be_reconnected(provider, member):
    client, _ = member
    foreign = MembershipFactory(tenant=TenantFactory(slug="globex"))
    other_client = Client()
    other_client.force_login(foreign.user)
    _location, callback = authorize(other_client)
    other_client.get(CALLBACK, {"code": callback["code"][0], "state": callback["state"][0]})
    theirs = Connection.objects.get()

    response = client.get(START, {"reconnect": str(theirs.pk)})

    assert response.status_code == 404


def test_an_unknown_provider_is_404(member):
    client, _ = member

    assert client.get("/connections/oauth/nope/start").status_code == 404


def test_the_connections_page_offers_oauth_and_a_reconnect_button(provider, member):
    client, _ = member
    _location, callback = authorize(client)
    client.get(CALLBACK, {"code": callback["code"][0], "state": callback["state"][0]})
    connection = Connection.objects.get()
    page_before = client.get("/connections/").content.decode()
    Connection.objects.filter(pk=connection.pk).update(status=Connection.Status.NEEDS_REAUTH)

    page = client.get("/connections/").content.decode()

    assert f'href="{START}"' in page_before
    assert "Reconnect" not in page_before
    assert f'href="{START}?reconnect={connection.pk}"' in page
    assert "Needs re-authorisation" in page


def test_a_personal_oauth_connection_belongs_to_who_connected_it(provider, member):
    client, membership = member

    start = client.get(START, {"personal": "1"})
    answer = httpx.get(start["Location"], follow_redirects=False)
    callback = parse_qs(urlsplit(answer.headers["location"]).query)
    response = client.get(CALLBACK, {"code": callback["code"][0], "state": callback["state"][0]})

    assert response.status_code == 302
    assert Connection.objects.get().owner == membership.user


def test_a_member_cannot_reconnect_someone_elses_personal_connection(provider, member):
    client, membership = member
    membership.role = "member"
    membership.save()
    bob = MembershipFactory(tenant=membership.tenant, user=UserFactory(username="bob"), role="member").user
    theirs = ConnectionFactory(tenant=membership.tenant, owner=bob)

    response = client.get(START, {"reconnect": str(theirs.pk)})

    assert response.status_code == 404
    assert provider.code_calls == 0
