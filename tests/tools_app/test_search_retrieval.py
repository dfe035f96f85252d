"""Retrieval: 30 tasks in plain words over a 500-tool catalog of real MCP servers' tools.

The catalog is the tool lists published servers answer (tests/data/mcp_catalog,
collected by its collect.py). Each task names the tool(s) that do it; where
several servers offer the same operation (three browser-automation servers
take screenshots), any of them is right, and the tuple lists each. The test
prints the share of tasks whose right tool is in the top 5, and asks ≥ 80 %.
The tasks were written from what a user would ask, before looking at ranks.
"""

from __future__ import annotations

import pytest
from django.db import connection

from tests.data.mcp_catalog import catalog, install, specs
from tools_app.search import tool_search

pytestmark = pytest.mark.django_db

CATALOG_SIZE = 500
TOP = 5
REQUIRED_SHARE = 0.8


def ids(server: str, *names: str) -> tuple[str, ...]:
    return tuple(f"mcp__{server}__{name}" for name in names)


SCREENSHOT = (
    *ids("playwright", "browser_take_screenshot"),
    *ids("playwright_ea", "playwright_screenshot"),
    *ids("puppeteer", "puppeteer_screenshot"),
)
WEB_SEARCH = (
    *ids("brave_search", "brave_web_search"),
    *ids("tavily", "tavily_search"),
    *ids("exa", "web_search_exa"),
    *ids("firecrawl", "firecrawl_search"),
)
TASKS: list[tuple[str, tuple[str, ...]]] = [
    ("read the contents of a text file on disk", ids("filesystem", "read_text_file", "read_file")),
    ("list the files in a directory", ids("filesystem", "list_directory", "list_directory_with_sizes")),
    ("open a new issue in a GitHub repository", ids("github", "create_issue")),
    ("merge a pull request on GitHub", ids("github", "merge_pull_request")),
    ("post a message to a Slack channel", ids("slack", "slack_post_message")),
    ("get driving directions between two addresses", ids("google_maps", "maps_directions")),
    ("convert a time from one timezone to another", ids("time", "convert_time")),
    ("show the commit history of the local git repository", ids("git", "git_log")),
    (
        "download a web page and convert it to markdown",
        (*ids("fetch", "fetch"), *ids("firecrawl", "firecrawl_scrape"), *ids("exa", "web_fetch_exa")),
    ),
    ("take a screenshot of the current browser page", SCREENSHOT),
    ("find records in an Airtable base that match a search term", ids("airtable", "search_records")),
    ("get the logs of a Kubernetes pod", ids("kubernetes", "kubectl_logs")),
    ("scale a Kubernetes deployment to more replicas", ids("kubernetes", "kubectl_scale")),
    ("install a Helm chart into the cluster", ids("kubernetes", "install_helm_chart")),
    ("run an aggregation pipeline on a MongoDB collection", ids("mongodb", "aggregate")),
    ("create an index on a MongoDB collection", ids("mongodb", "create-index")),
    ("add observations about an entity to the knowledge graph", ids("memory", "add_observations")),
    ("search the web for recent news", WEB_SEARCH),
    (
        "find restaurants near a location",
        (*ids("brave_search", "brave_local_search"), *ids("google_maps", "maps_search_places")),
    ),
    ("run a read-only SQL query against the PostgreSQL database", ids("postgres", "query")),
    ("why did my CircleCI build fail: get the failure logs", ids("circleci", "get_build_failure_logs")),
    ("find flaky tests in the CI pipeline", ids("circleci", "find_flaky_tests")),
    ("search Sentry for the issues of a project", ids("sentry", "search_issues")),
    ("create a new page in Notion", ids("notion", "API-post-page")),
    ("search HubSpot CRM contacts by email", ids("hubspot", "hubspot-search-objects")),
    ("look up up-to-date documentation for a programming library", ids("context7", "query-docs", "resolve-library-id")),
    (
        "fill out a form in the web browser",
        (
            *ids("playwright", "browser_fill_form", "browser_type"),
            *ids("playwright_ea", "playwright_fill"),
            *ids("puppeteer", "puppeteer_fill"),
        ),
    ),
    (
        "crawl an entire website and extract content from its pages",
        (*ids("firecrawl", "firecrawl_crawl"), *ids("tavily", "tavily_crawl")),
    ),
    ("stage file changes for the next git commit", ids("git", "git_add")),
    ("reply in a Slack thread", ids("slack", "slack_reply_to_thread")),
]


def test_the_right_tool_is_in_the_top_5_for_at_least_80_percent_of_tasks(capsys):
    # given the 500-tool catalog as enabled rows (on PostgreSQL: the generated search document)
    tools = catalog(CATALOG_SIZE)
    assert len(tools) == CATALOG_SIZE
    install(tools)
    catalog_specs = specs(tools)
    known = {tool.id for tool in tools}
    assert all(set(right) & known for _task, right in TASKS), "every task's tool is in the catalog"

    # when each task is searched
    misses = []
    for task, right in TASKS:
        top = [spec.name for spec in tool_search(specs=catalog_specs, query=task, limit=TOP)]
        if not set(right) & set(top):
            misses.append((task, top))

    # then
    share = 1 - len(misses) / len(TASKS)
    with capsys.disabled():
        print(
            f"\ntool search retrieval ({connection.vendor}): right tool in the top {TOP} for "
            f"{len(TASKS) - len(misses)}/{len(TASKS)} tasks = {share:.0%} over {len(tools)} tools"
        )
        for task, top in misses:
            print(f"  missed: {task!r} -> {top}")
    assert share >= REQUIRED_SHARE
