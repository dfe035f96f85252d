"""The operators' tool catalog and audit log in the admin, driven through real requests."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from policies_app.governance import governance_cache, governance_generation
from tests.factories import TenantFactory, service_account_with_key
from tools_app.models import Tool, ToolInvocation
from tools_app.registry import code_specs
from tools_app.selectors import enabled_tool_ids
from tools_app.services import tool_set_enabled, tool_sync

pytestmark = pytest.mark.django_db

BUILTIN_IDS = [
    "core__get_current_time",
    "core__wait",
    "github__create_issue",
    "github__get_user",
    "toolgate__search_tools",
]
TOOL_CHANGELIST = reverse("admin:tools_app_tool_changelist")
INVOCATION_CHANGELIST = reverse("admin:tools_app_toolinvocation_changelist")


@pytest.fixture(autouse=True)
def catalog():
    """The synced builtin catalog, all disabled, and a cache that forgot earlier tests."""
    governance_cache.clear()
    tool_sync(specs=code_specs())


def _enabled_now() -> frozenset[str]:
    governance_cache.refresh()
    return enabled_tool_ids()


def _messages(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def _listed(response) -> list[str]:
    return [str(row.pk) for row in response.context["cl"].result_list]


# --- Tool changelist -------------------------------------------------------------------


def test_tool_changelist_lists_the_catalog(admin_client):
    response = admin_client.get(TOOL_CHANGELIST)

    assert response.status_code == 200
    assert _listed(response) == BUILTIN_IDS


def test_tool_changelist_searches_and_filters(admin_client):
    Tool.objects.filter(pk="github__get_user").update(is_enabled=True)

    searched = admin_client.get(TOOL_CHANGELIST, {"q": "github"})
    disabled_github = admin_client.get(TOOL_CHANGELIST, {"q": "github", "is_enabled__exact": "0"})
    side_effects = admin_client.get(TOOL_CHANGELIST, {"effect__exact": "external_side_effect"})
    connected = admin_client.get(TOOL_CHANGELIST, {"requires_connection__exact": "1", "source__exact": "code"})

    assert [r.status_code for r in (searched, disabled_github, side_effects, connected)] == [200, 200, 200, 200]
    assert _listed(searched) == ["github__create_issue", "github__get_user"]
    assert _listed(disabled_github) == ["github__create_issue"]
    assert _listed(side_effects) == ["github__create_issue"]
    assert _listed(connected) == ["github__create_issue", "github__get_user"]


def test_list_editable_switch_reaches_the_runner_cache(admin_client):
    # given a process whose cache has seen every tool disabled
    assert _enabled_now() == frozenset()

    # when the operator ticks one switch in the list and saves
    response = admin_client.post(
        TOOL_CHANGELIST,
        {
            "form-TOTAL_FORMS": "1",
            "form-INITIAL_FORMS": "1",
            "form-MIN_NUM_FORMS": "0",
            "form-MAX_NUM_FORMS": "1000",
            "form-0-id": "core__wait",
            "form-0-is_enabled": "on",
            "_save": "Save",
        },
    )

    # then
    assert response.status_code == 302
    assert Tool.objects.get(pk="core__wait").is_enabled is True
    assert _enabled_now() == frozenset({"core__wait"})


def test_list_editable_can_switch_a_tool_off(admin_client):
    tool_set_enabled(tool_ids=["core__wait", "core__get_current_time"], enabled=True)
    assert _enabled_now() == frozenset({"core__wait", "core__get_current_time"})

    response = admin_client.post(
        TOOL_CHANGELIST,
        {
            "form-TOTAL_FORMS": "1",
            "form-INITIAL_FORMS": "1",
            "form-MIN_NUM_FORMS": "0",
            "form-MAX_NUM_FORMS": "1000",
            "form-0-id": "core__wait",
            "_save": "Save",
        },
    )

    assert response.status_code == 302
    assert _enabled_now() == frozenset({"core__get_current_time"})


def test_enable_action_switches_the_selection_on_and_bumps_the_generation(admin_client, admin_user):
    tool_set_enabled(tool_ids=["core__wait"], enabled=True)
    before = governance_generation()

    response = admin_client.post(
        TOOL_CHANGELIST,
        {"action": "enable_selected", "_selected_action": ["core__wait", "github__get_user", "core__get_current_time"]},
        follow=True,
    )

    assert response.status_code == 200
    assert _messages(response) == ["Enabled 2 tools. 1 tool already enabled."]
    assert governance_generation() == before + 1
    assert _enabled_now() == frozenset({"core__wait", "github__get_user", "core__get_current_time"})
    assert sorted(LogEntry.objects.filter(user=admin_user).values_list("object_id", "change_message")) == [
        ("core__get_current_time", "Enabled by bulk action."),
        ("github__get_user", "Enabled by bulk action."),
    ]


def test_disable_action_switches_the_selection_off(admin_client):
    tool_set_enabled(tool_ids=BUILTIN_IDS, enabled=True)
    assert _enabled_now() == frozenset(BUILTIN_IDS)

    response = admin_client.post(
        TOOL_CHANGELIST,
        {"action": "disable_selected", "_selected_action": ["github__create_issue", "github__get_user"]},
        follow=True,
    )

    assert _messages(response) == ["Disabled 2 tools."]
    assert _enabled_now() == frozenset({"core__get_current_time", "core__wait", "toolgate__search_tools"})


def test_action_that_changes_nothing_leaves_the_generation_alone(admin_client):
    before = governance_generation()

    response = admin_client.post(
        TOOL_CHANGELIST, {"action": "disable_selected", "_selected_action": ["core__wait"]}, follow=True
    )

    assert _messages(response) == ["Disabled 0 tools. 1 tool already disabled."]
    assert governance_generation() == before


def test_tool_change_page_shows_the_schema_read_only_and_saves_only_the_switch(admin_client):
    url = reverse("admin:tools_app_tool_change", args=["core__wait"])
    original = Tool.objects.get(pk="core__wait")

    page = admin_client.get(url)
    response = admin_client.post(url, {"is_enabled": "on", "description": "typed over", "schema_hash": "0" * 64})

    assert page.status_code == 200
    assert list(page.context["adminform"].form.fields) == ["is_enabled"]
    assert "<pre>{\n  &quot;additionalProperties&quot;: false," in page.content.decode()
    assert response.status_code == 302
    tool = Tool.objects.get(pk="core__wait")
    assert (tool.is_enabled, tool.description, tool.schema_hash) == (True, original.description, original.schema_hash)
    assert _enabled_now() == frozenset({"core__wait"})


def test_a_code_tools_confirmation_reads_in_words_not_under_the_checkbox_help_text(admin_client):
    Tool.objects.filter(pk="core__wait").update(requires_confirmation=False)
    Tool.objects.filter(pk="github__create_issue").update(requires_confirmation=True)

    off = admin_client.get(reverse("admin:tools_app_tool_change", args=["core__wait"])).content.decode()
    on = admin_client.get(reverse("admin:tools_app_tool_change", args=["github__create_issue"])).content.decode()

    assert "No: the policy decides which calls wait for a person&#x27;s approval." in off
    assert "Yes: every call waits for a person&#x27;s approval, whatever the policy says." in on
    for page in (off, on):
        assert "Every call waits for a person&#x27;s approval, whatever the policy says." not in page


def test_tools_cannot_be_added_or_deleted_in_the_admin(admin_client):
    add = admin_client.get(reverse("admin:tools_app_tool_add"))
    delete = admin_client.post(reverse("admin:tools_app_tool_delete", args=["core__wait"]), {"post": "yes"})
    bulk_delete = admin_client.post(
        TOOL_CHANGELIST, {"action": "delete_selected", "_selected_action": ["core__wait"], "post": "yes"}, follow=True
    )

    assert (add.status_code, delete.status_code) == (403, 403)
    assert _messages(bulk_delete) == ["No action selected."]  # delete_selected is not offered
    assert Tool.objects.count() == len(BUILTIN_IDS)


# --- ToolInvocation: the audit log, read-only -------------------------------------------


@pytest.fixture
def invocations():
    tenant = TenantFactory(slug="acme")
    other = TenantFactory(slug="globex")
    account, _key = service_account_with_key(tenant, name="agent")
    now = timezone.now()
    rows = [
        ToolInvocation.objects.create(
            tenant=tenant,
            service_account=account,
            tool_call_id="call_ok",
            run_id="run_1",
            tool_id="core__wait",
            decision="allow",
            ok=True,
            executed=True,
            started_at=now - timedelta(minutes=2),
            duration_ms=12,
        ),
        ToolInvocation.objects.create(
            tenant=tenant,
            service_account=account,
            tool_call_id="call_denied",
            run_id="run_1",
            tool_id="github__create_issue",
            decision="deny",
            ok=False,
            error_code="policy_denied",
            started_at=now - timedelta(minutes=1),
            duration_ms=1,
        ),
        ToolInvocation.objects.create(
            tenant=other,
            service_account=None,
            tool_call_id="call_other",
            run_id="run_2",
            tool_id="core__wait",
            decision="allow",
            ok=True,
            executed=True,
            started_at=now,
            duration_ms=5,
        ),
    ]
    return tenant, rows


def test_invocation_changelist_lists_newest_first(admin_client, invocations):
    _tenant, (ok_row, denied_row, other_row) = invocations

    response = admin_client.get(INVOCATION_CHANGELIST)

    assert response.status_code == 200
    assert _listed(response) == [str(other_row.pk), str(denied_row.pk), str(ok_row.pk)]
    assert response.context["cl"].show_full_result_count is False


def test_invocation_changelist_filters_and_searches(admin_client, invocations):
    tenant, (ok_row, denied_row, _other_row) = invocations

    by_tenant_and_tool = admin_client.get(
        INVOCATION_CHANGELIST, {"tenant__id__exact": tenant.pk, "tool_id": "core__wait"}
    )
    failures = admin_client.get(INVOCATION_CHANGELIST, {"ok__exact": "0", "error_code__exact": "policy_denied"})
    denied = admin_client.get(INVOCATION_CHANGELIST, {"decision__exact": "deny"})
    by_call_id = admin_client.get(INVOCATION_CHANGELIST, {"q": "call_ok"})
    by_run_id = admin_client.get(INVOCATION_CHANGELIST, {"q": "run_1"})
    partial_id = admin_client.get(INVOCATION_CHANGELIST, {"q": "call"})
    by_day = admin_client.get(
        INVOCATION_CHANGELIST,
        {"started_at__year": ok_row.started_at.year, "started_at__month": ok_row.started_at.month},
    )

    assert all(r.status_code == 200 for r in (by_tenant_and_tool, failures, denied, by_call_id, by_run_id, by_day))
    assert _listed(by_tenant_and_tool) == [str(ok_row.pk)]
    assert _listed(failures) == [str(denied_row.pk)]
    assert _listed(denied) == [str(denied_row.pk)]
    assert _listed(by_call_id) == [str(ok_row.pk)]
    assert _listed(by_run_id) == [str(denied_row.pk), str(ok_row.pk)]
    assert _listed(partial_id) == []  # ids match whole, not as substrings of a large table
    assert len(_listed(by_day)) == 3


def test_invocation_tool_filter_offers_known_tool_ids(admin_client, invocations):
    response = admin_client.get(INVOCATION_CHANGELIST)

    tool_filter = next(f for f in response.context["cl"].filter_specs if f.title == "tool")
    assert [value for value, _label in tool_filter.lookup_choices] == BUILTIN_IDS


def test_invocations_are_viewable_but_cannot_be_added_changed_or_deleted(admin_client, invocations):
    _tenant, (ok_row, _denied_row, _other_row) = invocations
    change_url = reverse("admin:tools_app_toolinvocation_change", args=[ok_row.pk])

    view = admin_client.get(change_url)
    change = admin_client.post(change_url, {"tool_id": "github__create_issue", "ok": ""})
    delete = admin_client.post(reverse("admin:tools_app_toolinvocation_delete", args=[ok_row.pk]), {"post": "yes"})
    add = admin_client.get(reverse("admin:tools_app_toolinvocation_add"))

    assert view.status_code == 200
    assert view.context["title"] == "View tool invocation"
    assert (change.status_code, delete.status_code, add.status_code) == (403, 403, 403)
    ok_row.refresh_from_db()
    assert (ok_row.tool_id, ok_row.ok) == ("core__wait", True)
    assert ToolInvocation.objects.count() == 3


def _queries_for(client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def test_invocation_changelist_queries_do_not_grow_with_rows(admin_client, invocations):
    tenant, (ok_row, _denied_row, _other_row) = invocations
    few = _queries_for(admin_client, INVOCATION_CHANGELIST)
    for n in range(5):
        ToolInvocation.objects.create(
            tenant=tenant,
            service_account=ok_row.service_account,
            tool_call_id=f"call_more_{n}",
            tool_id="core__wait",
            decision="allow",
            ok=True,
            started_at=timezone.now(),
        )

    assert _queries_for(admin_client, INVOCATION_CHANGELIST) == few


def test_the_add_toolset_page_says_where_agents_connect_in_plain_text(admin_client):
    page = admin_client.get(reverse("admin:tools_app_toolset_add")).content.decode()

    assert (
        "<div>Lower-case letters, digits, '-' and '_'. Agents connect to /mcp/t/ followed by this name.</div>" in page
    )
    assert "``" not in page
    assert "<name>" not in page
