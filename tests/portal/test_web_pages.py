"""Every tenant UI page: renders for a member with the CSP header, stays in its tenant, bounded queries."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from connections_app.models import Connection, ConnectionEvent, ExecutionGrant
from gateway.upstream.models import McpFeatureRead
from policies_app.models import ServiceAccount
from tests.factories import ConnectionFactory, GrantFactory, TenantFactory, UserFactory, service_account_with_key
from tests.support.web import CSP_REQUIRED, csp_of, invocation, member_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def acme():
    return TenantFactory(slug="acme", name="Acme Corp")


@pytest.fixture
def globex():
    """Another tenant with one of everything, which acme's members must never reach."""
    tenant = TenantFactory(slug="globex", name="Globex")
    account, _key = service_account_with_key(tenant, name="globex-agent")
    connection = ConnectionFactory(tenant=tenant, label="globex-conn")
    grant = GrantFactory(service_account=account, connections=[connection])
    return tenant, connection, grant, account


@pytest.fixture
def member(acme):
    return member_client(acme)


def _acme_rows(acme):
    account, _key = service_account_with_key(acme, name="agent")
    connection = ConnectionFactory(tenant=acme, label="release bot")
    grant = GrantFactory(service_account=account, connections=[connection])
    return connection, grant, account


def _pages(connection, grant, account) -> list[str]:
    return [
        reverse("web:connection-list"),
        reverse("web:connection-new") + "?type=api_key",
        reverse("web:connection-new") + "?type=app_password",
        reverse("web:connection-detail", args=[connection.pk]),
        reverse("web:connection-revoke", args=[connection.pk]),
        reverse("web:grant-list"),
        reverse("web:grant-new"),
        reverse("web:grant-revoke", args=[grant.pk]),
        reverse("web:service-account-list"),
        reverse("web:service-account-new"),
        reverse("web:service-account-revoke", args=[account.pk]),
        reverse("web:activity"),
        reverse("web:approval-list"),
    ]


def test_every_page_renders_for_a_member_with_the_csp_header(acme, member):
    client, _user = member
    rows = _acme_rows(acme)

    for url in _pages(*rows):
        response = client.get(url)
        assert response.status_code == 200, url
        policy = csp_of(response)
        assert all(directive in policy for directive in CSP_REQUIRED), (url, policy)
        assert "unsafe-inline" not in policy
        html = response.content.decode()
        assert "<script" not in html, url
        assert "style=" not in html, url
        assert "/static/toolgate/toolgate.css" in html, url


def test_the_nav_marks_the_current_section(acme, member):
    client, _user = member

    for name, label in [
        ("web:connection-list", "Connections"),
        ("web:grant-list", "Grants"),
        ("web:service-account-list", "Service accounts"),
        ("web:activity", "Activity"),
    ]:
        html = client.get(reverse(name)).content.decode()
        assert f'href="{reverse(name)}" aria-current="page">{label}</a>' in html
        assert html.count('aria-current="page"') == 1


def test_another_tenants_rows_are_not_found_on_every_page(acme, globex, member):
    client, _user = member
    _tenant, connection, grant, account = globex
    urls = [
        reverse("web:connection-detail", args=[connection.pk]),
        reverse("web:connection-revoke", args=[connection.pk]),
        reverse("web:grant-revoke", args=[grant.pk]),
        reverse("web:service-account-revoke", args=[account.pk]),
    ]

    for url in urls:
        response = client.get(url)
        assert response.status_code == 404, url
        assert next(template.name for template in response.templates) == "tenant/not_found.html"
        assert "globex" not in response.content.decode().lower(), url


def test_posting_to_another_tenants_rows_changes_nothing(acme, globex, member):
    client, _user = member
    _tenant, connection, grant, account = globex

    responses = [
        client.post(reverse("web:connection-revoke", args=[connection.pk])),
        client.post(reverse("web:grant-revoke", args=[grant.pk])),
        client.post(reverse("web:service-account-revoke", args=[account.pk])),
    ]

    assert [response.status_code for response in responses] == [404, 404, 404]
    assert Connection.objects.get(pk=connection.pk).revoked_at is None
    assert ExecutionGrant.objects.get(pk=grant.pk).revoked_at is None
    assert ServiceAccount.objects.get(pk=account.pk).revoked_at is None
    assert not ConnectionEvent.objects.filter(kind="revoked").exists()


def test_lists_never_show_another_tenants_rows(acme, globex, member):
    client, _user = member
    _acme_rows(acme)
    invocation(globex[0], "core__wait", timezone.now(), tool_call_id="globex-call")

    for name in ("web:connection-list", "web:grant-list", "web:service-account-list", "web:activity"):
        html = client.get(reverse(name)).content.decode()
        assert "globex" not in html.lower(), name


def test_a_grant_cannot_name_another_tenants_service_account(acme, globex, member):
    client, _user = member
    _tenant, _connection, _grant, foreign_account = globex
    own = ConnectionFactory(tenant=acme)

    response = client.post(reverse("web:grant-new"), {"service_account": foreign_account.pk, "connections": [own.pk]})

    assert list(response.context["form"].errors) == ["service_account"]
    assert ExecutionGrant.objects.filter(tenant=acme).count() == 0


def _many_rows(acme, count: int = 3) -> None:
    """Enough rows with creators, scopes and connections that any per-row query would show."""
    for number in range(count):
        creator = UserFactory()
        account, _key = service_account_with_key(acme, name=f"agent-{number}")
        account.created_by = creator
        account.save()
        connections = [
            ConnectionFactory(tenant=acme, created_by=creator, scopes=["repo"]),
            ConnectionFactory(tenant=acme, created_by=creator, expires_at=timezone.now() + timedelta(days=1)),
        ]
        GrantFactory(service_account=account, connections=connections, created_by=creator)
        invocation(acme, "core__wait", timezone.now(), service_account=account, tool_call_id=f"call-{number}")
        McpFeatureRead.objects.create(
            tenant=acme,
            service_account=account,
            kind=McpFeatureRead.Kind.RESOURCE,
            name=f"toolgate://docs/{number}",
            started_at=timezone.now(),
            ended_at=timezone.now(),
            duration_ms=1,
        )


# Session, user, memberships: what every page costs before its own reads.
BASE_QUERIES = 3


@pytest.mark.parametrize(
    ("name", "own_queries"),
    [
        ("web:connection-list", 2),  # connections with creator and revoker joined; the OAuth providers
        ("web:grant-list", 2),  # grants joined to accounts and users, connections prefetched
        ("web:service-account-list", 1),
        (
            "web:activity",
            7,
        ),  # people (the person filter), tool ids, count and page of calls, the chart, count and page of reads
        ("web:delegation-list", 2),  # delegations joined to accounts and people; signed-in MCP clients likewise
    ],
)
def test_list_pages_cost_a_fixed_number_of_queries(acme, member, django_assert_num_queries, name, own_queries):
    client, _user = member
    _many_rows(acme)
    client.get(reverse(name))  # warm the session

    with django_assert_num_queries(BASE_QUERIES + own_queries):
        response = client.get(reverse(name))

    assert response.status_code == 200
