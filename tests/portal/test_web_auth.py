"""Getting into the tenant UI: log-in, lockout, membership, the tenant switcher and CSRF."""

from __future__ import annotations

import ipaddress
import logging

import pytest
from axes.models import AccessAttempt
from django.test import Client
from django.urls import reverse

from connections_app.models import Connection
from policies_app.models import TenantMembership
from portal.tenancy import SESSION_KEY
from tests.factories import PASSWORD, ConnectionFactory, MembershipFactory, TenantFactory, UserFactory
from tests.support.web import csp_of, member_client

pytestmark = pytest.mark.django_db

LOGIN = reverse("web:login")
LOGOUT = reverse("web:logout")
CONNECTIONS = reverse("web:connection-list")
SWITCH = reverse("web:tenant-switch")


@pytest.fixture
def acme():
    return TenantFactory(slug="acme", name="Acme Corp")


@pytest.fixture
def globex():
    return TenantFactory(slug="globex", name="Globex")


def _log_in(client: Client, username: str, password: str):
    return client.post(LOGIN, {"username": username, "password": password})


def test_login_page_renders_labelled_fields_with_csp(client):
    response = client.get(LOGIN)

    assert response.status_code == 200
    html = response.content.decode()
    assert '<label for="id_username">' in html
    assert '<label for="id_password">' in html
    assert 'name="csrfmiddlewaretoken"' in html
    assert "script-src 'self'" in csp_of(response)


def test_member_logs_in_and_lands_on_the_connections_of_their_tenant(client, acme):
    user = MembershipFactory(tenant=acme, user=UserFactory(username="ada")).user

    response = _log_in(client, "ada", PASSWORD)

    assert response.status_code == 302
    assert response.url == "/"
    home = client.get("/", follow=True)
    assert home.redirect_chain == [(CONNECTIONS, 302)]
    assert home.context["user"] == user
    assert home.context["request"].tenant == acme
    assert "Acme Corp" in home.content.decode()


def test_wrong_password_shows_the_form_again_without_logging_in(client, acme):
    MembershipFactory(tenant=acme, user=UserFactory(username="ada"))

    response = _log_in(client, "ada", "not-the-password")

    assert response.status_code == 200
    assert "Please enter a correct username and password" in response.content.decode()
    assert "not-the-password" not in response.content.decode()
    assert client.get(CONNECTIONS).status_code == 302


@pytest.mark.parametrize("login_url", [LOGIN, "/admin/login/"])
def test_an_over_long_username_is_a_form_error_that_never_reaches_axes(client, acme, login_url, caplog):
    # axes stores the username in a varchar(255); 10,000 characters were a 500 on PostgreSQL
    response = client.post(login_url, {"username": "u" * 10_000, "password": "whatever"})

    assert response.status_code == 200
    assert response.context["form"].errors["username"] == [
        "Ensure this value has at most 150 characters (it has 10000)."
    ]
    assert AccessAttempt.objects.count() == 0
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]


def test_five_wrong_passwords_lock_the_account_out_even_for_the_right_one(client, acme):
    MembershipFactory(tenant=acme, user=UserFactory(username="ada"))

    statuses = [_log_in(client, "ada", f"wrong-{attempt}").status_code for attempt in range(5)]
    locked = _log_in(client, "ada", PASSWORD)

    assert statuses == [200, 200, 200, 200, 429]
    assert locked.status_code == 429
    assert "accounts/locked_out.html" in [template.name for template in locked.templates]
    assert "Too many failed attempts" in locked.content.decode()
    assert "lifts by itself 15 minutes after the last failed attempt" in locked.content.decode()
    assert AccessAttempt.objects.get(username="ada").failures_since_start == 6  # the refused right one counts too
    assert "_auth_user_id" not in client.session
    assert client.get(CONNECTIONS).status_code == 302


def test_behind_the_proxy_a_lockout_holds_the_clients_address_not_the_proxys(acme, settings):
    # given every request arriving from the proxy, which names the client in X-Real-IP
    settings.TOOLGATE_TRUSTED_PROXY_NETWORKS = [ipaddress.ip_network("172.28.0.0/16")]
    MembershipFactory(tenant=acme, user=UserFactory(username="ada"))
    attacker = Client(REMOTE_ADDR="172.28.0.2", HTTP_X_REAL_IP="203.0.113.66")
    ada = Client(REMOTE_ADDR="172.28.0.2", HTTP_X_REAL_IP="198.51.100.10")

    # when the attacker spends ada's failures from its own address
    for attempt in range(5):
        _log_in(attacker, "ada", f"wrong-{attempt}")

    # then the attacker is locked out, and ada still logs in from hers
    assert _log_in(attacker, "ada", PASSWORD).status_code == 429
    assert _log_in(ada, "ada", PASSWORD).status_code == 302
    assert AccessAttempt.objects.get(username="ada").ip_address == "203.0.113.66"


def test_anonymous_visitors_are_sent_to_the_login_page(client):
    response = client.get(CONNECTIONS)

    assert response.status_code == 302
    assert response.url == f"{LOGIN}?next={CONNECTIONS}"


def test_user_without_membership_gets_a_friendly_403(client):
    user = UserFactory(username="drifter")
    client.force_login(user)

    response = client.get(CONNECTIONS)

    assert response.status_code == 403
    assert next(template.name for template in response.templates) == "tenant/no_tenant.html"
    html = response.content.decode()
    assert "You are not a member of any tenant" in html
    assert 'href="/connections/"' not in html  # no navigation into a UI they cannot use
    assert "script-src 'self'" in csp_of(response)


def test_logout_is_a_post_and_ends_the_session(acme):
    client, _user = member_client(acme)

    assert client.get(LOGOUT).status_code == 405
    response = client.post(LOGOUT)

    assert response.status_code == 302
    assert client.get(CONNECTIONS).status_code == 302


def test_switcher_lists_the_users_tenants_and_switches_between_them(acme, globex):
    client, user = member_client(acme)
    MembershipFactory(user=user, tenant=globex)
    ConnectionFactory(tenant=globex, label="globex-only")

    first = client.get(CONNECTIONS)
    switched = client.post(SWITCH, {"tenant": globex.pk})
    after = client.get(CONNECTIONS)

    assert first.context["request"].tenant == acme  # alphabetical by name: "Acme Corp" < "Globex"
    assert 'id="tenant-switch"' in first.content.decode()
    assert "globex-only" not in first.content.decode()
    assert (switched.status_code, switched.url) == (302, CONNECTIONS)
    assert after.context["request"].tenant == globex
    assert "globex-only" in after.content.decode()


def test_switcher_refuses_a_tenant_the_user_is_not_a_member_of(acme, globex):
    client, _user = member_client(acme)
    ConnectionFactory(tenant=globex, label="globex-only")

    response = client.post(SWITCH, {"tenant": globex.pk})

    assert response.status_code == 404
    assert client.session[SESSION_KEY] == acme.pk
    after = client.get(CONNECTIONS)
    assert after.context["request"].tenant == acme
    assert "globex-only" not in after.content.decode()


def test_a_remembered_tenant_is_dropped_once_the_membership_is_gone(acme, globex):
    client, user = member_client(acme)
    MembershipFactory(user=user, tenant=globex)
    client.post(SWITCH, {"tenant": globex.pk})

    TenantMembership.objects.filter(user=user, tenant=globex).delete()
    response = client.get(CONNECTIONS)

    assert response.context["request"].tenant == acme
    assert client.session[SESSION_KEY] == acme.pk


def test_single_tenant_members_see_the_tenant_name_and_no_switcher(acme):
    client, _user = member_client(acme)

    html = client.get(CONNECTIONS).content.decode()

    assert "Acme Corp" in html
    assert 'id="tenant-switch"' not in html


def test_csrf_is_enforced_on_ui_posts(acme):
    client = Client(enforce_csrf_checks=True)
    client.force_login(MembershipFactory(tenant=acme).user)
    connection = ConnectionFactory(tenant=acme)

    create = client.post(
        reverse("web:connection-new") + "?type=api_key",
        {"provider": "github", "label": "sneaky", "api_key": "ghp_sneaky"},
    )
    revoke = client.post(reverse("web:connection-revoke", args=[connection.pk]))

    assert (create.status_code, revoke.status_code) == (403, 403)
    assert list(Connection.objects.values_list("label", flat=True)) == [connection.label]
    connection.refresh_from_db()
    assert connection.revoked_at is None


def test_csrf_token_from_the_form_lets_the_same_post_through(acme):
    client = Client(enforce_csrf_checks=True)
    client.force_login(MembershipFactory(tenant=acme).user)
    form_page = client.get(reverse("web:connection-new") + "?type=api_key")

    response = client.post(
        reverse("web:connection-new") + "?type=api_key",
        {
            "provider": "github",
            "label": "with-token",
            "api_key": "ghp_with_token",
            "csrfmiddlewaretoken": form_page.context["csrf_token"],
        },
    )

    assert response.status_code == 302
    assert list(Connection.objects.values_list("label", flat=True)) == ["with-token"]
