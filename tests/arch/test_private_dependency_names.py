"""The private names of dependencies the code relies on, each reached through one module, pinned here.

- `httpx2.AsyncHTTPTransport._pool` (core/framing.py): httpx2's transport
  takes no network backend, so the framing watch replaces its pool with an equal one
  built over a watched backend.
- `psycopg.errors._WaitTimeout` (config/postgresql/base.py): what psycopg's bounded wait
  raises when it runs out, which tells a frozen server from a slow statement.
- `psycopg.generators` `send` and `fetch_many`, run by `Connection.wait` (config/postgresql/base.py):
  how psycopg's own cursor flushes a statement and reads its results, which the audit's
  statements sent with libpq's calls use, so the answer timeout of `AnsweringConnection.wait` holds
  for them too (tests/config/test_write_ahead.py runs them).
- `ClientSession._absorb_tool_listing` of the MCP SDK (gateway/mcp_sdk.py): a
  listing handed to the client so a call never lists the live tools itself.
- redis-py's `Connection._sock`, `Connection._parser` and its parsers' buffers, hiredis's
  reader (policies_app/redis_internals.py): the governance push check's `poll(0)`.
- prometheus_client's `MmapedDict._m` and `MmapedDict._positions` (tools_app/prometheus_internals.py):
  the stage timings' values written in place in their multiprocess file.
- drf-spectacular's `AutoSchema._map_serializer_field` / `_map_serializer` with
  `bypass_extensions` (core/api/spectacular.py): the schema an extension adds to.

A new version of any of these packages fails this test until someone has checked that the
names still mean what those modules take them to mean, and moved the pin here. Each module is
the only one that names its package's private parts: the last test holds them there.
"""

from __future__ import annotations

import ast
import asyncio
import socket
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpcore2
import httpx2
import mcp_types as types
import psycopg
import pytest
import redis
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ComponentRegistry
from mcp import Client
from mcp.server.mcpserver import MCPServer
from prometheus_client.mmap_dict import MmapedDict
from psycopg import generators
from rest_framework.generics import GenericAPIView

from core.api import spectacular
from core.api.serializers import StrictCharField, StrictInputSerializer
from gateway import mcp_sdk
from policies_app import redis_internals
from tools_app import prometheus_internals

PINNED = {
    "httpx2": "2.16.2",
    "psycopg": "3.3.9",
    "mcp": "2.3.0",
    "redis": "8.1.0",
    "hiredis": "3.5.0",
    "drf-spectacular": "0.30.0",
    "kombu": "5.7.0",
    "prometheus-client": "0.26.0",
}
ROOT = Path(__file__).resolve().parents[2]
# Each private name, and the one module allowed to use it.
PRIVATE_NAMES = {
    "_absorb_tool_listing": {"gateway/mcp_sdk.py"},
    "_map_serializer_field": {"core/api/spectacular.py"},
    "_map_serializer": {"core/api/spectacular.py"},
    "_HiredisParser": {"policies_app/redis_internals.py"},
    "_WaitTimeout": {"config/postgresql/base.py"},
    "generators": {"config/postgresql/base.py"},
    "_put": {"config/embedded_broker.py"},
    "_m": {"tools_app/prometheus_internals.py"},
    "_positions": {"tools_app/prometheus_internals.py"},
}


def test_the_versions_are_the_ones_whose_private_names_were_checked():
    assert {name: version(name) for name in PINNED} == PINNED


def test_psycopg_generators_send_a_statement_and_fetch_its_results():
    assert {"send", "fetch_many"} <= set(dir(generators))


def test_httpx2_transports_keep_their_connection_pool_in_pool():
    transport = httpx2.AsyncHTTPTransport(trust_env=False)

    assert isinstance(transport._pool, httpcore2.AsyncConnectionPool)


def test_psycopg_signals_a_bounded_wait_that_ran_out_with_wait_timeout():
    # An OperationalError of its own, so base.py can catch exactly it and tell it from a lost connection.
    assert issubclass(psycopg.errors._WaitTimeout, psycopg.OperationalError)
    assert psycopg.errors._WaitTimeout is not psycopg.OperationalError


class _CountingServer(MCPServer):
    """An in-memory MCP server that counts the `tools/list` requests it answers."""

    lists = 0

    async def _handle_list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        type(self).lists += 1
        return await super()._handle_list_tools(ctx, params)


def _calls(absorb: bool) -> tuple[int, bool]:
    server = _CountingServer(name="pin")
    _CountingServer.lists = 0

    @server.tool()
    def add(a: int, b: int) -> int:
        return a + b

    async def run() -> bool:
        async with Client(server) as client:
            if absorb:
                mcp_sdk.absorb_tool_listing(
                    client, [types.Tool.model_validate({"name": "add", "inputSchema": {"type": "object"}})]
                )
            result = await client.call_tool("add", {"a": 1, "b": 2})
            return result.is_error

    is_error = asyncio.run(run())
    return _CountingServer.lists, is_error


def test_an_absorbed_listing_spares_the_sdk_listing_the_live_tools_on_a_call():
    # Without it the SDK lists the tools to validate the result; with it, it lists nothing.
    assert _calls(absorb=False) == (1, False)
    assert _calls(absorb=True) == (0, False)


def test_redis_connections_expose_their_socket_and_what_the_parser_holds(redis_url):
    client = redis.Redis.from_url(redis_url)
    pubsub = client.pubsub()
    try:
        connection = redis.Connection(**client.connection_pool.connection_kwargs)
        assert redis_internals.connection_socket(connection) is None  # not connected yet
        pubsub.subscribe("toolgate-pin-test")
        pubsub.get_message(timeout=1.0)  # the subscribe confirmation
        connection = pubsub.connection
        assert isinstance(redis_internals.connection_socket(connection), socket.socket)
        assert redis_internals.parser_holds_bytes(connection) is False
        # Two pushes arrive in one read: the parser hands out the first and keeps the second's bytes.
        client.publish("toolgate-pin-test", "one")
        client.publish("toolgate-pin-test", "two")
        time.sleep(0.2)
        assert pubsub.get_message(timeout=1.0)["data"] == b"one"
        assert redis_internals.parser_holds_bytes(connection) is True
        assert pubsub.get_message(timeout=1.0)["data"] == b"two"
        assert redis_internals.parser_holds_bytes(connection) is False
    finally:
        pubsub.close()
        client.close()
    assert redis_internals.replies_parsed_by_hiredis()


def test_an_unknown_parser_shape_is_an_attribute_error_for_the_caller_to_fall_back_on():
    class Bare:
        _parser = object()

    with pytest.raises(AttributeError):
        redis_internals.parser_holds_bytes(Bare())


def test_a_multiprocess_files_value_written_in_place_is_what_the_library_reads(tmp_path):
    path = str(tmp_path / "histogram_probe.db")
    file = MmapedDict(path)
    file.write_value("earlier", 7.0, 0.0)
    probe = prometheus_internals.value_index(file, "probe")  # taken before the file grows: offsets stay
    for key in range(2000):  # past the file's first map
        file.read_value(f"filler-{key}")
    view = prometheus_internals.doubles(file)

    view[probe] += 2.5
    view[prometheus_internals.value_index(file, "earlier")] += 1.0

    assert file.read_value("probe") == (2.5, 0.0)
    view.release()
    file.close()
    reread = MmapedDict(path, read_mode=True)
    read_back = {key: (value, timestamp) for key, value, timestamp in reread.read_all_values()}
    reread.close()
    assert (read_back["earlier"], read_back["probe"], len(read_back)) == ((8.0, 0.0), (2.5, 0.0), 2002)


def test_drf_spectacular_maps_a_field_and_a_serializer_without_their_extensions():
    class Probe(StrictInputSerializer):
        name = StrictCharField(max_length=5)

    auto_schema = AutoSchema()
    auto_schema.registry = ComponentRegistry()
    auto_schema.method = "POST"
    auto_schema.path = "/probe"
    view = GenericAPIView()  # held here: AutoSchema keeps only a weak reference
    view.request = None
    auto_schema.view = view

    field_schema = spectacular.plain_field_schema(auto_schema, Probe().fields["name"], "request")
    serializer_schema = spectacular.plain_serializer_schema(auto_schema, Probe(), "request")

    # StrictCharFieldExtension's NUL pattern is missing: the field's extension was bypassed ...
    assert field_schema == {"type": "string", "minLength": 1}
    # ... while the serializer's own fields still get theirs.
    assert serializer_schema["properties"]["name"]["pattern"] == "^[^\\x00]*$"
    assert "additionalProperties" not in serializer_schema  # what StrictInputSerializerExtension adds


def _names_used(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    used |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
    # a method overriding one of a dependency's classes (`class Channel(filesystem.Channel): def _put`)
    used |= {
        member.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and any(isinstance(base, ast.Attribute) for base in node.bases)
        for member in node.body
        if isinstance(member, ast.FunctionDef)
    }
    return used


def test_each_private_name_is_used_only_by_its_wrapper_module():
    product = [
        path
        for top in (
            "config",
            "portal",
            "signin",
            "connections_app",
            "identity_app",
            "gateway",
            "tools_app",
            "policies_app",
            "changes_app",
            "core",
            "policy_files",
            "runner",
        )
        for path in (ROOT / top).rglob("*.py")
        if "migrations" not in path.parts
    ]
    where: dict[str, set[str]] = {name: set() for name in PRIVATE_NAMES}
    for path in product:
        used = _names_used(path)
        for name in PRIVATE_NAMES:
            if name in used:
                where[name].add(path.relative_to(ROOT).as_posix())

    assert where == PRIVATE_NAMES
