"""Toolsets over REST and in the runner: they narrow the catalog and calls, never widen them."""

from __future__ import annotations

import pytest

from changes_app.models import Change
from config.runtime import runtime
from core.errors import AppError
from policies_app.governance import governance_bump
from policies_app.selectors import caller_for_key
from runner.types import ErrorCode
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import api_client, enable_tools
from tools_app.models import Tool, ToolInvocation
from tools_app.services import ExecRequest, tool_exec
from tools_app.toolsets import toolset_delete, toolset_save

pytestmark = pytest.mark.django_db


@pytest.fixture
def acme():
    """acme's agent may run core__get_current_time, core__wait and github__get_user (all enabled)."""
    tenant = TenantFactory(slug="acme")
    enable_tools("core__get_current_time", "core__wait", "github__get_user", "github__create_issue")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["core__get_current_time", "core__wait", "github__get_user"])
    _account, key = service_account_with_key(tenant, name="agent")
    return tenant, key


def names(response) -> list[str]:
    assert response.status_code == 200, response.json()
    return [tool["name"] for tool in response.json()["tools"]]


def test_a_toolset_narrows_the_catalog_to_its_ids_and_tags(acme):
    tenant, key = acme
    toolset_save(tenant_id=tenant.pk, name="clock", tool_ids=["core__wait"], tags=["time"])

    assert names(api_client(key).get("/api/v1/tools?toolset=clock")) == ["core__get_current_time", "core__wait"]
    assert names(api_client(key).get("/api/v1/tools")) == ["core__get_current_time", "core__wait", "github__get_user"]


def test_a_toolset_listing_a_tool_outside_the_policy_does_not_widen_it(acme):
    tenant, key = acme
    toolset_save(tenant_id=tenant.pk, name="gh", tags=["github"])  # github__create_issue: enabled, not allowed
    toolset_save(tenant_id=tenant.pk, name="outside", tool_ids=["github__create_issue"])

    assert names(api_client(key).get("/api/v1/tools?toolset=gh")) == ["github__get_user"]
    empty = api_client(key).get("/api/v1/tools?toolset=outside").json()
    assert empty["tools"] == []
    assert empty["hint"].startswith("the toolset 'outside' holds no tool that this caller may run now")


def test_a_toolset_does_not_show_a_disabled_tool(acme):
    tenant, key = acme
    toolset_save(tenant_id=tenant.pk, name="clock", tool_ids=["core__wait", "core__get_current_time"])
    Tool.objects.filter(pk="core__wait").update(is_enabled=False)
    governance_bump()

    assert names(api_client(key).get("/api/v1/tools?toolset=clock")) == ["core__get_current_time"]


def test_another_tenants_toolset_is_unknown_like_a_name_nobody_uses(acme):
    _tenant, key = acme
    other = TenantFactory(slug="globex")
    toolset_save(tenant_id=other.pk, name="theirs", tool_ids=["core__wait"])

    for name in ("theirs", "nobody-uses-this"):
        response = api_client(key).get(f"/api/v1/tools?toolset={name}")
        assert response.status_code == 404
        assert response.json()["error_code"] == "not_found"
        assert response.json()["safe_message"] == "no such toolset"


def test_a_global_toolset_serves_every_tenant_and_a_tenants_own_hides_it(acme):
    tenant, key = acme
    toolset_save(tenant_id=None, name="basics", tool_ids=["core__wait"])
    assert names(api_client(key).get("/api/v1/tools?toolset=basics")) == ["core__wait"]

    toolset_save(tenant_id=tenant.pk, name="basics", tool_ids=["github__get_user"])
    assert names(api_client(key).get("/api/v1/tools?toolset=basics")) == ["github__get_user"]


def test_a_toolset_change_reaches_the_next_call(acme):
    tenant, key = acme
    toolset = toolset_save(tenant_id=tenant.pk, name="clock", tool_ids=["core__wait"])
    assert names(api_client(key).get("/api/v1/tools?toolset=clock")) == ["core__wait"]

    toolset_save(toolset=toolset, tenant_id=tenant.pk, name="clock", tool_ids=["core__get_current_time"])
    assert names(api_client(key).get("/api/v1/tools?toolset=clock")) == ["core__get_current_time"]

    toolset_delete(toolset=toolset)
    assert api_client(key).get("/api/v1/tools?toolset=clock").status_code == 404


def test_toolset_writes_are_in_the_change_log(acme):
    tenant, _key = acme
    toolset = toolset_save(tenant_id=tenant.pk, name="clock", tool_ids=["core__wait"])
    toolset_save(toolset=toolset, tenant_id=tenant.pk, name="clock", tool_ids=["core__wait"], tags=["time"])
    toolset_delete(toolset=toolset)

    changes = list(Change.objects.filter(object_type="tools_app.toolset").order_by("id"))
    assert [(change.action, change.before, change.after) for change in changes] == [
        (
            "toolset.create",
            {},
            {"tenant": tenant.pk, "name": "clock", "description": "", "tool_ids": ["core__wait"], "tags": []},
        ),
        ("toolset.update", {"tags": []}, {"tags": ["time"]}),
        (
            "toolset.delete",
            {"tenant": tenant.pk, "name": "clock", "description": "", "tool_ids": ["core__wait"], "tags": ["time"]},
            {},
        ),
    ]
    assert {change.tenant_id for change in changes} == {tenant.pk}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "Bad Name", "tool_ids": ["core__wait"]}, "name must be"),
        ({"name": "ok", "tool_ids": ["core__wiat"]}, "unknown tool id 'core__wiat'"),
        ({"name": "ok", "tags": ["Not A Tag"]}, "tags must be"),
        ({"name": "ok"}, "a toolset must name at least one tool id or tag"),
    ],
)
def test_a_toolset_that_makes_no_sense_is_refused_and_nothing_is_written(acme, fields, message):
    tenant, _key = acme
    with pytest.raises(AppError, match=message):
        toolset_save(tenant_id=tenant.pk, **fields)
    assert not Change.objects.filter(object_type="tools_app.toolset").exists()


def test_a_duplicate_name_in_one_tenant_is_refused(acme):
    tenant, _key = acme
    toolset_save(tenant_id=tenant.pk, name="clock", tool_ids=["core__wait"])
    with pytest.raises(AppError, match="already exists"):
        toolset_save(tenant_id=tenant.pk, name="clock", tool_ids=["core__wait"])


def test_the_runner_refuses_a_tool_outside_the_scope_as_unknown_and_audits_it(acme):
    """A tool the policy allows but the toolset leaves out: `unavailable`, exactly as an unknown id, audited."""
    _tenant, key = acme
    caller = caller_for_key(key=key)
    scope = frozenset({"core__get_current_time"})

    outside = tool_exec(
        runner=runtime().runner,
        caller=caller,
        request=ExecRequest(tool_id="core__wait", args={"ms": 0}, tool_call_id="scoped-1"),
        tool_scope=scope,
    )
    unknown = tool_exec(
        runner=runtime().runner,
        caller=caller,
        request=ExecRequest(tool_id="core__nothing", args={}, tool_call_id="scoped-2"),
        tool_scope=scope,
    )
    inside = tool_exec(
        runner=runtime().runner,
        caller=caller,
        request=ExecRequest(tool_id="core__get_current_time", args={}, tool_call_id="scoped-3"),
        tool_scope=scope,
    )

    assert (outside.ok, outside.error_code) == (False, ErrorCode.UNAVAILABLE)
    assert (unknown.ok, unknown.error_code) == (False, ErrorCode.UNAVAILABLE)
    assert "core__wait" not in outside.safe_message  # no hint toward a tool outside the scope
    assert inside.ok
    rows = dict(ToolInvocation.objects.values_list("tool_call_id", "error_code"))
    assert rows == {"scoped-1": "unavailable", "scoped-2": "unavailable", "scoped-3": ""}
