"""The admin screens of argument rules and result guards: checks at save, services, the change log, try it."""

from __future__ import annotations

import pytest
from django.urls import reverse

from changes_app.models import Change
from policies_app.models import ArgumentRule, ResultGuard
from tests.factories import TenantFactory
from tests.support.api import enable_tools

pytestmark = pytest.mark.django_db

RULES = reverse("admin:policies_app_argumentrule_changelist")
GUARDS = reverse("admin:policies_app_resultguard_changelist")


@pytest.fixture
def acme():
    enable_tools("core__get_current_time")
    return TenantFactory(slug="acme")


def rule_form(**fields):
    return {
        "name": "paris-only",
        "is_active": "on",
        "tenant": "",
        "service_account": "",
        "tools": '["core__get_current_time"]',
        "tags": "[]",
        "condition": 'args.timezone != "Europe/Paris"',
        "action": "deny",
        "message": "only Paris time here",
        "try_tool": "",
        "try_args": "",
        **fields,
    }


def test_a_rule_saved_in_admin_is_checked_logged_and_tried(admin_client, acme):
    response = admin_client.post(
        reverse("admin:policies_app_argumentrule_add"),
        rule_form(tenant=str(acme.pk), try_tool="core__get_current_time", try_args='{"timezone": "UTC"}'),
        follow=True,
    )

    assert response.status_code == 200
    rule = ArgumentRule.objects.get()
    assert (rule.tenant_id, rule.action) == (acme.pk, "deny")
    assert Change.objects.filter(action="argument_rule.create").count() == 1
    assert "Try it: the condition holds: such a call gets deny" in response.content.decode()
    assert admin_client.get(RULES).status_code == 200


def test_a_broken_condition_is_refused_in_admin_with_its_position(admin_client, acme):
    response = admin_client.post(reverse("admin:policies_app_argumentrule_add"), rule_form(condition="args.x >"))

    assert response.status_code == 200
    assert "Syntax error" in response.content.decode()
    assert "at 1:9" in response.content.decode()
    assert not ArgumentRule.objects.exists()


def test_a_guard_with_a_lookaround_pattern_is_refused_and_a_good_one_saved(admin_client, acme):
    form = {
        "name": "keys",
        "is_active": "on",
        "tenant": "",
        "service_account": "",
        "tools": '["*"]',
        "tags": "[]",
        "detectors": '["aws_access_key"]',
        "patterns": '["(?<=key=)[a-z]+"]',
        "action": "redact",
        "arguments": "ignore",
        "message": "",
    }
    add = reverse("admin:policies_app_resultguard_add")

    refused = admin_client.post(add, form)
    assert "not a valid RE2 pattern" in refused.content.decode()
    assert not ResultGuard.objects.exists()

    admin_client.post(add, {**form, "patterns": '["key=[a-z0-9]{20}"]'})
    assert ResultGuard.objects.get().patterns == ["key=[a-z0-9]{20}"]
    assert Change.objects.filter(action="result_guard.create").count() == 1
    assert admin_client.get(GUARDS).status_code == 200
