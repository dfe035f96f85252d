"""The built-in tools, run through the whole runner pipeline.

Tools are bound by the composition root's `bind_tools`, with GitHub's base URL
pointed at a real HTTP server on loopback, so what GitHub would receive (and
what it must not receive) is checked on the wire. The runner's ports are small
in-memory fakes: no database is touched.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from config.runtime import bind_tools
from runner.bound import BoundTool
from runner.defaults import Unlimited
from runner.errors import BrokerError, ContractError
from runner.grants import GRANT_REFUSED, NOT_GRANTED
from runner.pipeline import ToolRunner, default_stages
from runner.ports import GrantView, PolicyDecision
from runner.schema import to_tool_spec
from runner.types import (
    Budgets,
    Decision,
    ErrorCode,
    EventKind,
    FieldError,
    ToolExecResult,
    ToolInvocationContext,
    ToolSpec,
)
from tests.runner.fakes import FakeBroker, FakeGovernance, FixedClock, ListAudit, ListEvents
from tests.support.loopback import LoopbackServer, RecordedRequest, json_answer
from tools_app.registry import code_registry

TOKEN = "ghp_canary0token0that0must0stay0inside"
TENANT = "tenant-a"
ACTOR = "actor-1"
GRANT_ID = "grant-1"
CONNECTION = "5b0c1a52-3d3c-4b8e-9a40-0d6f6c1f7e11"
OTHER_CONNECTION = "8e4f8d0e-5a8b-4f5c-8d8f-6a1f3a9b2c44"
NOW = datetime(2026, 11, 22, 12, 0, 0, 123456, tzinfo=UTC)
NOW_EPOCH_MS = 1_795_348_800_123
NOT_FOUND_MESSAGE = "not found on GitHub, or not visible to this connection"


# --- in-memory ports ----------------------------------------------------------------------


@dataclass
class AllowAll:
    budgets: Budgets = field(default_factory=Budgets)

    def decide(self, ctx: ToolInvocationContext, spec: ToolSpec, *, args_sha256: str | None) -> PolicyDecision:
        return PolicyDecision(Decision.ALLOW, budgets=self.budgets)


@dataclass
class OneGrant:
    grant: GrantView

    def get(self, grant_id: str) -> GrantView | None:
        return self.grant if grant_id == self.grant.grant_id else None


@dataclass
class FixedCatalog:
    """The search tool's index: a fixed catalog, ranked as listed; records every context it was asked for."""

    specs: list[ToolSpec] = field(default_factory=list)
    asked: list[tuple[ToolInvocationContext, str, int]] = field(default_factory=list)

    def search(self, ctx: ToolInvocationContext, query: str, limit: int) -> list[ToolSpec]:
        self.asked.append((ctx, query, limit))
        return self.specs[:limit]


class EnabledSource:
    """The code tools, all switched on (the real source asks the database)."""

    def __init__(self, tools: Mapping[str, BoundTool]) -> None:
        self._tools = dict(tools)

    def get(self, tool_id: str) -> BoundTool | None:
        return self._tools.get(tool_id)

    def list(self) -> list[BoundTool]:
        return list(self._tools.values())

    def is_enabled(self, tool_id: str) -> bool:
        return True

    def is_pending(self, tool_id: str) -> bool:
        return False


@dataclass
class Harness:
    runner: ToolRunner
    broker: FakeBroker
    audit: ListAudit
    events: ListEvents
    catalog: FixedCatalog
    policy: AllowAll

    def exec(self, tool_id: str, args: Any = None, **ctx_fields: Any) -> ToolExecResult:
        ctx = ToolInvocationContext(
            run_id="run-1", tool_call_id="call-1", tenant_id=TENANT, actor_id=ACTOR, **ctx_fields
        )
        return self.runner.exec(tool_id, {} if args is None else args, ctx)

    def exec_github(self, tool_id: str, args: Any = None, **ctx_fields: Any) -> ToolExecResult:
        connection: dict[str, Any] = {
            "connection_id": CONNECTION,
            "grant_id": GRANT_ID,
            "declared_connection_ids": (CONNECTION,),
        }
        return self.exec(tool_id, args, **{**connection, **ctx_fields})

    def everything_recorded(self, result: ToolExecResult) -> str:
        """All the runner let out of this call: the answer, the audit rows, the events."""
        return repr(result) + repr(self.audit.records) + repr(self.events.events)


def make_harness(
    github_url: str,
    *,
    budgets: Budgets | None = None,
    broker_error: BrokerError | None = None,
    grant: GrantView | None = None,
) -> Harness:
    catalog = FixedCatalog()
    source = EnabledSource(bind_tools(code_registry(), {"github": github_url}, catalog=catalog))
    grant = grant or GrantView(
        grant_id=GRANT_ID, tenant_id=TENANT, actor_id=ACTOR, connection_ids=frozenset({CONNECTION})
    )
    broker, audit, events, clock = (
        FakeBroker(token=TOKEN, error=broker_error),
        ListAudit(),
        ListEvents(),
        FixedClock(NOW),
    )
    policy = AllowAll(budgets or Budgets())
    stages = default_stages(
        governance=FakeGovernance(),
        source=source,
        policy=policy,
        limiter=Unlimited(),
        grants=OneGrant(grant),
        broker=broker,
        audit=audit,
        events=events,
        clock=clock,
    )
    return Harness(ToolRunner(stages, clock), broker, audit, events, catalog, policy)


@pytest.fixture
def github() -> Iterator[LoopbackServer]:
    with LoopbackServer() as server:
        yield server


@pytest.fixture
def harness(github: LoopbackServer) -> Harness:
    return make_harness(github.url)


def assert_refused_before_running(harness: Harness, result: ToolExecResult) -> None:
    assert result.executed is False
    assert harness.events.kinds == [EventKind.TOOL_CALL_RESULT]  # no start event: nothing ran
    [record] = harness.audit.records
    assert (record.ok, record.error_code, record.executed) == (False, result.error_code, False)


# --- core__get_current_time -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({}, {"iso": "2026-11-22T12:00:00.123456+00:00", "epoch_ms": NOW_EPOCH_MS, "timezone": "UTC"}),
        ({"timezone": "UTC"}, {"iso": "2026-11-22T12:00:00.123456+00:00", "epoch_ms": NOW_EPOCH_MS, "timezone": "UTC"}),
        (
            {"timezone": "Europe/Paris"},
            {"iso": "2026-11-22T13:00:00.123456+01:00", "epoch_ms": NOW_EPOCH_MS, "timezone": "Europe/Paris"},
        ),
        (
            {"timezone": "Asia/Kolkata"},
            {"iso": "2026-11-22T17:30:00.123456+05:30", "epoch_ms": NOW_EPOCH_MS, "timezone": "Asia/Kolkata"},
        ),
    ],
    ids=["default", "utc", "paris", "kolkata"],
)
def test_get_current_time_reads_the_clock_in_the_zone(harness: Harness, args: dict, expected: dict) -> None:
    result = harness.exec("core__get_current_time", args)

    assert result.ok is True, result
    assert result.value == expected
    assert (result.error_code, result.executed, result.started_at, result.ended_at) == (None, True, NOW, NOW)
    assert harness.events.kinds == [EventKind.TOOL_CALL_START, EventKind.TOOL_CALL_RESULT]
    [record] = harness.audit.records
    assert (record.tool_id, record.ok, record.decision, record.value) == (
        "core__get_current_time",
        True,
        Decision.ALLOW,
        expected,
    )


UNKNOWN_ZONE = "unknown IANA time zone; send a tz database name such as Europe/Paris or UTC"


@pytest.mark.parametrize("zone", ["Mars/Base", "../../etc/passwd", "/etc/localtime", "Europe/../../../etc/passwd"])
def test_get_current_time_refuses_unknown_zones_without_echoing_them(harness: Harness, zone: str) -> None:
    result = harness.exec("core__get_current_time", {"timezone": zone})

    assert (result.ok, result.error_code) == (False, ErrorCode.VALIDATION)
    assert result.safe_message == "arguments do not match the tool's schema"
    assert result.errors == (FieldError(path="timezone", message=UNKNOWN_ZONE),)
    assert zone not in harness.everything_recorded(result)
    assert_refused_before_running(harness, result)


@pytest.mark.parametrize(
    ("args", "expected_errors"),
    [
        (
            {"timezone": "UTC", "extra": 1},
            (
                FieldError(
                    path="(unknown field)", message="unknown field; the tool's input_schema lists the fields it accepts"
                ),
            ),
        ),
        ({"timezone": 1}, (FieldError(path="timezone", message="must be a string, not a number"),)),
        ({"timezone": "X" * 65}, (FieldError(path="timezone", message="must be at most 64 characters"),)),
    ],
    ids=["extra-arg", "not-a-string", "too-long"],
)
def test_get_current_time_validates_its_arguments(harness: Harness, args: dict, expected_errors: tuple) -> None:
    result = harness.exec("core__get_current_time", args)

    assert (result.ok, result.error_code, result.errors) == (False, ErrorCode.VALIDATION, expected_errors)
    assert_refused_before_running(harness, result)


# --- core__wait -------------------------------------------------------------------------------------


@pytest.mark.parametrize("ms", [0, 20])
def test_wait_returns_what_it_waited(harness: Harness, ms: int) -> None:
    started = time.monotonic()
    result = harness.exec("core__wait", {"ms": ms})
    elapsed = time.monotonic() - started

    assert (result.ok, result.value) == (True, {"waited_ms": ms})
    assert ms / 1000 <= elapsed < ms / 1000 + 0.5


@pytest.mark.parametrize(
    ("args", "path"),
    [({"ms": -1}, "ms"), ({"ms": 60_001}, "ms"), ({"ms": "20"}, "ms"), ({"ms": 1.5}, "ms"), ({}, "ms")],
    ids=["negative", "over-a-minute", "string", "float", "missing"],
)
def test_wait_validates_ms(harness: Harness, args: dict, path: str) -> None:
    result = harness.exec("core__wait", args)

    assert (result.ok, result.error_code) == (False, ErrorCode.VALIDATION)
    assert [error.path for error in result.errors] == [path]
    assert_refused_before_running(harness, result)


def test_wait_past_the_policy_budget_times_out_within_the_budget(github: LoopbackServer) -> None:
    harness = make_harness(github.url, budgets=Budgets(max_runtime_ms=200))

    started = time.monotonic()
    result = harness.exec("core__wait", {"ms": 2000})
    elapsed = time.monotonic() - started

    assert (result.ok, result.error_code) == (False, ErrorCode.TIMEOUT)
    assert result.safe_message == "the tool ran past its 200 ms budget"
    assert result.executed is True
    assert elapsed < 0.2 + 0.1
    [record] = harness.audit.records
    assert (record.error_code, record.executed) == (ErrorCode.TIMEOUT, True)


# --- github__get_user ---------------------------------------------------------------------------------


def github_user(request: RecordedRequest) -> tuple[int, dict[str, str], bytes]:
    """GitHub's /user, plus fields the allowlist must drop (one echoes the credential back)."""
    return json_answer(
        200,
        {
            "login": "octocat",
            "id": 583231,
            "name": "The Octocat",
            "html_url": "https://github.com/octocat",
            "email": "octocat@example.com",
            "plan": {"name": "pro", "private_repos": 9999},
            "seen_authorization": request.headers.get("authorization", ""),
        },
    )


def test_get_user_sends_the_token_and_returns_only_allowlisted_fields(github: LoopbackServer, harness: Harness) -> None:
    github.handle("GET", "/user", github_user)

    result = harness.exec_github("github__get_user")

    assert result.ok is True, result
    assert result.value == {
        "login": "octocat",
        "id": 583231,
        "name": "The Octocat",
        "html_url": "https://github.com/octocat",
    }
    [request] = github.requests
    assert (request.method, request.target, request.body) == ("GET", "/user", b"")
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    assert harness.broker.resolved == [CONNECTION]
    recorded = harness.everything_recorded(result)
    assert TOKEN not in recorded
    assert "octocat@example.com" not in recorded
    assert "private_repos" not in recorded


def test_get_user_with_a_null_name(github: LoopbackServer, harness: Harness) -> None:
    github.route(
        "GET", "/user", json={"login": "ghost", "id": 10137, "name": None, "html_url": "https://github.com/ghost"}
    )

    result = harness.exec_github("github__get_user")

    assert result.value == {"login": "ghost", "id": 10137, "name": None, "html_url": "https://github.com/ghost"}


def test_get_user_answer_missing_fields_is_output_invalid(github: LoopbackServer, harness: Harness) -> None:
    github.route("GET", "/user", json={"login": "octocat", "token": TOKEN})

    result = harness.exec_github("github__get_user")

    assert (result.ok, result.error_code) == (False, ErrorCode.OUTPUT_INVALID)
    assert {error.path for error in result.errors} == {"id", "html_url"}
    assert TOKEN not in harness.everything_recorded(result)


def test_get_user_takes_no_arguments(github: LoopbackServer, harness: Harness) -> None:
    result = harness.exec_github("github__get_user", {"login": "someone-else"})

    assert (result.error_code, result.errors) == (
        ErrorCode.VALIDATION,
        (
            FieldError(
                path="(unknown field)", message="unknown field; the tool's input_schema lists the fields it accepts"
            ),
        ),
    )
    assert github.requests == []
    assert harness.broker.resolved == []  # arguments are checked before any credential is touched


# The threads that opened a connection to GitHub, as the interpreter reports each socket.connect.
_CONNECTS: list[tuple[str, int]] = []


def _record_connect(event: str, args: tuple) -> None:
    if event == "socket.connect" and isinstance(args[1], tuple) and len(args[1]) == 2:
        _CONNECTS.append((threading.current_thread().name, args[1][1]))


sys.addaudithook(_record_connect)


def connecting_threads(port: int) -> list[str]:
    return [name for name, to_port in _CONNECTS if to_port == port]


def test_get_user_is_sent_from_the_calling_thread_not_handed_to_the_loop(github: LoopbackServer) -> None:
    github.handle("GET", "/user", github_user)
    harness = make_harness(github.url)
    _CONNECTS.clear()

    result = harness.exec_github("github__get_user")

    assert result.ok, result
    assert connecting_threads(github.port) == [threading.current_thread().name]


def test_with_a_proxy_get_user_goes_through_the_loop_and_answers_the_same(github: LoopbackServer, monkeypatch) -> None:
    github.handle("GET", "/user", github_user)
    direct = make_harness(github.url).exec_github("github__get_user")
    with LoopbackServer() as proxy:
        proxy.handle("GET", f"{github.url}/user", github_user)
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", "")
        harness = make_harness(github.url)
        _CONNECTS.clear()

        proxied = harness.exec_github("github__get_user")

        threads = connecting_threads(proxy.port)
    assert proxied.ok, proxied
    assert proxied.value == direct.value
    assert len(threads) == 1
    assert threads != [threading.current_thread().name]  # the loop's thread
    assert [r.path for r in github.requests] == ["/user"]  # the direct call only
    assert [r.target for r in proxy.requests] == [f"{github.url}/user"]
    assert proxy.requests[0].headers["authorization"] == f"Bearer {TOKEN}"


@pytest.mark.parametrize("proxied", [False, True], ids=["thread", "loop"])
def test_get_user_against_a_stalled_github_times_out_at_the_policy_budget(
    github: LoopbackServer, proxied: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()

    def stall_after_the_first(request: RecordedRequest) -> tuple[int, dict[str, str], bytes]:
        if len(reached.requests) > 1:
            release.wait(10)
        return github_user(request)

    with LoopbackServer() as proxy:
        reached = proxy if proxied else github
        reached.handle("GET", f"{github.url}/user" if proxied else "/user", stall_after_the_first)
        if proxied:  # the blocking path declines: the loop's budget cuts the call
            monkeypatch.setenv("HTTP_PROXY", proxy.url)
            monkeypatch.setenv("NO_PROXY", "")
        harness = make_harness(github.url)
        # a first call under the default budget: on the loop, making its client may take a while on a busy machine
        assert harness.exec_github("github__get_user").ok
        harness.audit.records.clear()
        harness.policy.budgets = Budgets(max_runtime_ms=300)

        started = time.monotonic()
        try:
            result = harness.exec_github("github__get_user")
            elapsed = time.monotonic() - started
        finally:
            release.set()
        requests = list(reached.requests)

    assert (result.error_code, result.safe_message) == (ErrorCode.TIMEOUT, "the tool ran past its 300 ms budget")
    assert elapsed < 0.3 + 0.1
    assert len(requests) == 2
    [record] = harness.audit.records
    assert (record.ok, record.executed, record.error_code) == (False, True, ErrorCode.TIMEOUT)
    assert record.safe_message == "the tool ran past its 300 ms budget"
    assert TOKEN not in harness.everything_recorded(result)


# --- github__create_issue ---------------------------------------------------------------------------


ISSUE_ARGS = {"owner": "o", "repo": "r", "title": "Crash on start", "body": "Steps to reproduce"}


def test_create_issue_posts_title_and_body_and_returns_number_and_url(github: LoopbackServer, harness: Harness) -> None:
    github.route(
        "POST",
        "/repos/o/r/issues",
        status=201,
        json={
            "number": 42,
            "html_url": "https://github.com/o/r/issues/42",
            "id": 1,
            "node_id": "I_kwDO",
            "user": {"login": "octocat"},
            "body": "Steps to reproduce",
        },
    )

    result = harness.exec_github("github__create_issue", ISSUE_ARGS)

    assert result.ok is True, result
    assert result.value == {"number": 42, "html_url": "https://github.com/o/r/issues/42"}
    [request] = github.requests
    assert (request.method, request.target) == ("POST", "/repos/o/r/issues")
    assert request.json() == {"title": "Crash on start", "body": "Steps to reproduce"}
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    assert request.headers["content-type"] == "application/json"
    assert TOKEN not in harness.everything_recorded(result)


def test_create_issue_body_defaults_to_empty(github: LoopbackServer, harness: Harness) -> None:
    github.route(
        "POST", "/repos/o/r/issues", status=201, json={"number": 1, "html_url": "https://github.com/o/r/issues/1"}
    )

    harness.exec_github("github__create_issue", {"owner": "o", "repo": "r", "title": "t"})

    assert github.requests[0].json() == {"title": "t", "body": ""}


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (401, "GitHub rejected the connection's credentials"),
        (403, "GitHub refused access (permissions or rate limit)"),
        (404, NOT_FOUND_MESSAGE),
        (410, "issues are disabled for this repository"),
        (422, "GitHub refused the request as invalid"),
        (500, "GitHub answered HTTP 500"),
        (200, "GitHub answered HTTP 200"),  # create answers 201; anything else is a failure
    ],
)
def test_create_issue_failure_is_described_by_status_never_by_body(
    github: LoopbackServer, harness: Harness, status: int, message: str
) -> None:
    upstream_text = "internal-repo-codename-zephyr"
    github.route("POST", "/repos/o/r/issues", status=status, json={"message": f"Not Found {upstream_text}"})

    result = harness.exec_github("github__create_issue", ISSUE_ARGS)

    assert (result.ok, result.error_code, result.safe_message) == (False, ErrorCode.EXECUTION, message)
    assert result.executed is True
    recorded = harness.everything_recorded(result)
    assert upstream_text not in recorded
    assert TOKEN not in recorded
    assert len(github.requests) == 1


@pytest.mark.parametrize(
    ("body", "headers", "message"),
    [
        (b"[1, 2]", {"Content-Type": "application/json"}, "GitHub answered with an unexpected body"),
        (b"<html>oops</html>", {"Content-Type": "text/html"}, "upstream answered with a body that is not JSON"),
    ],
)
def test_create_issue_with_an_unexpected_201_body(
    github: LoopbackServer, harness: Harness, body: bytes, headers: dict, message: str
) -> None:
    github.route("POST", "/repos/o/r/issues", status=201, body=body, headers=headers)

    result = harness.exec_github("github__create_issue", ISSUE_ARGS)

    assert (result.error_code, result.safe_message) == (ErrorCode.EXECUTION, message)


@pytest.mark.parametrize(
    ("override", "path"),
    [
        ({"owner": "."}, "owner"),
        ({"owner": ".."}, "owner"),
        ({"owner": "a/b"}, "owner"),
        ({"owner": "%2e%2e"}, "owner"),
        ({"owner": "o?x=1"}, "owner"),
        ({"owner": ""}, "owner"),
        ({"repo": ".."}, "repo"),
        ({"repo": "r/../../user"}, "repo"),
        ({"title": ""}, "title"),
    ],
)
def test_create_issue_refuses_names_that_would_walk_the_path(
    github: LoopbackServer, harness: Harness, override: dict, path: str
) -> None:
    result = harness.exec_github("github__create_issue", {**ISSUE_ARGS, **override})

    assert (result.ok, result.error_code) == (False, ErrorCode.VALIDATION)
    assert [error.path for error in result.errors] == [path]
    assert github.requests == []
    assert_refused_before_running(harness, result)


def test_create_issue_owner_error_message(harness: Harness) -> None:
    result = harness.exec_github("github__create_issue", {**ISSUE_ARGS, "owner": ".."})

    assert result.errors == (FieldError(path="owner", message="must be a GitHub owner or repository name"),)


# --- the connection gate, in front of GitHub ------------------------------------------------------------


def test_github_tool_without_connection_is_validation(github: LoopbackServer, harness: Harness) -> None:
    result = harness.exec("github__get_user")

    assert (result.error_code, result.safe_message) == (ErrorCode.VALIDATION, "this tool needs a connection_id")
    assert result.errors == (FieldError(path="connection_id", message="this tool needs a connection_id"),)
    assert github.requests == []
    assert harness.broker.resolved == []
    assert_refused_before_running(harness, result)


@pytest.mark.parametrize(
    "ctx_fields",
    [
        {"connection_id": OTHER_CONNECTION, "declared_connection_ids": (OTHER_CONNECTION,)},  # declared, not granted
        {"connection_id": CONNECTION, "declared_connection_ids": ()},  # granted, not declared
        {"connection_id": CONNECTION, "declared_connection_ids": (OTHER_CONNECTION,)},  # granted, declared another
    ],
    ids=["not-granted", "not-declared", "declared-another"],
)
def test_connection_outside_grant_and_declared_is_denied(
    github: LoopbackServer, harness: Harness, ctx_fields: dict
) -> None:
    result = harness.exec_github("github__create_issue", ISSUE_ARGS, **ctx_fields)

    assert (result.error_code, result.safe_message) == (
        ErrorCode.POLICY_DENIED,
        NOT_GRANTED,
    )
    assert github.requests == []
    assert harness.broker.resolved == []
    assert_refused_before_running(harness, result)


def test_grant_of_another_actor_is_denied(github: LoopbackServer) -> None:
    grant = GrantView(grant_id=GRANT_ID, tenant_id=TENANT, actor_id="actor-2", connection_ids=frozenset({CONNECTION}))
    harness = make_harness(github.url, grant=grant)

    result = harness.exec_github("github__get_user")

    assert (result.error_code, result.safe_message) == (
        ErrorCode.POLICY_DENIED,
        GRANT_REFUSED,
    )
    assert github.requests == []
    assert harness.broker.resolved == []


def test_broker_failure_is_connection_unavailable_and_github_is_not_called(github: LoopbackServer) -> None:
    error = BrokerError(ErrorCode.CONNECTION_UNAVAILABLE, "connection has been revoked")
    harness = make_harness(github.url, broker_error=error)

    result = harness.exec_github("github__get_user")

    assert (result.ok, result.error_code, result.safe_message) == (
        False,
        ErrorCode.CONNECTION_UNAVAILABLE,
        "connection has been revoked",
    )
    assert harness.broker.resolved == [CONNECTION]
    assert github.requests == []
    assert_refused_before_running(harness, result)


def test_core_tool_refuses_a_connection(github: LoopbackServer, harness: Harness) -> None:
    result = harness.exec("core__wait", {"ms": 0}, connection_id=CONNECTION, grant_id=GRANT_ID)

    assert result.errors == (FieldError(path="connection_id", message="this tool takes no connection"),)
    assert harness.broker.resolved == []


# --- toolgate__search_tools ---------------------------------------------------------------------


def _spec(tool_id: str) -> ToolSpec:
    return to_tool_spec(code_registry()[tool_id].contract)


def test_search_tools_answers_the_matches_of_its_own_calls_context_without_itself(harness: Harness) -> None:
    # given a catalog index that ranks the search tool itself among the matches
    harness.catalog.specs = [
        _spec("core__wait"),
        _spec("toolgate__search_tools"),
        _spec("core__get_current_time"),
        _spec("github__get_user"),
    ]

    # when
    result = harness.exec("toolgate__search_tools", {"query": "wait or time", "limit": 2})

    # then: the two best matches that are not the search tool, by name, title and description only
    assert result.ok is True, result
    assert result.value == {
        "tools": [
            {"name": "core__wait", "title": None, "description": _spec("core__wait").description},
            {
                "name": "core__get_current_time",
                "title": None,
                "description": _spec("core__get_current_time").description,
            },
        ]
    }
    [(ctx, query, limit)] = harness.catalog.asked
    assert (ctx.tool_call_id, ctx.tenant_id, ctx.actor_id, query, limit) == ("call-1", TENANT, ACTOR, "wait or time", 3)
    [record] = harness.audit.records
    assert (record.tool_id, record.decision, record.executed, record.value) == (
        "toolgate__search_tools",
        Decision.ALLOW,
        True,
        result.value,
    )


@pytest.mark.parametrize(
    ("args", "path"),
    [
        ({"query": "   "}, "query"),
        ({"query": ""}, "query"),
        ({"query": "x" * 201}, "query"),
        ({"query": "time", "limit": 0}, "limit"),
        ({"query": "time", "limit": 51}, "limit"),
        ({"query": "time", "limit": True}, "limit"),
        ({"query": "time", "limit": "5"}, "limit"),
        ({}, "query"),
    ],
    ids=["blank", "empty", "too-long", "limit-0", "limit-51", "limit-bool", "limit-string", "missing"],
)
def test_search_tools_validates_query_and_limit_before_searching(harness: Harness, args: dict, path: str) -> None:
    result = harness.exec("toolgate__search_tools", args)

    assert (result.ok, result.error_code) == (False, ErrorCode.VALIDATION)
    assert [error.path for error in result.errors] == [path]
    assert harness.catalog.asked == []
    assert_refused_before_running(harness, result)


def test_search_tools_is_a_read_only_built_in_that_declares_the_catalog_capability() -> None:
    definition = code_registry()["toolgate__search_tools"]

    assert definition.contract.effect.value == "read_only"
    assert definition.contract.capabilities == frozenset({"catalog"})
    assert definition.contract.title == "Search tools"
    with pytest.raises(ContractError, match="declares the catalog capability but none was bound"):
        bind_tools({"toolgate__search_tools": definition}, {})
