"""A toolset's scope (`ToolInvocationContext.tool_scope`) in the runner: it only narrows."""

from __future__ import annotations

from runner.catalog import catalog_for
from runner.types import ErrorCode, ToolInvocationContext
from tests.runner import tools
from tests.runner.fakes import ACTOR, TENANT, make_harness


def test_a_tool_outside_the_scope_is_looked_up_as_unknown_and_audited_without_asking_the_policy():
    h = make_harness(tools.ALL)

    result = h.exec("test__echo", {"text": "hi", "repeat": 1}, tool_scope=frozenset({"test__bad_output"}))

    assert (result.ok, result.error_code) == (False, ErrorCode.UNAVAILABLE)
    assert result.executed is False
    [record] = h.audit.records
    assert (record.tool_id, record.error_code) == ("test__echo", ErrorCode.UNAVAILABLE)
    assert all(name != "test__echo" for name, _digest in h.policy.asked)  # never decided on


def test_the_unknown_tool_hint_names_only_tools_inside_the_scope():
    h = make_harness(tools.ALL)

    result = h.exec("test__ecoh", tool_scope=frozenset({"test__bad_output"}))

    assert "test__echo" not in (result.safe_message or "")


def test_a_pending_tool_outside_the_scope_is_unknown_not_disabled():
    h = make_harness(tools.ALL)
    h.source.pending.add("mcp__acme__add")

    result = h.exec("mcp__acme__add", tool_scope=frozenset({"test__echo"}))

    assert (result.error_code, result.safe_message) != (ErrorCode.POLICY_DENIED, "tool is disabled")
    assert result.error_code == ErrorCode.UNAVAILABLE


def test_a_tool_inside_the_scope_runs_as_without_one():
    h = make_harness(tools.ALL)

    result = h.exec("test__echo", {"text": "hi", "repeat": 2}, tool_scope=frozenset({"test__echo"}))

    assert result.ok is True
    assert result.value == {"text": "hihi"}


def test_a_scope_never_adds_a_tool_the_policy_does_not_allow():
    h = make_harness(tools.ALL, allowed={"test__echo"})
    ctx = ToolInvocationContext(
        run_id="", tool_call_id="catalog", tenant_id=TENANT, actor_id=ACTOR, tool_scope=frozenset({"test__bad_output"})
    )

    assert catalog_for(ctx, h.source, h.policy) == []
    assert h.exec("test__bad_output", tool_scope=frozenset({"test__bad_output"})).error_code == ErrorCode.POLICY_DENIED


def test_a_tool_outside_the_scope_is_never_offered_a_neighbour_that_only_shares_its_server_prefix():
    h = make_harness((*tools.ALL, tools.WHERE), allowed={"test__echo", "test__where"})

    outside = h.exec("test__echo", tool_scope=frozenset({"test__where"}))
    bare = h.exec("echo", tool_scope=frozenset({"test__echo", "test__where"}))

    assert outside.safe_message == (
        "no such tool; the catalog (GET /api/v1/tools, or MCP tools/list) lists the tools you may call"
    )
    assert bare.safe_message == "no such tool; did you mean 'test__echo'?"
