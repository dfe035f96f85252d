"""The operators' governance screens in the admin, driven through real requests."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from connections_app.models import ExecutionGrant
from policies_app.governance import governance_cache, governance_generation
from policies_app.models import ApprovalRequest, ServiceAccount, ToolPolicy
from policies_app.selectors import caller_for_key, policy_effective_for
from policies_app.services import (
    ApprovalOutcome,
    ApprovalTerms,
    ApprovalVerdict,
    approval_check,
    service_account_revoke,
)
from runner.types import ConsequenceLevel, ToolEffect
from tests.factories import (
    ConnectionFactory,
    GrantFactory,
    MembershipFactory,
    TenantFactory,
    ToolPolicyFactory,
    UserFactory,
    service_account_with_key,
)
from tools_app.models import Tool
from tools_app.registry import code_specs
from tools_app.services import tool_set_enabled, tool_sync

pytestmark = pytest.mark.django_db

BUILTIN_IDS = [
    "core__get_current_time",
    "core__wait",
    "github__create_issue",
    "github__get_user",
    "toolgate__search_tools",
]
KEY_SHAPE = re.compile(r"tg_[A-Za-z0-9]{12}_[A-Za-z0-9_-]{43}")
SA_ADD = reverse("admin:policies_app_serviceaccount_add")
SA_CHANGELIST = reverse("admin:policies_app_serviceaccount_changelist")
POLICY_ADD = reverse("admin:policies_app_toolpolicy_add")
POLICY_CHANGELIST = reverse("admin:policies_app_toolpolicy_changelist")
APPROVAL_CHANGELIST = reverse("admin:policies_app_approvalrequest_changelist")


@pytest.fixture(autouse=True)
def fresh_cache():
    """Each test's database starts over, so must the process's governance cache."""
    governance_cache.clear()


@pytest.fixture
def acme():
    return TenantFactory(slug="acme", name="Acme Corp")


@pytest.fixture
def globex():
    return TenantFactory(slug="globex", name="Globex")


def _messages(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def _listed(response) -> list[str]:
    return [str(row.pk) for row in response.context["cl"].result_list]


def _form_errors(response) -> dict[str, list[str]]:
    return {name: list(errors) for name, errors in response.context["adminform"].form.errors.items()}


def _sa_change_url(account: ServiceAccount) -> str:
    return reverse("admin:policies_app_serviceaccount_change", args=[account.pk])


def _effective_url(account: ServiceAccount) -> str:
    return reverse("admin:policies_app_serviceaccount_effective_policy", args=[account.pk])


# --- changelists ---------------------------------------------------------------------------


def test_tenant_and_membership_changelists_search_and_filter(admin_client, acme, globex):
    member = MembershipFactory(tenant=acme, user=UserFactory(username="alice"))
    MembershipFactory(tenant=globex, user=UserFactory(username="bob"), role="member")

    tenants = admin_client.get(reverse("admin:policies_app_tenant_changelist"), {"q": "acme corp"})
    memberships = admin_client.get(
        reverse("admin:policies_app_tenantmembership_changelist"),
        {"q": "alice", "role__exact": "owner", "tenant__id__exact": acme.pk},
    )

    assert (tenants.status_code, memberships.status_code) == (200, 200)
    assert _listed(tenants) == [str(acme.pk)]
    assert _listed(memberships) == [str(member.pk)]


def test_service_account_changelist_searches_and_filters(admin_client, acme, globex):
    bot, _ = service_account_with_key(acme, name="bot")
    old, _ = service_account_with_key(acme, name="old")
    service_account_with_key(globex, name="bot")
    service_account_revoke(account=old)

    everything = admin_client.get(SA_CHANGELIST)
    active_acme = admin_client.get(SA_CHANGELIST, {"tenant__id__exact": acme.pk, "revoked": "no"})
    revoked = admin_client.get(SA_CHANGELIST, {"revoked": "yes"})
    by_prefix = admin_client.get(SA_CHANGELIST, {"q": bot.key_prefix})

    assert all(r.status_code == 200 for r in (everything, active_acme, revoked, by_prefix))
    assert len(_listed(everything)) == 3
    assert _listed(active_acme) == [str(bot.pk)]
    assert _listed(revoked) == [str(old.pk)]
    assert _listed(by_prefix) == [str(bot.pk)]


def test_policy_changelist_searches_and_filters(admin_client, acme):
    account, _ = service_account_with_key(acme, name="bot")
    tenant_policy = ToolPolicyFactory(name="acme-default", tenant=acme)
    sa_policy = ToolPolicyFactory(name="acme-bot", tenant=acme, service_account=account, is_active=False)
    ToolPolicyFactory(name="global-default")

    everything = admin_client.get(POLICY_CHANGELIST)
    acme_active = admin_client.get(POLICY_CHANGELIST, {"q": "acme", "is_active__exact": "1"})
    acme_any = admin_client.get(POLICY_CHANGELIST, {"tenant__id__exact": acme.pk})

    assert all(r.status_code == 200 for r in (everything, acme_active, acme_any))
    assert _listed(acme_active) == [str(tenant_policy.pk)]
    assert _listed(acme_any) == [str(sa_policy.pk), str(tenant_policy.pk)]
    content = everything.content.decode()
    assert '<td class="field-scope">service account acme/bot</td>' in content
    assert '<td class="field-scope">tenant acme</td>' in content
    assert '<td class="field-scope">global</td>' in content


def test_grant_and_approval_changelists_search_and_filter(admin_client, acme, globex):
    account, _ = service_account_with_key(acme, name="bot")
    other, _ = service_account_with_key(globex, name="bot")
    grant = GrantFactory(service_account=account, connections=ConnectionFactory.create_batch(2, tenant=acme))
    GrantFactory(service_account=other)
    approval = _open_approval(account, "call_1").approval

    grants = admin_client.get(
        reverse("admin:connections_app_executiongrant_changelist"),
        {"q": "bot", "tenant__id__exact": acme.pk, "revoked": "no"},
    )
    approvals = admin_client.get(
        APPROVAL_CHANGELIST, {"q": "call_1", "status__exact": "pending", "tenant__id__exact": acme.pk}
    )

    assert (grants.status_code, approvals.status_code) == (200, 200)
    assert _listed(grants) == [str(grant.pk)]
    assert _listed(approvals) == [str(approval.pk)]


# --- ServiceAccount: the key is shown once ---------------------------------------------------


def test_add_form_asks_tenant_name_and_scopes(admin_client, acme):
    response = admin_client.get(SA_ADD)

    form = response.context["adminform"].form
    assert response.status_code == 200
    assert list(form.fields) == ["tenant", "name", "scopes"]
    assert list(form.fields["scopes"].choices) == [
        ("tools:exec", "tools:exec"),
        ("connections:manage", "connections:manage"),
        ("invocations:read", "invocations:read"),
    ]


def test_creating_an_account_shows_a_working_key_once(admin_client, admin_user, acme):
    # when
    response = admin_client.post(SA_ADD, {"tenant": acme.pk, "name": "agent", "scopes": ["tools:exec"]})

    # then the response is the key page, with exactly one key in it
    content = response.content.decode()
    assert response.status_code == 200
    assert response.templates[0].name == "admin/policies_app/serviceaccount/key_created.html"
    assert "Copy this API key now: it will not be shown again." in content
    assert "no-store" in response["Cache-Control"]
    keys = set(KEY_SHAPE.findall(content))
    assert len(keys) == 1
    key = keys.pop()

    # and that key authenticates the new account
    account = ServiceAccount.objects.get(tenant=acme, name="agent")
    governance_cache.refresh()
    caller = caller_for_key(key=key)
    assert caller is not None
    assert (caller.service_account_id, caller.tenant_slug, caller.scopes) == (
        str(account.pk),
        "acme",
        frozenset({"tools:exec"}),
    )
    assert account.created_by == admin_user

    # and it is nowhere else: not in messages, session, cookies, history, or the later pages
    assert not any(key in value.value for value in admin_client.cookies.values())
    assert not any(key in str(value) for value in admin_client.session.values())
    assert [(e.object_id, e.change_message) for e in LogEntry.objects.all()] == [(str(account.pk), '[{"added": {}}]')]
    for url in (SA_CHANGELIST, _sa_change_url(account), _effective_url(account)):
        page = admin_client.get(url).content.decode()
        assert key not in page
        assert account.key_digest not in page
        assert KEY_SHAPE.search(page) is None


def test_change_page_shows_the_prefix_but_never_the_digest(admin_client, acme):
    account, key = service_account_with_key(acme, name="agent")

    response = admin_client.get(_sa_change_url(account))

    content = response.content.decode()
    assert response.status_code == 200
    assert account.key_prefix in content
    assert account.key_digest not in content
    assert key not in content
    assert "key_digest" not in response.context["adminform"].form.fields


def test_add_with_a_taken_name_shows_an_error_and_creates_nothing(admin_client, acme):
    service_account_with_key(acme, name="agent")

    response = admin_client.post(SA_ADD, {"tenant": acme.pk, "name": "agent", "scopes": ["tools:exec"]})

    assert response.status_code == 200
    assert _form_errors(response) == {"__all__": ["Service account with this Tenant and Name already exists."]}
    assert KEY_SHAPE.search(response.content.decode()) is None
    assert ServiceAccount.objects.filter(tenant=acme).count() == 1


def test_add_without_scopes_is_refused(admin_client, acme):
    response = admin_client.post(SA_ADD, {"tenant": acme.pk, "name": "agent"})

    assert _form_errors(response) == {"scopes": ["This field is required."]}
    assert ServiceAccount.objects.count() == 0


def test_change_form_updates_scopes_and_name_but_not_the_tenant(admin_client, acme, globex):
    account, key = service_account_with_key(acme, name="agent")
    digest = account.key_digest

    response = admin_client.post(
        _sa_change_url(account),
        {"name": "agent-2", "scopes": ["connections:manage", "tools:exec"], "tenant": globex.pk},
    )

    account.refresh_from_db()
    assert response.status_code == 302
    assert (account.name, account.scopes, account.tenant_id, account.key_digest) == (
        "agent-2",
        ["connections:manage", "tools:exec"],
        acme.pk,
        digest,
    )
    governance_cache.refresh()
    assert caller_for_key(key=key).scopes == frozenset({"connections:manage", "tools:exec"})


def test_revoke_action_stops_the_key(admin_client, admin_user, acme):
    account, key = service_account_with_key(acme, name="agent")
    _keeper, keeper_key = service_account_with_key(acme, name="keeper")
    governance_cache.refresh()
    assert caller_for_key(key=key) is not None

    response = admin_client.post(
        SA_CHANGELIST, {"action": "revoke_selected", "_selected_action": [str(account.pk)]}, follow=True
    )

    account.refresh_from_db()
    assert _messages(response) == ["Revoked 1 service account."]
    assert account.revoked_by == admin_user
    assert account.revoked_at is not None
    governance_cache.refresh()
    assert caller_for_key(key=key) is None
    assert caller_for_key(key=keeper_key) is not None


def test_revoking_an_already_revoked_account_changes_nothing(admin_client, acme):
    account, _key = service_account_with_key(acme, name="agent")
    service_account_revoke(account=account)
    revoked_at = account.revoked_at

    response = admin_client.post(
        SA_CHANGELIST, {"action": "revoke_selected", "_selected_action": [str(account.pk)]}, follow=True
    )

    account.refresh_from_db()
    assert _messages(response) == ["Revoked 0 service accounts. 1 already revoked."]
    assert (account.revoked_at, account.revoked_by) == (revoked_at, None)


def test_service_accounts_cannot_be_deleted(admin_client, acme):
    account, _key = service_account_with_key(acme, name="agent")

    response = admin_client.post(
        reverse("admin:policies_app_serviceaccount_delete", args=[account.pk]), {"post": "yes"}
    )

    assert response.status_code == 403
    assert ServiceAccount.objects.filter(pk=account.pk).exists()


# --- ToolPolicy form ------------------------------------------------------------------------


def _policy_data(**overrides) -> dict:
    data = {
        "name": "acme-default",
        "tenant": "",
        "service_account": "",
        "is_active": "on",
        "allowed_tools": ["core__wait", "core__get_current_time"],
        "require_approval_for_effects": [],
        "require_approval_at_or_above": "",
        "require_approval_for_tools": [],
        "approver": "operator",
        "approval_ttl_s": "3600",
        "max_runtime_ms": "",
        "max_result_bytes": "",
        "rate_limit_per_minute": "",
        "max_concurrency": "",
    }
    data.update(overrides)
    return {key: value for key, value in data.items() if value is not None}


def test_policy_form_offers_registry_and_catalog_tool_ids(admin_client):
    tool_sync(specs=code_specs())
    Tool.objects.filter(pk="core__wait").update(missing_since=timezone.now())
    legacy = Tool.objects.get(pk="core__wait")
    legacy.pk = "legacy__tool"
    legacy.save()

    response = admin_client.get(POLICY_ADD)

    form = response.context["adminform"].form
    assert response.status_code == 200
    assert [value for value, _label in form.fields["allowed_tools"].choices] == sorted([*BUILTIN_IDS, "legacy__tool"])
    assert [value for value, _label in form.fields["require_approval_for_effects"].choices] == [
        effect.value for effect in ToolEffect
    ]


def test_policy_form_offers_registry_ids_before_any_sync(admin_client):
    response = admin_client.get(POLICY_ADD)

    choices = response.context["adminform"].form.fields["allowed_tools"].choices
    assert [value for value, _label in choices] == BUILTIN_IDS


def test_saving_a_policy_records_the_operator_and_applies_on_the_next_call(admin_client, admin_user, acme):
    account, _ = service_account_with_key(acme, name="agent")
    before = governance_generation()

    response = admin_client.post(
        POLICY_ADD,
        _policy_data(
            tenant=acme.pk,
            require_approval_for_effects=["external_side_effect"],
            max_runtime_ms="15000",
        ),
    )

    assert response.status_code == 302
    policy = ToolPolicy.objects.get(name="acme-default")
    assert (policy.tenant, policy.service_account, policy.updated_by) == (acme, None, admin_user)
    assert policy.allowed_tools == ["core__get_current_time", "core__wait"]
    assert policy.require_approval_for_effects == ["external_side_effect"]
    assert governance_generation() > before
    governance_cache.refresh()
    effective = policy_effective_for(tenant_id=acme.pk, service_account_id=str(account.pk))
    assert (effective.name, effective.allowed_tools, effective.budgets.max_runtime_ms) == (
        "acme-default",
        frozenset({"core__get_current_time", "core__wait"}),
        15000,
    )


def test_a_tool_id_outside_the_choices_is_refused(admin_client):
    response = admin_client.post(POLICY_ADD, _policy_data(allowed_tools=["core__wait", "core__wiat"]))

    assert _form_errors(response) == {
        "allowed_tools": ["Select a valid choice. core__wiat is not one of the available choices."]
    }
    assert ToolPolicy.objects.count() == 0


def test_a_service_account_of_another_tenant_is_refused(admin_client, acme, globex):
    foreign, _ = service_account_with_key(globex, name="agent")

    response = admin_client.post(POLICY_ADD, _policy_data(tenant=acme.pk, service_account=str(foreign.pk)))

    assert response.status_code == 200
    assert _form_errors(response) == {
        "service_account": ["globex/agent belongs to tenant globex; choose that tenant or another service account."]
    }
    assert ToolPolicy.objects.count() == 0


def test_a_service_account_without_its_tenant_is_refused(admin_client, acme):
    account, _ = service_account_with_key(acme, name="agent")

    response = admin_client.post(POLICY_ADD, _policy_data(service_account=str(account.pk)))

    assert _form_errors(response) == {
        "service_account": ["acme/agent belongs to tenant acme; choose that tenant or another service account."]
    }
    assert ToolPolicy.objects.count() == 0


@pytest.mark.parametrize(
    ("scope", "field", "label"),
    [
        ("global", "is_active", "global"),
        ("tenant", "tenant", "tenant acme"),
        ("service_account", "service_account", "service account acme/agent"),
    ],
)
def test_a_second_active_policy_for_a_scope_is_a_form_error(admin_client, acme, scope, field, label):
    account, _ = service_account_with_key(acme, name="agent")
    scope_fields = {
        "global": {},
        "tenant": {"tenant": acme},
        "service_account": {"tenant": acme, "service_account": account},
    }[scope]
    ToolPolicyFactory(name="first", **scope_fields)
    posted = {name: str(value.pk) for name, value in scope_fields.items()}

    response = admin_client.post(POLICY_ADD, _policy_data(name="second", **posted))

    assert response.status_code == 200
    assert _form_errors(response) == {
        field: [
            f"The policy “first” is already active in this scope ({label}): "
            "deactivate it first, or save this one as inactive."
        ]
    }
    assert list(ToolPolicy.objects.values_list("name", flat=True)) == ["first"]


def test_a_second_inactive_policy_for_a_scope_is_accepted(admin_client, acme):
    ToolPolicyFactory(name="first", tenant=acme)

    response = admin_client.post(POLICY_ADD, _policy_data(name="second", tenant=acme.pk, is_active=None))

    assert response.status_code == 302
    assert list(ToolPolicy.objects.values_list("name", "is_active")) == [("first", True), ("second", False)]


def test_editing_the_active_policy_of_a_scope_does_not_collide_with_itself(admin_client, admin_user, acme):
    policy = ToolPolicyFactory(name="acme-default", tenant=acme)

    response = admin_client.post(
        reverse("admin:policies_app_toolpolicy_change", args=[policy.pk]),
        _policy_data(tenant=acme.pk, allowed_tools=["github__get_user"]),
    )

    policy.refresh_from_db()
    assert response.status_code == 302
    assert (policy.allowed_tools, policy.updated_by) == (["github__get_user"], admin_user)


# --- effective policy ------------------------------------------------------------------------


def test_effective_policy_prefers_the_service_account_policy(admin_client, acme):
    account, _ = service_account_with_key(acme, name="agent")
    global_policy = ToolPolicyFactory(name="global-default", allowed_tools=["core__get_current_time"])
    tenant_policy = ToolPolicyFactory(name="acme-default", tenant=acme, allowed_tools=["core__get_current_time"])
    sa_policy = ToolPolicyFactory(
        name="acme-agent",
        tenant=acme,
        service_account=account,
        allowed_tools=["core__wait", "github__create_issue"],
        require_approval_for_effects=["external_side_effect"],
        max_runtime_ms=5000,
    )
    tool_sync(specs=code_specs())
    tool_set_enabled(tool_ids=["core__wait"], enabled=True)

    response = admin_client.get(_effective_url(account))

    content = response.content.decode()
    assert response.status_code == 200
    assert response.context["effective"].name == "acme-agent"
    assert response.context["applied"] == sa_policy
    assert response.context["overridden"] == [tenant_policy, global_policy]
    assert response.context["tools"] == [("core__wait", True), ("github__create_issue", False)]
    assert response.context["approval_effects"] == ["external_side_effect"]
    assert response.context["budgets"] == [
        ("max runtime (ms)", 5000),
        ("max result bytes", None),
        ("rate limit per minute", None),
        ("max concurrency", None),
        ("max sampling requests per call", None),
    ]
    assert '<span id="applied-scope">service account acme/agent</span>' in content
    assert "nothing is allowed" not in content


def test_effective_policy_without_any_policy_allows_nothing(admin_client, acme, globex):
    account, _ = service_account_with_key(acme, name="agent")
    ToolPolicyFactory(name="globex-default", tenant=globex)
    ToolPolicyFactory(name="acme-off", tenant=acme, is_active=False)

    response = admin_client.get(_effective_url(account))

    assert response.status_code == 200
    assert response.context["effective"] is None
    assert response.context["overridden"] == []
    assert "No policy: nothing is allowed." in response.content.decode()


def test_effective_policy_follows_a_change_made_in_another_request(admin_client, acme):
    account, _ = service_account_with_key(acme, name="agent")
    first = admin_client.get(_effective_url(account))
    ToolPolicyFactory(name="acme-default", tenant=acme)

    second = admin_client.get(_effective_url(account))

    assert first.context["effective"] is None
    assert second.context["effective"].name == "acme-default"


def test_change_page_links_to_the_effective_policy(admin_client, acme):
    account, _ = service_account_with_key(acme, name="agent")
    ToolPolicyFactory(name="acme-default", tenant=acme, allowed_tools=["core__wait"])

    content = admin_client.get(_sa_change_url(account)).content.decode()

    assert f'acme-default (1 tool allowed). <a href="{_effective_url(account)}">Details</a>' in content


def test_effective_policy_of_an_unknown_account_is_404(admin_client):
    response = admin_client.get(reverse("admin:policies_app_serviceaccount_effective_policy", args=["not-a-uuid"]))

    assert response.status_code == 404


def test_effective_policy_needs_the_admin(client, acme):
    account, _ = service_account_with_key(acme, name="agent")

    response = client.get(_effective_url(account))

    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


# --- grants ---------------------------------------------------------------------------------


def test_grant_revoke_action(admin_client, admin_user, acme):
    account, _ = service_account_with_key(acme, name="agent")
    grant = GrantFactory(service_account=account, connections=[ConnectionFactory(tenant=acme)])

    response = admin_client.post(
        reverse("admin:connections_app_executiongrant_changelist"),
        {"action": "revoke_selected", "_selected_action": [str(grant.pk)]},
        follow=True,
    )

    grant.refresh_from_db()
    assert _messages(response) == ["Revoked 1 grant."]
    assert grant.revoked_by == admin_user
    assert grant.revoked_at is not None


def test_grants_cannot_be_added_or_deleted_in_the_admin(admin_client, acme):
    account, _ = service_account_with_key(acme, name="agent")
    grant = GrantFactory(service_account=account)

    add = admin_client.get(reverse("admin:connections_app_executiongrant_add"))
    delete = admin_client.post(reverse("admin:connections_app_executiongrant_delete", args=[grant.pk]), {"post": "yes"})

    assert (add.status_code, delete.status_code) == (403, 403)
    assert ExecutionGrant.objects.count() == 1


# --- approvals ------------------------------------------------------------------------------


TERMS = ApprovalTerms(
    effect=ToolEffect.EXTERNAL_SIDE_EFFECT,
    consequence_level=ConsequenceLevel.MEDIUM,
    required_because="the tool requires confirmation of every call",
    approver="operator",
    ttl_s=3600,
)


def _open_approval(account: ServiceAccount, tool_call_id: str) -> ApprovalVerdict:
    return approval_check(
        tenant_id=account.tenant_id,
        service_account_id=str(account.pk),
        tool_id="github__create_issue",
        connection_id=None,
        args_sha256="a" * 64,
        tool_call_id=tool_call_id,
        terms=TERMS,
    )


def _decide(admin_client, action: str, *approvals: ApprovalRequest):
    return admin_client.post(
        APPROVAL_CHANGELIST,
        {"action": action, "_selected_action": [str(approval.pk) for approval in approvals]},
        follow=True,
    )


def test_approve_action_records_who_and_when(admin_client, admin_user, acme):
    account, _ = service_account_with_key(acme, name="agent")
    approval = _open_approval(account, "call_1").approval

    response = _decide(admin_client, "approve_selected", approval)

    approval.refresh_from_db()
    assert _messages(response) == ["Approved 1 request."]
    assert (approval.status, approval.decided_by) == (ApprovalRequest.Status.APPROVED, admin_user)
    assert approval.decided_at is not None
    assert _open_approval(account, "call_1").outcome is ApprovalOutcome.ALLOW


def test_deny_action(admin_client, admin_user, acme):
    account, _ = service_account_with_key(acme, name="agent")
    approval = _open_approval(account, "call_1").approval

    response = _decide(admin_client, "deny_selected", approval)

    approval.refresh_from_db()
    assert _messages(response) == ["Denied 1 request."]
    assert (approval.status, approval.decided_by) == (ApprovalRequest.Status.DENIED, admin_user)
    assert _open_approval(account, "call_1") == ApprovalVerdict.deny(approval, "the approval was denied")


def test_approving_an_expired_request_changes_nothing(admin_client, acme):
    account, _ = service_account_with_key(acme, name="agent")
    expired = _open_approval(account, "call_old").approval
    ApprovalRequest.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    fresh = _open_approval(account, "call_new").approval

    response = _decide(admin_client, "approve_selected", expired, fresh)

    expired.refresh_from_db()
    fresh.refresh_from_db()
    assert _messages(response) == [
        "Approved 1 request.",
        "Skipped 1 request that was not pending or had expired.",
    ]
    assert (expired.status, expired.decided_by, expired.decided_at) == (ApprovalRequest.Status.PENDING, None, None)
    assert fresh.status == ApprovalRequest.Status.APPROVED


def test_approvals_are_read_only_and_cannot_be_added_or_deleted(admin_client, acme):
    account, _ = service_account_with_key(acme, name="agent")
    approval = _open_approval(account, "call_1").approval
    change_url = reverse("admin:policies_app_approvalrequest_change", args=[approval.pk])

    page = admin_client.get(change_url)
    admin_client.post(change_url, {"status": "approved", "tool_id": "core__wait"})
    add = admin_client.get(reverse("admin:policies_app_approvalrequest_add"))
    delete = admin_client.post(
        reverse("admin:policies_app_approvalrequest_delete", args=[approval.pk]), {"post": "yes"}
    )

    approval.refresh_from_db()
    assert page.status_code == 200
    assert list(page.context["adminform"].form.fields) == []
    assert (add.status_code, delete.status_code) == (403, 403)
    assert (approval.status, approval.tool_id) == (ApprovalRequest.Status.PENDING, "github__create_issue")


def test_governance_state_is_not_in_the_admin(admin_client):
    response = admin_client.get(reverse("admin:index"))

    assert response.status_code == 200
    assert "governance" not in response.content.decode().lower()


# --- changelists run a fixed number of queries -----------------------------------------------


def _queries_for(client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def _add_governance_rows(tenant, start: int, n: int) -> None:
    for i in range(start, start + n):
        account, _ = service_account_with_key(tenant, name=f"agent-{i}")
        ToolPolicyFactory(tenant=tenant, service_account=account)
        GrantFactory(service_account=account, connections=[ConnectionFactory(tenant=tenant)])
        approval = _open_approval(account, f"call_{i}").approval
        ApprovalRequest.objects.filter(pk=approval.pk).update(decided_by=UserFactory())


@pytest.mark.parametrize(
    "changelist",
    [
        "admin:policies_app_serviceaccount_changelist",
        "admin:policies_app_toolpolicy_changelist",
        "admin:connections_app_executiongrant_changelist",
        "admin:policies_app_approvalrequest_changelist",
        "admin:policies_app_tenantmembership_changelist",
    ],
)
def test_changelist_queries_do_not_grow_with_rows(admin_client, acme, changelist):
    url = reverse(changelist)
    _add_governance_rows(acme, 0, 1)
    MembershipFactory(tenant=acme)
    few = _queries_for(admin_client, url)

    _add_governance_rows(acme, 1, 4)
    MembershipFactory(tenant=acme)
    MembershipFactory(tenant=acme)

    assert _queries_for(admin_client, url) == few


def test_effective_policy_lists_the_catalog_tools_a_pattern_matches(admin_client, acme):
    account, _ = service_account_with_key(acme, name="agent")
    ToolPolicyFactory(name="acme-default", tenant=acme, allowed_tools=["core__*", "github__get_user"])
    tool_sync(specs=code_specs())
    tool_set_enabled(tool_ids=["core__wait"], enabled=True)

    response = admin_client.get(_effective_url(account))

    assert response.context["tools"] == [
        ("core__get_current_time", False),
        ("core__wait", True),
        ("github__get_user", False),
    ]
