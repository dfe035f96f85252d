"""Rebuild the tool lists in this folder from real, published MCP servers (for the retrieval test).

Each server is started as its authors publish it (npm through `npx -y`, PyPI
from a virtualenv of its own) with a private HOME and placeholder credentials
(listing tools needs no real account), and asked `tools/list` through the
official SDK's stdio client. Every list is written as `<slug>.json`:
`{"source": "<registry>:<package>", "tools": [{"name", "description", "inputSchema"}]}`.

    .venv/bin/python tests/data/mcp_catalog/collect.py [--pypi-python /path/to/venv/bin/python] [slug ...]
    .venv/bin/python tests/data/mcp_catalog/collect.py --toolsnaps /path/to/github-mcp-server.git

GitHub's own server (github/github-mcp-server, Go, shipped as a container
image) is not on npm or PyPI: its repository keeps the exact `tools/list`
entry of every tool as a snapshot test fixture (`pkg/github/__toolsnaps__/*.snap`,
checked by its tests against the live definitions). `--toolsnaps` reads those
from a clone's HEAD into `github_official.json`.

The PyPI servers need their packages installed in the interpreter given with
`--pypi-python` (e.g. `python -m venv /tmp/mcpv && /tmp/mcpv/bin/pip install
mcp-server-fetch mcp-server-git mcp-server-time mcp-server-sqlite`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import tempfile
from pathlib import Path

from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

HERE = Path(__file__).resolve().parent
PLACEHOLDER = "placeholder-not-a-real-credential"
# slug -> (registry, package, extra args, env the server insists on at startup)
NPM_SERVERS: dict[str, tuple[str, list[str], dict[str, str]]] = {
    "everything": ("@modelcontextprotocol/server-everything", [], {}),
    "filesystem": ("@modelcontextprotocol/server-filesystem", ["{tmp}"], {}),
    "memory": ("@modelcontextprotocol/server-memory", [], {}),
    "github": ("@modelcontextprotocol/server-github", [], {"GITHUB_PERSONAL_ACCESS_TOKEN": PLACEHOLDER}),
    "gitlab": (
        "@modelcontextprotocol/server-gitlab",
        [],
        {"GITLAB_PERSONAL_ACCESS_TOKEN": PLACEHOLDER, "GITLAB_API_URL": "http://127.0.0.1:9/api/v4"},
    ),
    "slack": ("@modelcontextprotocol/server-slack", [], {"SLACK_BOT_TOKEN": PLACEHOLDER, "SLACK_TEAM_ID": "T000"}),
    "puppeteer": ("@modelcontextprotocol/server-puppeteer", [], {"PUPPETEER_SKIP_DOWNLOAD": "1"}),
    "google_maps": ("@modelcontextprotocol/server-google-maps", [], {"GOOGLE_MAPS_API_KEY": PLACEHOLDER}),
    "brave_search": ("@modelcontextprotocol/server-brave-search", [], {"BRAVE_API_KEY": PLACEHOLDER}),
    "sequential_thinking": ("@modelcontextprotocol/server-sequential-thinking", [], {}),
    "postgres": ("@modelcontextprotocol/server-postgres", ["postgresql://127.0.0.1:9/none"], {}),
    "playwright": ("@playwright/mcp", [], {}),
    "notion": ("@notionhq/notion-mcp-server", [], {"NOTION_TOKEN": PLACEHOLDER}),
    "mongodb": ("mongodb-mcp-server", [], {}),
    "kubernetes": ("mcp-server-kubernetes", [], {}),
    "firecrawl": ("firecrawl-mcp", [], {"FIRECRAWL_API_KEY": PLACEHOLDER}),
    "tavily": ("tavily-mcp", [], {"TAVILY_API_KEY": PLACEHOLDER}),
    "azure": ("@azure/mcp", ["server", "start"], {}),
    "stripe": ("@stripe/mcp", ["--tools=all", f"--api-key=sk_test_{PLACEHOLDER}"], {}),
    "heroku": ("@heroku/mcp-server", [], {"HEROKU_API_KEY": PLACEHOLDER}),
    "supabase": ("@supabase/mcp-server-supabase", [f"--access-token={PLACEHOLDER}"], {}),
    "desktop_commander": ("@wonderwhy-er/desktop-commander", [], {}),
    "playwright_ea": ("@executeautomation/playwright-mcp-server", [], {}),
    "hubspot": ("@hubspot/mcp-server", [], {"PRIVATE_APP_ACCESS_TOKEN": PLACEHOLDER}),
    "circleci": ("@circleci/mcp-server-circleci", [], {"CIRCLECI_TOKEN": PLACEHOLDER}),
    "airtable": ("airtable-mcp-server", [], {"AIRTABLE_API_KEY": PLACEHOLDER}),
    "sentry": ("@sentry/mcp-server", [f"--access-token={PLACEHOLDER}"], {}),
    "exa": ("exa-mcp-server", [], {"EXA_API_KEY": PLACEHOLDER}),
    "cloudflare": ("@cloudflare/mcp-server-cloudflare", ["run", "placeholder-account"], {}),
    "context7": ("@upstash/context7-mcp", [], {}),
    "mysql": ("@benborla29/mcp-server-mysql", [], {"MYSQL_HOST": "127.0.0.1", "MYSQL_PORT": "9"}),
    "redis": ("@modelcontextprotocol/server-redis", ["redis://127.0.0.1:9"], {}),
}
PYPI_SERVERS: dict[str, tuple[str, list[str]]] = {
    "fetch": ("mcp_server_fetch", []),
    "git": ("mcp_server_git", []),
    "time": ("mcp_server_time", []),
    "sqlite": ("mcp_server_sqlite", ["--db-path", "{tmp}/test.db"]),
    "atlassian": ("mcp_atlassian", []),
    "qdrant": ("mcp_server_qdrant", []),
    "obsidian": ("mcp_obsidian", []),
}
# What the PyPI servers insist on at startup (placeholders; listing tools contacts nothing).
PYPI_ENV: dict[str, dict[str, str]] = {
    "atlassian": {
        "JIRA_URL": "https://placeholder.atlassian.net",
        "JIRA_USERNAME": "placeholder@example.com",
        "JIRA_API_TOKEN": PLACEHOLDER,
        "CONFLUENCE_URL": "https://placeholder.atlassian.net/wiki",
        "CONFLUENCE_USERNAME": "placeholder@example.com",
        "CONFLUENCE_API_TOKEN": PLACEHOLDER,
    },
    "qdrant": {"QDRANT_URL": "http://127.0.0.1:9", "COLLECTION_NAME": "placeholder"},
    "obsidian": {"OBSIDIAN_API_KEY": PLACEHOLDER},
}


async def list_tools(params: StdioServerParameters) -> list[dict]:
    tools: list[dict] = []
    async with Client(stdio_client(params), mode="legacy") as client:
        cursor = None
        while True:
            page = await client.list_tools(cursor=cursor)
            tools += [
                {"name": tool.name, "description": tool.description or "", "inputSchema": tool.input_schema}
                for tool in page.tools
            ]
            cursor = page.next_cursor
            if cursor is None:
                return tools


def base_env(home: str) -> dict[str, str]:
    return {
        "HOME": home,
        "PATH": os.environ["PATH"],
        "LANG": "C.UTF-8",
        "TMPDIR": home,
        "USER": "mcp",
        "LOGNAME": "mcp",
        "SHELL": "/bin/sh",
        "TERM": "dumb",
        "NPM_CONFIG_CACHE": os.environ.get("NPM_CONFIG_CACHE", str(Path.home() / ".npm")),
    }


async def collect(slug: str, pypi_python: str | None) -> None:
    with tempfile.TemporaryDirectory(prefix=f"mcp-{slug}-") as tmp:
        env = base_env(tmp)
        if slug in NPM_SERVERS:
            package, args, extra = NPM_SERVERS[slug]
            params = StdioServerParameters(
                command="npx", args=["-y", package, *[arg.format(tmp=tmp) for arg in args]], env={**env, **extra}
            )
            source = f"npm:{package}"
        else:
            module, args = PYPI_SERVERS[slug]
            if pypi_python is None:
                print(f"{slug}: skipped (no --pypi-python)")
                return
            params = StdioServerParameters(
                command=pypi_python,
                args=["-m", module, *[arg.format(tmp=tmp) for arg in args]],
                env={**env, **PYPI_ENV.get(slug, {})},
            )
            source = f"pypi:{module.replace('_', '-')}"
        try:
            tools = await asyncio.wait_for(list_tools(params), timeout=240)
        except BaseException as error:
            print(f"{slug}: FAILED {type(error).__name__}: {str(error)[:200]}")
            return
    (HERE / f"{slug}.json").write_text(json.dumps({"source": source, "tools": tools}, indent=1, sort_keys=True) + "\n")
    print(f"{slug}: {len(tools)} tools from {source}")


def toolsnaps(git_dir: str) -> None:
    """github/github-mcp-server's tool snapshots (one JSON `tools/list` entry per file) at its HEAD."""
    git = ["git", f"--git-dir={git_dir}"]
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    names = subprocess.run(
        [*git, "ls-tree", "--name-only", "HEAD", "pkg/github/__toolsnaps__/"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    tools = []
    for name in sorted(names):
        if not name.endswith(".snap"):
            continue
        snap = json.loads(subprocess.run([*git, "show", f"HEAD:{name}"], capture_output=True, check=True).stdout)
        tools.append(
            {"name": snap["name"], "description": snap.get("description", ""), "inputSchema": snap["inputSchema"]}
        )
    source = f"github:github/github-mcp-server@{commit} pkg/github/__toolsnaps__"
    (HERE / "github_official.json").write_text(
        json.dumps({"source": source, "tools": tools}, indent=1, sort_keys=True) + "\n"
    )
    print(f"github_official: {len(tools)} tools from {source}")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pypi-python")
    parser.add_argument("--toolsnaps", help="a git directory of github/github-mcp-server")
    parser.add_argument("slugs", nargs="*")
    options = parser.parse_args()
    if options.toolsnaps:
        toolsnaps(options.toolsnaps)
        return
    slugs = options.slugs or [*NPM_SERVERS, *PYPI_SERVERS]
    limit = asyncio.Semaphore(4)

    async def one(slug: str) -> None:
        async with limit:
            await collect(slug, options.pypi_python)

    await asyncio.gather(*(one(slug) for slug in slugs))


if __name__ == "__main__":
    asyncio.run(main())
