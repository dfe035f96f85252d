"""The composition root's runner against the real database adapters."""

from __future__ import annotations

from dataclasses import replace

import pytest
from django.core.management import call_command

from config.runtime import build_runtime, redirect_guard
from core.netguard import UpstreamAddressRefused
from policies_app.governance import governance_bump, governance_cache
from runner.catalog import catalog_for
from runner.types import ErrorCode, ToolInvocationContext
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tools_app.models import Tool, ToolInvocation
from tools_app.search import CatalogSearchIndex

pytestmark = pytest.mark.django_db


@pytest.fixture
def caller():
    account, _key = service_account_with_key(TenantFactory(slug="acme"))
    return account


def _ctx(account, call_id: str) -> ToolInvocationContext:
    return ToolInvocationContext(
        run_id="run-1", tool_call_id=call_id, tenant_id=str(account.tenant_id), actor_id=str(account.id)
    )


def _enable(*tool_ids: str) -> None:
    Tool.objects.filter(pk__in=tool_ids).update(is_enabled=True)
    governance_bump()
    governance_cache.refresh()


def test_runtime_binds_every_builtin_tool_with_its_capabilities(settings):
    settings.TOOLGATE_GITHUB_API_URL = "http://127.0.0.1:9/api/"

    runtime = build_runtime()

    github = runtime.source.get("github__get_user")
    assert [tool.tool_id for tool in runtime.source.list()] == [
        "core__get_current_time",
        "core__wait",
        "github__create_issue",
        "github__get_user",
        "toolgate__search_tools",
    ]
    assert github.http is not None
    assert github.http.base_url == "http://127.0.0.1:9/api/"
    assert (github.catalog, runtime.source.get("toolgate__search_tools").catalog) == (None, runtime_catalog(runtime))


@pytest.mark.parametrize("allow_private", [False, True])
def test_the_github_capability_puts_cross_origin_redirects_to_the_address_guard(settings, allow_private):
    """Decided, not connected: a redirect from the provider to a private name or address is refused unless allowed."""
    settings.TOOLGATE_GITHUB_API_URL = "http://127.0.0.1:9/api/"
    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = allow_private
    http = build_runtime().source.get("github__get_user").http

    assert http is not None
    assert http._redirect_guard is redirect_guard
    for target in ("http://169.254.169.254/latest/meta-data/", "http://localhost:9/x", "http://10.1.2.3/"):
        if allow_private:
            redirect_guard(target)  # accepted: single-host installs and tests
        else:
            with pytest.raises(UpstreamAddressRefused):
                redirect_guard(target)


def runtime_catalog(runtime):
    """The catalog index the composition root bound (the one the search tool must have)."""
    index = runtime.source.get("toolgate__search_tools").catalog
    assert isinstance(index, CatalogSearchIndex)
    return index


def test_the_search_tool_ranks_the_catalog_of_the_call_it_serves(caller):
    """Through the real runner and database: policy, switches and the call's toolset narrow what it finds."""
    call_command("sync_tools")
    _enable("core__get_current_time", "core__wait", "github__get_user", "toolgate__search_tools")
    Tool.objects.filter(pk="github__get_user").update(is_enabled=False)
    ToolPolicyFactory(
        tenant=caller.tenant,
        allowed_tools=["core__get_current_time", "core__wait", "github__get_user", "toolgate__search_tools"],
    )
    other = TenantFactory(slug="globex")
    ToolPolicyFactory(tenant=other, allowed_tools=["github__create_issue", "toolgate__search_tools"])
    _enable("github__create_issue")
    runner = build_runtime().runner
    query = {"query": "github user issue time wait search tools", "limit": 50}

    everything = runner.exec("toolgate__search_tools", query, _ctx(caller, "s1"))
    scoped_ctx = replace(_ctx(caller, "s2"), tool_scope=frozenset({"core__wait", "toolgate__search_tools"}))
    scoped = runner.exec("toolgate__search_tools", query, scoped_ctx)

    assert [tool["name"] for tool in everything.value["tools"]] == ["core__get_current_time", "core__wait"]
    assert [tool["name"] for tool in scoped.value["tools"]] == ["core__wait"]
    rows = list(ToolInvocation.objects.order_by("id").values_list("tool_id", "decision", "executed", "ok"))
    assert rows == [("toolgate__search_tools", "allow", True, True)] * 2


def test_every_outcome_leaves_one_audit_row_deny_by_default(caller):
    call_command("sync_tools")
    runner = build_runtime().runner
    governance_cache.refresh()

    unknown = runner.exec("core__nope", {}, _ctx(caller, "c1"))
    disabled = runner.exec("core__get_current_time", {}, _ctx(caller, "c2"))
    _enable("core__get_current_time")
    no_policy = runner.exec("core__get_current_time", {}, _ctx(caller, "c3"))
    ToolPolicyFactory(tenant=caller.tenant, allowed_tools=["core__get_current_time"])
    governance_cache.refresh()
    allowed = runner.exec("core__get_current_time", {}, _ctx(caller, "c4"))

    assert [r.error_code for r in (unknown, disabled, no_policy, allowed)] == [
        ErrorCode.UNAVAILABLE,
        ErrorCode.POLICY_DENIED,
        ErrorCode.POLICY_DENIED,
        None,
    ]
    rows = list(
        ToolInvocation.objects.order_by("id").values_list("tool_call_id", "error_code", "decision", "ok", "executed")
    )
    assert rows == [
        ("c1", "unavailable", "not_decided", False, False),
        ("c2", "policy_denied", "deny", False, False),
        ("c3", "policy_denied", "deny", False, False),
        ("c4", "", "allow", True, True),
    ]


def test_repeat_of_an_executed_call_replays_and_a_refused_one_is_decided_afresh(caller):
    call_command("sync_tools")
    runner = build_runtime().runner
    _enable("core__wait")

    refused = runner.exec("core__wait", {"ms": 1}, _ctx(caller, "same"))
    ToolPolicyFactory(tenant=caller.tenant, allowed_tools=["core__wait"])
    governance_cache.refresh()
    first = runner.exec("core__wait", {"ms": 1}, _ctx(caller, "same"))
    again = runner.exec("core__wait", {"ms": 1}, _ctx(caller, "same"))
    conflict = runner.exec("core__wait", {"ms": 2}, _ctx(caller, "same"))

    assert refused.error_code is ErrorCode.POLICY_DENIED
    assert (first.ok, again.ok, again.value, again.started_at) == (True, True, first.value, first.started_at)
    assert conflict.error_code is ErrorCode.IDEMPOTENCY_CONFLICT
    assert ToolInvocation.objects.filter(tool_call_id="same", executed=True).count() == 1
    assert list(
        ToolInvocation.objects.filter(tool_call_id="same").order_by("id").values_list("decision", flat=True)
    ) == [
        "deny",
        "allow",
        "replayed",
        "allow",  # policy allowed it; the claim refused it (idempotency is decided after policy)
    ]


def test_catalog_is_empty_without_a_policy_even_for_enabled_tools(caller):
    call_command("sync_tools")
    _enable(*Tool.objects.values_list("id", flat=True))
    runtime = build_runtime()

    assert catalog_for(_ctx(caller, "c1"), runtime.source, runtime.policy) == []


def test_warm_exec_query_budget(caller, django_assert_max_num_queries):
    call_command("sync_tools")
    _enable("core__get_current_time")
    ToolPolicyFactory(tenant=caller.tenant, allowed_tools=["core__get_current_time"])
    runner = build_runtime().runner
    runner.exec("core__get_current_time", {}, _ctx(caller, "warm-up"))

    # the runner's own freshness check (a generation read without Redis) + claim insert +
    # audit update; the test's transaction adds the claim's SAVEPOINT/RELEASE pair (in
    # autocommit production they are not queries)
    with django_assert_max_num_queries(5):
        result = runner.exec("core__get_current_time", {}, _ctx(caller, "c1"))

    assert result.ok is True
