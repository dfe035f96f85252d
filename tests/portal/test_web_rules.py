"""The portal's rules page: owners and members read the rules and guards that can apply to their tenant, no more."""

from __future__ import annotations

import pytest
from django.urls import reverse

from policies_app.models import ArgumentRule, ResultGuard
from policies_app.services import argument_rule_save, result_guard_save
from tests.factories import MembershipFactory, TenantFactory, UserFactory, service_account_with_key
from tests.support.api import enable_tools
from tests.support.web import member_client

pytestmark = pytest.mark.django_db

LIST = reverse("web:rule-list")
TOOL = "core__get_current_time"


@pytest.fixture
def tenants():
    enable_tools(TOOL)
    acme, other = TenantFactory(slug="acme", name="Acme Corp"), TenantFactory(slug="globex", name="Globex")
    bot, _key = service_account_with_key(acme, name="bot")
    argument_rule_save(
        rule=ArgumentRule(
            name="acme-no-paris",
            tenant=acme,
            tools=[TOOL],
            condition='args.timezone == "Paris"',
            action="deny",
            message="not Paris here",
        )
    )
    argument_rule_save(
        rule=ArgumentRule(
            name="bot-asks", service_account=bot, tools=[TOOL], condition="true", action="require_approval"
        )
    )
    argument_rule_save(
        rule=ArgumentRule(
            name="global-globex-only",
            tools=["*"],
            condition='caller.tenant == "globex" && args.timezone == "UTC"',
            action="deny",
            message="globex keeps to its zone",
        )
    )
    argument_rule_save(
        rule=ArgumentRule(name="globex-own", tenant=other, tools=[TOOL], condition="true", action="deny")
    )
    argument_rule_save(
        rule=ArgumentRule(
            name="acme-inactive", tenant=acme, tools=[TOOL], condition="true", action="deny", is_active=False
        )
    )
    result_guard_save(
        guard=ResultGuard(
            name="global-secrets",
            tools=["*"],
            detectors=["aws_access_key", "private_key"],
            patterns=["tok_internal_[a-z0-9]{12}"],
            action="redact",
        )
    )
    return acme, other


@pytest.mark.parametrize("role", ["owner", "member"])
def test_owners_and_members_read_the_rules_that_apply_to_their_tenant_and_nothing_more(tenants, role):
    acme, _other = tenants
    user = UserFactory(username=f"u-{role}")
    MembershipFactory(tenant=acme, user=user, role=role)
    client = member_client(acme, user=user)[0]

    response = client.get(LIST)

    assert response.status_code == 200
    page = response.content.decode()
    assert [row.name for row in response.context["rules"]] == ["bot-asks", "acme-no-paris", "global-globex-only"]
    assert "not Paris here" in page
    assert "args.timezone == &quot;Paris&quot;" in page
    assert "Service account bot" in page
    # A global condition reading `caller` may name another tenant: described, not shown.
    assert "globex" not in page.replace("globex keeps to its zone", "").replace("global-globex-only", "")
    assert "depends on the caller" in page
    assert "globex-own" not in page
    assert "acme-inactive" not in page
    [guard] = response.context["guards"]
    assert (guard.detectors, guard.pattern_count) == (("aws key", "private key"), 1)
    assert "tok_internal" not in page  # an operator's pattern is not shown
    assert 'href="/rules/" aria-current="page"' in page
    assert client.post(LIST).status_code == 405  # read-only


def test_the_page_needs_a_signed_in_member(client):
    response = client.get(LIST)

    assert response.status_code == 302
    assert "/accounts/login/" in response["Location"]
