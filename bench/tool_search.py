"""Tool search latency at 1,000 and 10,000 tools, and the plan PostgreSQL uses for it.

The catalog is the real MCP tool lists of tests/data/mcp_catalog (about 500
tools), repeated under numbered server slugs (`mcp__github2__create_issue`,
...) until it holds N tools: the same words, the same skew. Each size is
installed in a fresh PostgreSQL database (the generated `search_document`
column and its GIN index come from the migration, as in production) and the
retrieval test's 30 task descriptions are searched over the whole catalog
(a caller allowed every tool: the largest search there is), several rounds.

Printed per size: wall-clock latency per search (p50, p95) and the CPU this
process spent per search (`time.process_time`: the ORM and psycopg; the
server's own CPU is PostgreSQL's, inside the wall time), then EXPLAIN ANALYZE
of one search, which shows whether the GIN index (`tool_search_document_gin`)
is used.

    python -m bench.tool_search [--sizes 1000 10000] [--rounds 5]

Needs PostgreSQL: DATABASE_URL (default a `toolgate_bench` database on
127.0.0.1, dropped and re-created each run). Prints figures; nothing passes or
fails. The machine is shared while other work runs: compare within one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import django

from bench.database import fresh_database, manage, production_environment

os.environ.update(production_environment("config.settings"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    for size in options.sizes:
        fresh_database(os.environ["DATABASE_URL"])
        manage(dict(os.environ), "migrate", "--noinput")
        measure(size, options.rounds)


def measure(size: int, rounds: int) -> None:
    django.setup()
    from django.db import connection  # noqa: PLC0415 - after django.setup()

    from tests.data.mcp_catalog import CatalogTool, catalog, install, specs  # noqa: PLC0415
    from tests.tools_app.test_search_retrieval import TASKS  # noqa: PLC0415
    from tools_app.search import tool_search  # noqa: PLC0415

    connection.close()  # the database was re-created under this process: a new connection
    base = catalog()
    tools: list[CatalogTool] = []
    copy = 0
    while len(tools) < size:
        copy += 1
        for tool in base:
            if len(tools) == size:
                break
            server = tool.id.split("__")[1]
            tools.append(
                CatalogTool(
                    id=tool.id.replace(f"mcp__{server}__", f"mcp__{server}{copy}__", 1)[:64] if copy > 1 else tool.id,
                    description=tool.description,
                    input_schema=tool.input_schema,
                    tags=tool.tags,
                    source=tool.source,
                )
            )
    tools = list({tool.id: tool for tool in tools}.values())
    install(tools)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE tools_app_tool")
    catalog_specs = specs(tools)
    queries = [task for task, _expected in TASKS]
    tool_search(specs=catalog_specs, query=queries[0], limit=5)  # warm: connection, statement, caches
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(rounds):
        for query in queries:
            wall, cpu = time.perf_counter(), time.process_time()
            tool_search(specs=catalog_specs, query=query, limit=5)
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
    walls.sort()
    print(
        f"tool search, {len(tools):>6} tools: p50 {statistics.median(walls) * 1000:7.2f} ms, "
        f"p95 {walls[int(len(walls) * 0.95)] * 1000:7.2f} ms wall; "
        f"{statistics.mean(cpus) * 1000:6.2f} ms CPU of this process per search ({len(walls)} searches)"
    )
    explain(connection, "the search as run (the caller's catalog = every tool)", catalog_specs, queries[0])
    explain(connection, "the match alone (what the GIN index serves)", None, queries[0])
    connection.close()


def explain(connection, label: str, catalog_specs, query: str) -> None:  # type: ignore[no-untyped-def]
    """EXPLAIN ANALYZE of one search; long lines (the catalog's id array) are cut."""
    from django.db import transaction  # noqa: PLC0415

    from tools_app.search import search_statement  # noqa: PLC0415

    tool_ids = None if catalog_specs is None else [spec.name for spec in catalog_specs]
    sql, params = search_statement(tool_ids=tool_ids, query=query, limit=5)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # as tool_search runs it
        cursor.execute(f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) {sql}", params)
        plan = [row[0] for row in cursor.fetchall()]
    uses_index = any("tool_search_document_gin" in line for line in plan)
    print(f"  EXPLAIN ANALYZE, {label}: {'uses' if uses_index else 'does NOT use'} tool_search_document_gin")
    for line in plan:
        print(f"    {line if len(line) <= 160 else line[:157] + '...'}")


if __name__ == "__main__":
    main()
