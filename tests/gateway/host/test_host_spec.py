"""The MCP host without a database: each server's spec travels in a header, revocation is a push.

Real parts: the host (HostApp under uvicorn, in a thread and as `manage.py mcp_host` in a
process of its own), the SDK's stdio server as the child, a TCP listener standing in for
PostgreSQL that counts who connects to it.
"""

from __future__ import annotations

import ast
import base64
import dataclasses
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx2
import pytest

from gateway.host.sandbox import Bind
from gateway.host.serve import host_config
from gateway.host.spec import MAX_SPEC_CHARS, ServerConfig, SpecInvalid, decode_spec, encode_spec
from gateway.upstream.host_endpoint import host_stop_connection
from tests.support.mcp_host import McpHostThread

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "tests" / "support" / "stdio_server.py"
SECRET = "sk-spec-secret-0a1b2c3d4e5f60718293"
LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
ACCEPT = {"Accept": "application/json, text/event-stream"}


def kit(**overrides: object) -> ServerConfig:
    values: dict[str, object] = {
        "slug": "kit",
        "command": (sys.executable, str(SCRIPT)),
        "env": (("MODE", "read-only"),),
        "secrets": (("KIT_TOKEN", SECRET),),
        "provider": "",
        "credential_env": "",
    }
    return ServerConfig(**(values | overrides))  # type: ignore[arg-type]


def raw_json(config: ServerConfig) -> dict:
    return json.loads(base64.urlsafe_b64decode(encode_spec(config)))


def header_of(document: object) -> bytes:
    return base64.urlsafe_b64encode(json.dumps(document).encode())


# --- the header ----------------------------------------------------------------------------------


def test_every_field_of_the_server_config_flows_through_the_header_with_no_code_of_its_own():
    # given a value unlike its default in every field the dataclass has (a field added later is covered too)
    samples = {str: "x", bool: True}
    values = {}
    for field in dataclasses.fields(ServerConfig):
        annotation = str(field.type)
        if annotation == "tuple[Bind, ...]":
            values[field.name] = (Bind(host="/srv/data", sandbox="/data", writable=True),)
        elif annotation == "tuple[tuple[str, str], ...]":
            values[field.name] = (("NAME", f"{field.name}-value"),)
        elif annotation == "tuple[str, ...]":
            values[field.name] = (f"{field.name}-value",)
        else:
            values[field.name] = samples[{"str": str, "bool": bool}[annotation]]
    values["slug"] = "kit"
    config = ServerConfig(**values)

    # when it is encoded and decoded
    decoded = decode_spec(encode_spec(config).encode())

    # then every field arrived, and the repr names only the slug
    assert decoded == config
    assert {f.name for f in dataclasses.fields(ServerConfig)} == set(raw_json(config))
    assert repr(decoded) == "ServerConfig(kit)"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda doc: doc | {"extra": 1}, "malformed at: extra"),
        (lambda doc: doc | {"trusted_unsandboxed": "yes"}, "malformed at: trusted_unsandboxed"),
        (lambda doc: doc | {"command": "python server.py"}, "malformed at: command"),
        (lambda doc: {k: v for k, v in doc.items() if k != "command"}, "malformed at: command"),
        (lambda doc: doc | {"binds": [{"host": "/", "sandbox": "/x", "writable": True, "mode": "dev"}]}, "binds"),
        (lambda doc: doc | {"command": []}, "an empty command"),
        (lambda doc: doc | {"slug": "../etc"}, "not a server slug"),
        (lambda doc: doc | {"provider": "linear"}, "no credential variable"),
    ],
)
def test_a_tampered_spec_is_refused_without_echoing_it(mutate, message):
    with pytest.raises(SpecInvalid) as refused:
        decode_spec(header_of(mutate(raw_json(kit()))))

    assert message in str(refused.value)
    assert SECRET not in str(refused.value)


@pytest.mark.parametrize("value", [b"", b"not base64!", b"AAAA", base64.urlsafe_b64encode(b"[1, 2]"), b"A" * 20000])
def test_garbage_and_oversized_specs_are_refused(value):
    with pytest.raises(SpecInvalid):
        decode_spec(value)


def test_a_spec_too_large_for_the_host_is_refused_when_it_is_built():
    with pytest.raises(SpecInvalid, match=f"more than the {MAX_SPEC_CHARS}"):
        encode_spec(kit(secrets=(("BIG", "x" * MAX_SPEC_CHARS),)))


# --- the host refuses bad specs with a JSON-RPC error --------------------------------------------


@pytest.fixture
def host(tmp_path, settings):
    with McpHostThread(host_config(sandbox="none", root=tmp_path / "mcp_host", sweep_s=0.2)) as running:
        settings.TOOLGATE_MCP_HOST_URL, settings.TOOLGATE_MCP_HOST_TOKEN = running.url, running.token
        yield running


def post(host: McpHostThread, spec: bytes | str | None, slug: str = "kit", **headers: str) -> httpx2.Response:
    sent = {**ACCEPT, "Authorization": f"Bearer {host.token}", **headers}
    if spec is not None:
        sent["X-Toolgate-Spec"] = spec.decode() if isinstance(spec, bytes) else spec
    return httpx2.post(f"{host.url}/servers/{slug}/mcp", json=LIST, headers=sent, timeout=30)


@pytest.mark.parametrize(
    ("spec", "slug", "message"),
    [
        (None, "kit", "carries no server spec"),
        ("%%%", "kit", "not base64url"),
        ("A" * (MAX_SPEC_CHARS + 1), "kit", f"larger than {MAX_SPEC_CHARS}"),
        (header_of(raw_json(kit()) | {"trusted_unsandboxed": 1}), "kit", "malformed at: trusted_unsandboxed"),
        (encode_spec(kit()), "lin", "for another server than lin"),
    ],
)
def test_the_host_refuses_a_missing_tampered_or_oversized_spec_with_a_jsonrpc_error(host, caplog, spec, slug, message):
    response = post(host, spec, slug=slug)

    error = response.json()["error"]
    assert response.status_code == 200
    assert error["message"].startswith("mcp host: ")
    assert message in error["message"]
    assert host.children() == []  # nothing was started
    assert SECRET not in caplog.text


def test_the_host_starts_the_child_from_the_spec_alone(host):
    response = post(host, encode_spec(kit()))

    names = [tool["name"] for tool in response.json()["result"]["tools"]]
    assert "environment" in names
    (child,) = host.children()
    assert (child.spec.slug, child.spec.env["KIT_TOKEN"], child.spec.env["MODE"]) == ("kit", SECRET, "read-only")


# --- revocation: a push -------------------------------------------------------------------------


def test_the_stop_endpoint_stops_only_that_connections_children_and_needs_the_token(host):
    spec = encode_spec(kit(provider="linear", credential_env="LINEAR_API_KEY"))
    for connection, credential in (("c-one", "lin_one_0123456789"), ("c-two", "lin_two_0123456789")):
        post(host, spec, **{"X-Toolgate-Connection": connection, "X-Toolgate-Credential": credential})
    assert sorted(child.spec.connection_id for child in host.children()) == ["c-one", "c-two"]

    anonymous = httpx2.post(f"{host.url}/connections/c-one/stop")
    assert anonymous.status_code == 401
    assert len(host.children()) == 2

    assert host_stop_connection("c-one") is True  # answered once the child is gone, not on a later sweep
    assert [child.spec.connection_id for child in host.children()] == ["c-two"]


def test_a_host_that_cannot_be_told_costs_the_revocation_nothing_but_a_log_line(settings, caplog):
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        settings.TOOLGATE_MCP_HOST_URL = f"http://127.0.0.1:{probe.getsockname()[1]}"
    settings.TOOLGATE_MCP_HOST_TOKEN = "a-token-for-nobody"

    with caplog.at_level(logging.WARNING):
        assert host_stop_connection("c-one") is False

    assert "was not told to stop connection c-one's children (ConnectError)" in caplog.text
    assert "a-token-for-nobody" not in caplog.text


# --- the host process needs no database ---------------------------------------------------------


class CountingListener:
    """A TCP port standing in for PostgreSQL: it accepts, counts and closes whatever connects."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_manage_py_mcp_host_runs_in_production_mode_with_its_token_alone_and_never_touches_the_database(tmp_path):
    database = CountingListener()
    port, token = free_port(), "host-only-token-0123456789abcdef"
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONUNBUFFERED": "1",
        "HOME": str(tmp_path),
        "DEBUG": "False",  # production: no SECRET_KEY, key ring or REDIS_URL given, and none needed
        "DATABASE_URL": f"postgres://toolgate:pw@127.0.0.1:{database.port}/toolgate",
        "TOOLGATE_MCP_HOST_URL": f"http://127.0.0.1:{port}",
        "TOOLGATE_MCP_HOST_TOKEN": token,
        "TOOLGATE_MCP_HOST_SANDBOX": "none",
        "TOOLGATE_MCP_HOST_REQUIRE_SANDBOX": "false",
        "TOOLGATE_MCP_HOST_DIR": str(tmp_path / "mcp_host"),
    }
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "mcp_host"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}/servers/kit/mcp"
        headers = {**ACCEPT, "Authorization": f"Bearer {token}", "X-Toolgate-Spec": encode_spec(kit())}
        deadline, answer = time.monotonic() + 60, None
        while answer is None and time.monotonic() < deadline and process.poll() is None:
            try:
                answer = httpx2.post(url, json=LIST, headers=headers, timeout=30)
            except httpx2.ConnectError:
                time.sleep(0.2)
        assert answer is not None, process.stdout.read() if process.poll() is not None else "no answer in time"

        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "add", "arguments": {"a": 2, "b": 3}},
        }
        added = httpx2.post(url, json=call, headers=headers, timeout=30).json()["result"]
        stopped = httpx2.post(
            f"http://127.0.0.1:{port}/connections/c-one/stop", headers={"Authorization": f"Bearer {token}"}
        )
    finally:
        process.terminate()
        output = process.communicate(timeout=30)[0]
        database.close()

    assert "environment" in [tool["name"] for tool in answer.json()["result"]["tools"]]
    assert added["structuredContent"] == {"result": 5}
    assert stopped.json() == {"stopped": 0}
    assert database.accepted == 0  # nothing ever connected to the database's port
    assert "mcp host on 127.0.0.1" in output
    assert SECRET not in output


HOST_DIR = ROOT / "gateway" / "host"
# What would let the host reach the database or open sealed secrets (endpoint.py is the worker's client).
NO_DATABASE_FOR = ("django.db", "gateway.upstream.models", "tools_app.models", "gateway.upstream.vault")


def test_the_hosts_modules_import_nothing_that_reaches_the_database():
    offences = []
    for path in sorted(HOST_DIR.glob("*.py")):
        if path.name == "endpoint.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offences += [f"{path.name}: {name}" for name in names if name.startswith(NO_DATABASE_FOR)]

    assert offences == []
