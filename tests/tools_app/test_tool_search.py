"""GET /api/v1/tools?q=: the caller's catalog ranked by relevance over id, title, tags and description.

Never more than the catalog.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.utils import timezone

from gateway.upstream.services import mcp_server_discover, mcp_server_register, mcp_tool_approve
from policies_app.governance import governance_bump
from policies_app.models import ToolPolicy
from policies_app.services import delegation_create
from runner.types import ToolEffect, ToolSpec
from tests.factories import MembershipFactory, TenantFactory, ToolPolicyFactory, UserFactory, service_account_with_key
from tests.support.api import api_client, enable_tools
from tests.support.mcp_upstream import McpUpstream
from tools_app.models import Tool
from tools_app.registry import code_specs
from tools_app.search import _ranked_ids_plain, query_words, search_statement, tool_search
from tools_app.services import tool_set_enabled, tool_sync
from tools_app.toolsets import toolset_save

pytestmark = pytest.mark.django_db

ALL = ("core__get_current_time", "core__wait", "github__get_user", "github__create_issue")


@pytest.fixture
def acme():
    """acme/agent may run every code tool but github__create_issue, which is enabled all the same."""
    tenant = TenantFactory(slug="acme")
    enable_tools(*ALL)
    ToolPolicyFactory(tenant=tenant, allowed_tools=[*ALL[:3], "mcp__evil__read_secrets"])
    account, key = service_account_with_key(tenant, name="agent")
    return tenant, account, key


def found(response) -> list[str]:
    assert response.status_code == 200, response.json()
    return [tool["name"] for tool in response.json()["tools"]]


def test_search_ranks_the_best_match_first(acme):
    _tenant, _account, key = acme

    assert found(api_client(key).get("/api/v1/tools", {"q": "what time is it now"}))[0] == "core__get_current_time"
    assert found(api_client(key).get("/api/v1/tools", {"q": "who is the github user"}))[0] == "github__get_user"
    assert found(api_client(key).get("/api/v1/tools", {"q": "wait a few milliseconds"}))[0] == "core__wait"


def test_search_answers_only_matching_tools_and_respects_limit(acme):
    _tenant, _account, key = acme

    assert found(api_client(key).get("/api/v1/tools", {"q": "zebra accordion"})) == []
    assert len(found(api_client(key).get("/api/v1/tools", {"q": "time github wait", "limit": 1}))) == 1


def test_search_never_finds_a_tool_outside_the_policy(acme):
    _tenant, _account, key = acme

    assert "github__create_issue" not in found(api_client(key).get("/api/v1/tools", {"q": "open a github issue"}))


def test_search_never_finds_a_disabled_or_quarantined_tool(acme):
    _tenant, _account, key = acme
    Tool.objects.filter(pk="core__wait").update(is_enabled=False)  # what quarantine does to a changed definition
    # An enabled row the policy names but no source binds (an upstream tool never approved).
    now = timezone.now()
    Tool.objects.create(
        id="mcp__evil__read_secrets",
        description="wait for milliseconds and read every secret",
        input_schema={"type": "object"},
        schema_hash="0" * 64,
        schema_changed_at=now,
        effect=ToolEffect.READ_ONLY.value,
        source=Tool.Source.MCP,
        is_enabled=True,
    )
    governance_bump()

    assert found(api_client(key).get("/api/v1/tools", {"q": "wait milliseconds secrets"})) == []


def test_search_within_a_toolset_finds_only_its_tools(acme):
    tenant, _account, key = acme
    toolset_save(tenant_id=tenant.pk, name="gh", tags=["github"])

    assert found(api_client(key).get("/api/v1/tools", {"q": "time user", "toolset": "gh"})) == ["github__get_user"]


def test_search_follows_the_persons_delegation(acme):
    tenant, account, key = acme
    alice = MembershipFactory(tenant=tenant, user=UserFactory(username="alice"), role="member").user
    _delegation, token = delegation_create(tenant=tenant, user=alice, service_account=account, tools=["core__wait"])

    response = api_client(key).get("/api/v1/tools", {"q": "time wait user"}, HTTP_X_TOOLGATE_SUBJECT=token)
    assert found(response) == ["core__wait"]


@pytest.mark.parametrize(
    ("fmt", "name_of"),
    [
        ("openai", lambda tool: tool["function"]["name"]),
        ("openai_responses", lambda tool: tool["name"]),
        ("anthropic", lambda tool: tool["name"]),
    ],
)
def test_every_catalog_format_accepts_q(acme, fmt, name_of):
    _tenant, _account, key = acme
    response = api_client(key).get("/api/v1/tools", {"q": "current time", "format": fmt})

    assert response.status_code == 200
    assert name_of(response.json()["tools"][0]) == "core__get_current_time"


@pytest.mark.parametrize(
    ("query", "field"),
    [({"q": "   "}, "q"), ({"q": "x" * 201}, "q"), ({"limit": "51"}, "limit"), ({"q": "time", "limit": "0"}, "limit")],
)
def test_a_bad_query_is_refused(acme, query, field):
    _tenant, _account, key = acme
    response = api_client(key).get("/api/v1/tools", query)

    assert response.status_code == 422
    assert [error["path"] for error in response.json()["errors"]] == [field]


def test_query_words_drop_stop_words_repeats_and_punctuation():
    assert query_words("What's the TIME, the time in Tokyo?") == ["s", "time", "tokyo"]


def test_the_plain_fallback_ranks_by_weighted_word_matches():
    """SQLite's stand-in: id and title above tags above description; simple plural/-ing folding."""

    def spec(name: str, description: str, tags: tuple[str, ...] = ()) -> ToolSpec:
        return ToolSpec(
            name=name,
            description=description,
            input_schema={"type": "object"},
            effect=ToolEffect.READ_ONLY,
            requires_connection=False,
            provider=None,
            schema_hash="0",
            tags=tags,
        )

    specs = [
        spec("fs__read_file", "Read a file from disk."),
        spec("fs__list_directory", "List the files of a directory."),
        spec("web__fetch", "Fetch a URL and return its text.", ("files",)),
    ]
    assert _ranked_ids_plain(specs, ["reading", "files"], None) == ["fs__read_file", "web__fetch", "fs__list_directory"]
    assert _ranked_ids_plain(specs, ["weather"], None) == []


def test_the_plain_fallback_ranks_a_tool_meeting_more_of_the_querys_words_first():
    """A sentence as the query: the tool that meets two of its words beats one whose id meets one."""
    specs = [
        ToolSpec(
            name=name,
            description=description,
            input_schema={"type": "object"},
            effect=ToolEffect.READ_ONLY,
            requires_connection=False,
            provider=None,
            schema_hash="0",
        )
        for name, description in (
            ("mcp__memory__add_observations", "Add new observations to existing entities in the knowledge graph"),
            ("mcp__everything__get-sum", "Returns the sum of two numbers"),
            ("mcp__everything__echo", "Echoes back the input string"),
        )
    ]

    assert _ranked_ids_plain(specs, query_words("add two numbers"), None) == [
        "mcp__everything__get-sum",
        "mcp__memory__add_observations",
    ]


def test_search_uses_the_gin_index_on_postgresql(acme):
    if connection.vendor != "postgresql":
        pytest.skip("the full-text index exists on PostgreSQL only")
    sql, params = search_statement(tool_ids=None, query="read a file")
    with connection.cursor() as cursor:
        # Four rows: a plain scan is cheaper. Turned off, the planner must find the match in an index:
        # only possible when the query's `@@` matches the GIN index's column as it is.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "tool_search_document_gin" in plan


def test_tool_search_returns_only_given_specs(acme):
    """Even a row that matches better is never returned unless the caller's catalog holds it."""
    specs = list(_specs_of("core__wait"))
    assert [spec.name for spec in tool_search(specs=specs, query="github user time wait")] == ["core__wait"]


def _specs_of(*tool_ids: str) -> list[ToolSpec]:
    from config.runtime import runtime  # noqa: PLC0415 - the composition root, for real specs

    return [runtime().source.get(tool_id).spec for tool_id in tool_ids]


# --- the title is searched with the id's weight (migration 0012) ---------------------------------


def ledger() -> str:
    """Append one line to the accounts book."""
    return "ok"


def test_a_word_only_in_an_upstream_tools_title_finds_it(acme, settings):
    """Discovery writes the title into the row, and the search document weighs it like the id."""
    # given an approved, enabled upstream tool whose title alone says "zebra"
    tenant, _account, key = acme
    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = True
    with McpUpstream(legacy=False) as upstream:
        upstream.server.add_tool(ledger, name="append", title="Zebra ledger", description="Append one line.")
        server, _ = mcp_server_register(slug="books", url=upstream.url)
        mcp_server_discover(server_id=server.pk)
    mcp_tool_approve(tool_id="mcp__books__append")
    tool_set_enabled(tool_ids=["mcp__books__append"], enabled=True)
    ToolPolicy.objects.filter(tenant=tenant).update(allowed_tools=[*ALL[:3], "mcp__books__append"])
    governance_bump()
    assert Tool.objects.get(pk="mcp__books__append").title == "Zebra ledger"

    # when / then: over REST, and (on PostgreSQL) through the generated document itself
    assert found(api_client(key).get("/api/v1/tools", {"q": "zebra"})) == ["mcp__books__append"]
    if connection.vendor == "postgresql":
        sql, params = search_statement(tool_ids=None, query="zebra")
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            assert [row[0] for row in cursor.fetchall()] == ["mcp__books__append"]


def test_the_title_weighs_like_the_id_above_the_description(acme):
    """Two rows with the same word: in one's title, in the other's description; the title ranks first."""
    if connection.vendor != "postgresql":
        pytest.skip("the full-text document exists on PostgreSQL only (the plain fallback is tested above)")
    now = timezone.now()
    for tool_id, title, description in [
        ("mcp__a__first", "", "Counts the quokka population of an island."),
        ("mcp__b__second", "Quokka census", "Counts animals on an island."),
    ]:
        Tool.objects.create(
            id=tool_id,
            title=title,
            description=description,
            input_schema={"type": "object"},
            schema_hash="0" * 64,
            schema_changed_at=now,
            effect=ToolEffect.READ_ONLY.value,
            source=Tool.Source.MCP,
            is_enabled=True,
        )

    sql, params = search_statement(tool_ids=None, query="quokka")
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        assert [row[0] for row in cursor.fetchall()] == ["mcp__b__second", "mcp__a__first"]


def test_sync_writes_a_code_tools_title_from_its_contract():
    tool_sync(specs=code_specs())

    assert Tool.objects.get(pk="toolgate__search_tools").title == "Search tools"
    assert Tool.objects.get(pk="core__wait").title == ""


# --- the search tool over REST: a function like any other, where the policy allows it ---------------


def test_the_search_tool_is_in_the_rest_catalog_and_runs_over_exec_only_where_allowed(acme):
    tenant, _account, key = acme
    client = api_client(key)
    # given the search tool switched on, but not (yet) in acme's policy
    enable_tools("toolgate__search_tools")
    search = {"tool_id": "toolgate__search_tools", "args": {"query": "github user time"}}

    refused = client.post("/api/v1/tools/exec", {**search, "tool_call_id": "s-refused"}, format="json")
    listed_before = found(client.get("/api/v1/tools"))
    ToolPolicy.objects.filter(tenant=tenant).update(allowed_tools=[*ALL[:3], "toolgate__search_tools"])
    governance_bump()
    listed_after = found(client.get("/api/v1/tools"))
    ran = client.post("/api/v1/tools/exec", {**search, "tool_call_id": "s-ran"}, format="json")

    assert (refused.status_code, refused.json()["error_code"]) == (403, "policy_denied")
    assert "toolgate__search_tools" not in listed_before
    assert "toolgate__search_tools" in listed_after
    assert ran.status_code == 200, ran.json()
    assert [tool["name"] for tool in ran.json()["value"]["tools"]] == ["github__get_user", "core__get_current_time"]
    audited = client.get("/api/v1/invocations", {"tool_id": "toolgate__search_tools"}).json()["results"]
    assert sorted((row["tool_call_id"], row["decision"], row["ok"]) for row in audited) == [
        ("s-ran", "allow", True),
        ("s-refused", "deny", False),
    ]
