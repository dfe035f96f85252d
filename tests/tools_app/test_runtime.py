"""The composition root's runner against the real database adapters."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from config.runtime import build_runtime
from runner.catalog import catalog_for
from runner.types import ErrorCode, ToolInvocationContext
from tools_app.models import Tool, ToolInvocation

pytestmark = pytest.mark.django_db


def _ctx(call_id: str) -> ToolInvocationContext:
    return ToolInvocationContext(run_id="run-1", tool_call_id=call_id, tenant_id="t1", actor_id="sa1")


def test_runtime_binds_every_builtin_tool_with_its_capabilities(settings):
    settings.TOOLGATE_GITHUB_API_URL = "http://127.0.0.1:9/api/"

    runtime = build_runtime()

    github = runtime.source.get("github__get_user")
    assert [tool.tool_id for tool in runtime.source.list()] == [
        "core__get_current_time",
        "core__wait",
        "github__create_issue",
        "github__get_user",
    ]
    assert github.http is not None
    assert github.http.base_url == "http://127.0.0.1:9/api/"


def test_every_outcome_leaves_one_audit_row_and_disabled_tools_are_denied():
    call_command("sync_tools")
    runner = build_runtime().runner

    unknown = runner.exec("core__nope", {}, _ctx("c1"))
    disabled = runner.exec("core__get_current_time", {}, _ctx("c2"))
    Tool.objects.filter(pk="core__get_current_time").update(is_enabled=True)
    no_policy = runner.exec("core__get_current_time", {}, _ctx("c3"))

    assert [r.error_code for r in (unknown, disabled, no_policy)] == [
        ErrorCode.UNAVAILABLE,
        ErrorCode.POLICY_DENIED,
        ErrorCode.POLICY_DENIED,
    ]
    rows = list(ToolInvocation.objects.order_by("id").values_list("tool_call_id", "error_code", "decision", "ok"))
    assert rows == [
        ("c1", "unavailable", "not_decided", False),
        ("c2", "policy_denied", "deny", False),
        ("c3", "policy_denied", "deny", False),
    ]


def test_catalog_is_empty_without_a_policy_even_for_enabled_tools():
    call_command("sync_tools")
    Tool.objects.update(is_enabled=True)
    runtime = build_runtime()

    assert catalog_for(_ctx("c1"), runtime.source, runtime.policy) == []


def test_audit_query_budget_for_a_denied_call(django_assert_num_queries):
    call_command("sync_tools")
    runner = build_runtime().runner

    with django_assert_num_queries(2):  # kill switch read + audit insert
        runner.exec("core__get_current_time", {}, _ctx("c1"))
