"""stdio MCP servers run by Toolgate's MCP host: registration, the child's environment and
isolation, restarts, per-connection children, and calls through the one pipeline.

Real parts: the host (HostApp under uvicorn on loopback), children started through the
SDK's stdio client running the SDK's MCPServer (tests/support/stdio_server.py), the
REST exec path with PostgreSQL, and `npx` for the published server-everything.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import logging
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx2
import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from connections_app.services import connection_revoke
from core.netguard import NOT_ALLOWED
from gateway.host import children
from gateway.host.sandbox import SANDBOX_HOME, bwrap_problem, find_bwrap
from gateway.host.serve import host_config
from gateway.models import McpServer
from gateway.upstream.services import mcp_server_discover, mcp_tool_approve
from tests.factories import ConnectionFactory, GrantFactory, TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.gateway.upstream.conftest import server_everything_fetched
from tests.support.api import api_client
from tests.support.mcp_host import McpHostThread
from tools_app.services import tool_set_enabled

SCRIPT = Path(__file__).resolve().parents[2] / "support" / "stdio_server.py"
COMMAND = f"{shlex.quote(sys.executable)} {shlex.quote(str(SCRIPT))}"
EXEC = "/api/v1/tools/exec"
OPERATOR_SECRET = "sk-operator-5f1e2d3c4b5a69788796a5b4"
TENANT_SECRET_A = "lin_tenantA_0123456789abcdef0123"
TENANT_SECRET_B = "lin_tenantB_fedcba9876543210fedc"
TOOLS = [
    "add", "can_read", "can_write", "connect", "crash", "environment", "fetch", "leak", "orphan", "process", "refuse",
    "shout",
]  # fmt: skip


def sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def add_server(slug: str, *args: str) -> str:
    out = _Out()
    call_command("mcp_upstream", "add", slug, *args, stdout=out)
    return out.text


class _Out:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass


# --- registration ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_url_and_command_exclude_each_other_and_one_is_needed():
    with pytest.raises(CommandError, match="exclude each other"):
        add_server("both", "--url", "https://mcp.example.com/mcp", "--command", "python server.py")
    with pytest.raises(CommandError, match=r"--url .* or its --command"):
        add_server("neither")
    assert not McpServer.objects.exists()


@pytest.mark.django_db
def test_the_command_is_split_like_a_shells_and_never_run_through_one():
    add_server("docs", "--command", "python 'my server.py' --root \"/srv/a b\" ; rm -rf / $(id) `x`")

    server = McpServer.objects.get(slug="docs")
    assert server.transport == "stdio"
    assert server.url == ""
    assert server.command == ["python", "my server.py", "--root", "/srv/a b", ";", "rm", "-rf", "/", "$(id)", "`x`"]
    with pytest.raises(CommandError, match="split like a shell"):
        add_server("broken", "--command", "python 'unclosed")
    with pytest.raises(CommandError, match="names no program"):
        add_server("empty", "--command", "   ")


@pytest.mark.django_db
def test_allowed_hosts_are_checked_at_add_time_stored_normalised_and_printed(settings):
    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = False
    refused = [
        ("api.github.com", "--allow-host refused: 'api.github.com' is not HOST:PORT"),
        ("*.github.com:443", "wildcards are not allowed"),
        ("127.0.0.1:5432", f"--allow-host 127.0.0.1:5432 refused: {NOT_ALLOWED}"),
        ("169.254.169.254:80", f"--allow-host 169.254.169.254:80 refused: {NOT_ALLOWED}"),
        ("[::1]:6379", f"--allow-host [::1]:6379 refused: {NOT_ALLOWED}"),
    ]
    for value, message in refused:
        with pytest.raises(CommandError, match=re.escape(message)):
            add_server("docs", "--command", "python server.py", "--allow-host", value)
    assert not McpServer.objects.filter(slug="docs").exists()
    with pytest.raises(CommandError, match="are for stdio servers"):
        add_server("web", "--url", "https://mcp.example.com/mcp", "--allow-host", "api.github.com:443")
    with pytest.raises(CommandError, match="are for stdio servers"):
        add_server("web", "--url", "https://mcp.example.com/mcp", "--trusted-unsandboxed")

    out = add_server(
        "docs", "--command", "python server.py", "--allow-host", "8.8.8.8:443", "--allow-host", "8.8.8.8:443"
    )
    server = McpServer.objects.get(slug="docs")
    assert (server.allowed_hosts, server.trusted_unsandboxed) == (["8.8.8.8:443"], False)
    assert "network: 8.8.8.8:443" in out
    assert "network: none" in add_server("docs", "--command", "python server.py")
    assert McpServer.objects.get(slug="docs").allowed_hosts == []

    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = True  # how tests and private deployments name loopback APIs
    add_server("docs", "--command", "python server.py", "--allow-host", "127.0.0.1:8080")
    assert McpServer.objects.get(slug="docs").allowed_hosts == ["127.0.0.1:8080"]


@pytest.mark.django_db
def test_toolgate_names_private_names_and_loose_provider_flags_are_refused(monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "not-for-children")
    monkeypatch.setenv("DOCS_TOKEN", OPERATOR_SECRET)
    refused = [
        (["--env", "TOOLGATE_MCP_HOST_TOKEN=x"], "Toolgate's own"),
        (["--env", "DJANGO_SETTINGS_MODULE=x"], "Toolgate's own"),
        (["--env", "HOME=/root"], "private to each child"),
        (["--env", "NOEQUALS"], "NAME=VALUE"),
        (["--secret-env", "KEY=SECRET_KEY"], "Toolgate's own"),
        (["--secret-env", "DATABASE_URL"], "Toolgate's own"),
        (["--secret-env", "API_TOKEN=UNSET_VARIABLE_XYZ"], "not set or empty"),
        (["--provider", "linear"], "needs --credential-env"),
        (["--credential-env", "LINEAR_TOKEN"], "needs --credential-env NAME"),
        (["--env", "A=1", "--secret-env", "A=DOCS_TOKEN"], "declared twice"),
    ]
    for extra, message in refused:
        with pytest.raises(CommandError, match=message):
            add_server("docs", "--command", "python server.py", *extra)
    with pytest.raises(CommandError, match="for stdio servers"):
        add_server("web", "--url", "https://mcp.example.com/mcp", "--env", "A=1")
    assert not McpServer.objects.exists()


@pytest.mark.django_db
def test_secret_env_is_sealed_and_never_stored_or_printed_in_clear(monkeypatch):
    monkeypatch.setenv("DOCS_TOKEN", OPERATOR_SECRET)

    out = add_server(
        "docs", "--command", "python server.py", "--env", "MODE=ro", "--secret-env", "API_TOKEN=DOCS_TOKEN"
    )
    listed = _Out()
    call_command("mcp_upstream", "list", stdout=listed)

    server = McpServer.objects.get(slug="docs")
    assert server.env == {"MODE": "ro"}
    assert server.secret_env_names == ["API_TOKEN"]
    assert OPERATOR_SECRET.encode() not in bytes(server.secret_env_sealed)
    assert OPERATOR_SECRET not in out + listed.text
    assert "docs enabled stdio:python server.py" in listed.text


@pytest.mark.django_db
def test_a_stdio_server_that_cannot_be_listed_names_the_host_for_the_operator(settings):
    add_server("docs", "--command", "python server.py")
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        settings.TOOLGATE_MCP_HOST_URL = f"http://127.0.0.1:{probe.getsockname()[1]}"
    out = _Out()

    with pytest.raises(CommandError, match="could not list: docs"):
        call_command("mcp_upstream", "discover", "docs", stdout=out)

    assert "docs: FAILED: the MCP host cannot be reached at TOOLGATE_MCP_HOST_URL" in out.text
    assert McpServer.objects.get(slug="docs").last_discovery_status == "failed"


# --- the host and its children -----------------------------------------------------------------


@pytest.fixture
def host(tmp_path, settings):
    settings.TOOLGATE_MCP_CHILD_MEMORY_MB = 4096
    settings.TOOLGATE_MCP_HOST_SANDBOX = "none"  # what `add` checks a command against, as the host runs it
    config = host_config(sandbox="none", root=tmp_path / "mcp_host", sweep_s=0.2)
    with McpHostThread(config) as running:
        settings.TOOLGATE_MCP_HOST_URL, settings.TOOLGATE_MCP_HOST_TOKEN = running.url, running.token
        yield running


@pytest.fixture
def caller(transactional_db):
    tenant = TenantFactory(slug="acme-co")
    account, key = service_account_with_key(tenant, name="agent")
    allowed = [f"mcp__{slug}__{tool}" for slug in ("kit", "lin") for tool in TOOLS]
    ToolPolicyFactory(tenant=tenant, allowed_tools=[*allowed, "mcp__everything__echo"])
    return account, key


def ready(slug: str, command: str, *args: str) -> McpServer:
    add_server(slug, "--command", command, *args)
    server = McpServer.objects.get(slug=slug)
    report = mcp_server_discover(server_id=server.pk)
    assert sorted(report.new) == sorted(f"mcp__{slug}__{tool}" for tool in TOOLS)
    for tool in TOOLS:
        mcp_tool_approve(tool_id=f"mcp__{slug}__{tool}", via="test")
    tool_set_enabled(tool_ids=[f"mcp__{slug}__{tool}" for tool in TOOLS], enabled=True)
    return server


def call(key: str, tool_id: str, args: dict, **extra):
    return api_client(key).post(EXEC, {"tool_id": tool_id, "args": args, **extra}, format="json")


def value(response) -> dict:
    assert response.status_code == 200, response.json()
    return response.json()["value"]


def report(response) -> dict:
    """The JSON a reporting tool (environment, process) answered as its result string."""
    return json.loads(value(response)["result"])


def test_a_stdio_server_is_discovered_and_called_through_the_pipeline(host, caller):
    _account, key = caller
    ready("kit", COMMAND)

    response = call(key, "mcp__kit__add", {"a": 2, "b": 40})

    assert value(response) == {"result": 42}
    assert call(key, "mcp__kit__add", {"a": "two", "b": 40}).json()["error_code"] == "validation"
    (child,) = host.children()
    assert child.spec.slug == "kit"
    assert child.spec.connection_id == ""


def test_a_warm_stdio_call_costs_no_more_queries_than_a_builtin_one(host, caller, django_assert_max_num_queries):
    # given a server whose spec header was built when its tools were bound, and a first call made
    _account, key = caller
    ready("kit", COMMAND, "--env", "MODE=read-only")
    assert value(call(key, "mcp__kit__add", {"a": 1, "b": 1})) == {"result": 2}

    # when / then: the same budget as a warm builtin call (tests/tools_app/test_api_exec.py); the spec
    # is not read or opened again per call
    with django_assert_max_num_queries(5):
        response = call(key, "mcp__kit__add", {"a": 2, "b": 3})
    assert value(response) == {"result": 5}


def test_a_stdio_tools_error_reaches_the_model_as_tool_error(host, caller):
    _account, key = caller
    ready("kit", COMMAND)

    response = call(key, "mcp__kit__refuse", {"reason": "the issue tracker is read-only today"})

    assert response.status_code == 200
    body = response.json()
    assert (body["ok"], body["error_code"]) == (False, "tool_error")
    assert [block["type"] for block in body["content"]] == ["text"]
    assert "the issue tracker is read-only today" in body["content"][0]["text"]


def test_the_childs_environment_holds_only_what_the_contract_lists(host, caller, monkeypatch):
    _account, key = caller
    for name in ("SECRET_KEY", "DATABASE_URL", "REDIS_URL", "TOOLGATE_PROBE", "DJANGO_PROBE", "CELERY_PROBE"):
        monkeypatch.setenv(name, "host-only-value")
    monkeypatch.setenv("LOGNAME", "toolgate")
    monkeypatch.setenv("SHELL", "/bin/bash")
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setenv("USER", "toolgate")
    monkeypatch.setenv("KIT_SOURCE", OPERATOR_SECRET)
    ready(
        "kit", COMMAND, "--env", "MODE=read-only", "--secret-env", "KIT_TOKEN=KIT_SOURCE", "--secret-env", "KIT_SOURCE"
    )

    env = report(call(key, "mcp__kit__environment", {}))
    process = report(call(key, "mcp__kit__process", {}))

    assert sorted(env) == [
        "HOME",
        "KIT_SOURCE",
        "KIT_TOKEN",
        "LANG",
        "MODE",
        "NPM_CONFIG_AUDIT",
        "NPM_CONFIG_FUND",
        "NPM_CONFIG_UPDATE_NOTIFIER",
        "PATH",
        "TMPDIR",
    ]
    assert env["NPM_CONFIG_UPDATE_NOTIFIER"] == env["NPM_CONFIG_FUND"] == env["NPM_CONFIG_AUDIT"] == sha("false")
    assert env["KIT_TOKEN"] == env["KIT_SOURCE"] == sha(OPERATOR_SECRET)
    assert env["MODE"] == sha("read-only")
    assert env["PATH"] == sha(os.environ["PATH"])
    home = host.app.supervisor.home_of(host.children()[0].spec)
    assert env["HOME"] == sha(str(home / "home"))
    assert env["TMPDIR"] == sha(str(home / "tmp"))
    assert process["cwd"] == str(home / "home")
    assert process["pgid"] == process["pid"] != os.getpgid(0)  # its own process group and session
    limits = process["limits"]
    assert limits["RLIMIT_DATA"] == 4096 * 1024 * 1024
    assert limits["RLIMIT_NOFILE"] == settings.TOOLGATE_MCP_CHILD_OPEN_FILES
    assert limits["RLIMIT_CPU"] == settings.TOOLGATE_MCP_CHILD_CPU_SECONDS
    assert limits["RLIMIT_NPROC"] == settings.TOOLGATE_MCP_CHILD_PROCESSES


def test_a_child_that_echoes_a_secret_is_withheld_and_stderr_is_logged_tagged_and_redacted(
    host, caller, monkeypatch, caplog
):
    caplog.set_level(logging.INFO, logger="toolgate.mcp_host.stderr")
    _account, key = caller
    monkeypatch.setenv("KIT_SOURCE", OPERATOR_SECRET)
    ready("kit", COMMAND, "--secret-env", "KIT_TOKEN=KIT_SOURCE")

    leaked = call(key, "mcp__kit__leak", {"name": "KIT_TOKEN"})
    disguised = [call(key, "mcp__kit__leak", {"name": "KIT_TOKEN", "form": form}) for form in ("base64", "spaced")]
    shouted = call(key, "mcp__kit__shout", {"text": f"hello from the child {OPERATOR_SECRET}"})

    assert leaked.status_code == 502
    assert leaked.json()["error_code"] == "execution"
    assert OPERATOR_SECRET not in leaked.content.decode()
    assert [(r.status_code, r.json()["error_code"]) for r in disguised] == [(502, "execution")] * 2
    assert value(shouted) == {"result": "shouted"}
    host.wait_for(lambda: "hello from the child" in caplog.text)
    line = next(r.getMessage() for r in caplog.records if "hello from the child" in r.getMessage())
    assert line == "mcp server kit: hello from the child [redacted]"
    assert OPERATOR_SECRET not in caplog.text


# Wide enough that a loaded machine (requests reaching the host late) still calls inside it.
BACKOFF_S = 3.0


def test_a_child_that_exits_answers_execution_and_is_started_again_with_backoff(host, caller, monkeypatch):
    monkeypatch.setattr(children, "BACKOFF_FIRST_S", BACKOFF_S)  # doubles per exit
    _account, key = caller
    ready("kit", COMMAND)
    first_pid = report(call(key, "mcp__kit__process", {}))["pid"]

    started = time.monotonic()
    crashed = call(key, "mcp__kit__crash", {})
    exited = time.monotonic()
    assert exited - started < 5  # the dead child's call answers at once, not at the budget
    assert (crashed.status_code, crashed.json()["error_code"]) == (502, "execution")
    host.wait_for(lambda: not host.children())
    assert call(key, "mcp__kit__add", {"a": 1, "b": 1}).json()["error_code"] == "execution"  # inside the backoff
    time.sleep(max(0.0, exited + BACKOFF_S + 0.1 - time.monotonic()))
    second_pid = report(call(key, "mcp__kit__process", {}))["pid"]
    assert second_pid != first_pid

    call(key, "mcp__kit__crash", {})  # exits again at once: the next wait doubles
    exited = time.monotonic()
    host.wait_for(lambda: not host.children())
    time.sleep(max(0.0, exited + BACKOFF_S + 0.1 - time.monotonic()))
    assert call(key, "mcp__kit__add", {"a": 1, "b": 1}).json()["error_code"] == "execution"
    time.sleep(max(0.0, exited + 2 * BACKOFF_S + 0.1 - time.monotonic()))
    assert value(call(key, "mcp__kit__add", {"a": 1, "b": 1})) == {"result": 2}


def test_an_idle_child_is_stopped_and_started_again_on_the_next_call(host, caller):
    _account, key = caller
    ready("kit", COMMAND)
    pid = report(call(key, "mcp__kit__process", {}))["pid"]
    object.__setattr__(host.app.supervisor.config, "idle_timeout_s", 0.3)

    host.wait_for(lambda: not host.children())
    object.__setattr__(host.app.supervisor.config, "idle_timeout_s", 300.0)

    assert report(call(key, "mcp__kit__process", {}))["pid"] != pid  # no backoff after an idle stop


def test_each_tenant_connection_gets_its_own_child_with_its_credential_and_revocation_stops_it(host, caller, caplog):
    caplog.set_level(logging.DEBUG)
    account, key = caller
    ready("lin", COMMAND, "--provider", "linear", "--credential-env", "LINEAR_API_KEY")
    first = ConnectionFactory(tenant=account.tenant, provider="linear", credentials={"api_key": TENANT_SECRET_A})
    second = ConnectionFactory(tenant=account.tenant, provider="linear", credentials={"api_key": TENANT_SECRET_B})
    grant = GrantFactory(service_account=account, connections=[first, second])

    def via(connection, tool):
        return call(key, f"mcp__lin__{tool}", {}, connection_id=str(connection.pk), grant_id=str(grant.pk))

    assert call(key, "mcp__lin__environment", {}).json()["error_code"] == "validation"  # needs a connection
    env_a, env_b = report(via(first, "environment")), report(via(second, "environment"))

    assert env_a["LINEAR_API_KEY"] == sha(TENANT_SECRET_A)
    assert env_b["LINEAR_API_KEY"] == sha(TENANT_SECRET_B)
    npm_quiet = ["NPM_CONFIG_AUDIT", "NPM_CONFIG_FUND", "NPM_CONFIG_UPDATE_NOTIFIER"]
    assert sorted(env_a) == sorted(env_b) == ["HOME", "LANG", "LINEAR_API_KEY", *npm_quiet, "PATH", "TMPDIR"]
    pid_a, pid_b = (report(via(c, "process"))["pid"] for c in (first, second))
    assert pid_a != pid_b

    def children_of_connections():
        return {child.spec.connection_id for child in host.children()} - {""}  # "": discovery's, credential-less

    assert children_of_connections() == {str(first.pk), str(second.pk)}

    connection_revoke(connection=first)  # its commit tells the host (no database there to sweep)
    host.wait_for(lambda: children_of_connections() == {str(second.pk)}, timeout_s=1.5)
    assert via(first, "process").json()["error_code"] == "connection_unavailable"
    assert report(via(second, "process"))["pid"] == pid_b
    assert TENANT_SECRET_A not in caplog.text
    assert TENANT_SECRET_B not in caplog.text


def test_a_bounded_number_of_children_run_and_the_least_recently_used_idle_one_makes_room(host, caller):
    _account, key = caller
    object.__setattr__(host.app.supervisor.config, "max_children", 1)
    ready("kit", COMMAND)
    ready("lin", COMMAND)

    kit_pid = report(call(key, "mcp__kit__process", {}))["pid"]
    lin_pid = report(call(key, "mcp__lin__process", {}))["pid"]

    assert [child.spec.slug for child in host.children()] == ["lin"]
    assert report(call(key, "mcp__kit__process", {}))["pid"] not in (kit_pid, lin_pid)
    assert [child.spec.slug for child in host.children()] == ["kit"]


def test_when_the_host_is_down_a_call_answers_execution_at_once(host, caller, settings):
    _account, key = caller
    ready("kit", COMMAND)
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        settings.TOOLGATE_MCP_HOST_URL = f"http://127.0.0.1:{probe.getsockname()[1]}"

    started = time.monotonic()
    response = call(key, "mcp__kit__add", {"a": 1, "b": 1})

    assert (response.status_code, response.json()["error_code"]) == (502, "execution")
    assert time.monotonic() - started < 5


def test_the_host_refuses_callers_without_its_token(host):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream"}

    anonymous = httpx2.post(f"{host.url}/servers/kit/mcp", json=body, headers=headers)
    wrong = httpx2.post(f"{host.url}/servers/kit/mcp", json=body, headers={**headers, "Authorization": "Bearer guess"})

    assert (anonymous.status_code, wrong.status_code) == (401, 401)
    assert host.children() == []


# --- bubblewrap ----------------------------------------------------------------------------------

BWRAP_PROBLEM = bwrap_problem(find_bwrap())


needs_bwrap = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"bubblewrap is not usable here: {BWRAP_PROBLEM}")


def sandboxed_command(root: Path, slug: str) -> str:
    """The test server, run from the child's own HOME: Toolgate's tree (and this script in it) is hidden.

    Python comes from the virtualenv's real directory, which stays visible read-only.
    """
    home = root / "children" / slug / "shared" / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "stdio_server.py").write_text(SCRIPT.read_text())
    python = Path(os.path.realpath(sys.prefix)) / "bin" / "python"
    return shlex.join([str(python), f"{SANDBOX_HOME}/stdio_server.py"])


@pytest.fixture
def bwrap_host(tmp_path, settings):
    config = host_config(sandbox="bwrap", root=tmp_path / "mcp_host", sweep_s=0.2)
    with McpHostThread(config) as running:
        settings.TOOLGATE_MCP_HOST_URL, settings.TOOLGATE_MCP_HOST_TOKEN = running.url, running.token
        yield running


class LoopbackHttp:
    """A real HTTP server on loopback standing in for an API a child calls; it records what reached it."""

    def __init__(self) -> None:
        seen = self.seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append((self.path, self.headers.get("Connection", "")))
                body = f"hello from upstream {self.path}".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> LoopbackHttp:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def api():
    with LoopbackHttp() as server:
        yield server


@pytest.fixture
def apis():
    with LoopbackHttp() as allowed, LoopbackHttp() as other:
        yield allowed, other


def run_tool(key: str, slug: str, tool: str, **args):
    result = value(call(key, f"mcp__{slug}__{tool}", args))["result"]
    return json.loads(result) if tool in ("environment", "process") else result


@needs_bwrap
def test_under_bubblewrap_the_child_sees_a_read_only_root_and_not_toolgates_tree(bwrap_host, settings, caller):
    _account, key = caller
    root = bwrap_host.app.supervisor.config.root
    ready("kit", sandboxed_command(root, "kit"))

    def run(tool, **args):
        return run_tool(key, "kit", tool, **args)

    # an empty directory, but for the host's own virtualenv when it lies in the tree (a checkout's .venv)
    venv_inside = Path(os.path.realpath(sys.prefix)).is_relative_to(Path(settings.BASE_DIR).resolve())
    assert run("can_read", path=str(settings.BASE_DIR)) == ("listed:.venv" if venv_inside else "listed:")
    assert run("can_read", path=str(Path(settings.BASE_DIR) / "manage.py")).startswith("refused:")
    assert run("can_read", path=str(Path(settings.VAR_DIR) / "secret_key")).startswith("refused:")
    assert run("can_read", path=str(SCRIPT)).startswith("refused:")
    assert run("can_read", path=f"/proc/{os.getpid()}/environ").startswith("refused:")  # the host's own process
    assert run("can_write", path="/etc/toolgate-probe") == "refused:OSError"
    assert run("can_write", path=f"{SANDBOX_HOME}/probe") == "written"
    assert run("environment")["HOME"] == sha(SANDBOX_HOME)
    assert run("process")["pid"] <= 3  # a PID namespace of its own
    assert (root / "children" / "kit" / "shared" / "home" / "probe").read_text() == "x"


def database_and_redis_ports() -> list[int]:
    ports = []
    for url in (os.environ.get("DATABASE_URL", ""), os.environ.get("REDIS_URL", "")):
        parts = urlsplit(url)
        if parts.hostname in ("127.0.0.1", "localhost") and parts.port:
            ports.append(parts.port)
    return ports


@needs_bwrap
def test_under_bubblewrap_a_child_has_no_network_by_default(bwrap_host, caller, api):
    _account, key = caller
    ready("kit", sandboxed_command(bwrap_host.app.supervisor.config.root, "kit"))
    ports = [api.port, bwrap_host.port, *database_and_redis_ports()]
    for port in ports:  # each of them listens: the test process reaches it
        socket.create_connection(("127.0.0.1", port), timeout=3).close()

    reached = {port: run_tool(key, "kit", "connect", host="127.0.0.1", port=port) for port in ports}
    fetched = run_tool(key, "kit", "fetch", url=f"http://127.0.0.1:{api.port}/probe")

    assert reached == dict.fromkeys(ports, "refused:ConnectionRefusedError")
    assert fetched.startswith("failed:URLError")
    assert api.seen == []
    names = run_tool(key, "kit", "environment")
    assert not {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} & set(names)


@needs_bwrap
def test_an_allowed_host_is_reached_through_the_egress_proxy_and_nothing_else(
    bwrap_host, caller, apis, settings, caplog
):
    api, other_api = apis
    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = True  # the test's API is on loopback
    _account, key = caller
    command = sandboxed_command(bwrap_host.app.supervisor.config.root, "kit")
    ready("kit", command, "--allow-host", f"127.0.0.1:{api.port}")
    assert McpServer.objects.get(slug="kit").allowed_hosts == [f"127.0.0.1:{api.port}"]
    caplog.set_level(logging.WARNING, logger="gateway.host.egress")

    plain = run_tool(key, "kit", "fetch", url=f"http://127.0.0.1:{api.port}/plain?q=1")
    tunnelled = run_tool(key, "kit", "fetch", url=f"http://127.0.0.1:{api.port}/tunnelled", tunnel=True)
    other = run_tool(key, "kit", "fetch", url=f"http://127.0.0.1:{other_api.port}/other")
    other_tunnel = run_tool(key, "kit", "fetch", url=f"http://127.0.0.1:{other_api.port}/other", tunnel=True)
    direct = run_tool(key, "kit", "connect", host="127.0.0.1", port=api.port)

    assert plain == "200:hello from upstream /plain?q=1"
    assert tunnelled == "200:hello from upstream /tunnelled"
    assert [path for path, _connection in api.seen] == ["/plain?q=1", "/tunnelled"]
    assert api.seen[0][1] == "close"  # a plain request is one request per connection
    assert other == "403:egress refused: not an allowed host of this server (mcp_upstream add --allow-host)\n"
    assert other_tunnel.startswith("failed:OSError:Tunnel connection failed: 403")
    assert other_api.seen == []
    assert direct == "refused:ConnectionRefusedError"  # the proxy is the only way out
    refusals = [record.getMessage() for record in caplog.records if record.name == "gateway.host.egress"]
    assert refusals == [f"mcp server kit: egress to 127.0.0.1:{other_api.port} refused: not an allowed host of "
                        "this server (mcp_upstream add --allow-host)"] * 2  # fmt: skip
    assert not any("/other" in message or "q=1" in message for message in refusals)

    # A named host is still checked by the outbound guard at every connection.
    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = False
    refused = run_tool(key, "kit", "fetch", url=f"http://127.0.0.1:{api.port}/again")
    assert refused == f"403:egress refused: {NOT_ALLOWED}\n"
    assert len(api.seen) == 2


@needs_bwrap
def test_under_bubblewrap_an_orphan_that_double_forks_into_its_own_session_is_stopped_with_the_server(
    bwrap_host, caller
):
    _account, key = caller
    ready("kit", sandboxed_command(bwrap_host.app.supervisor.config.root, "kit"))
    marker = f"toolgate-orphan-{os.getpid()}-{time.monotonic_ns()}"

    assert run_tool(key, "kit", "orphan", marker=marker) == "left"
    assert processes_with(marker)  # alive, in a session of its own, outside the server's process group

    call(key, "mcp__kit__crash", {})
    bwrap_host.wait_for(lambda: not processes_with(marker) and not bwrap_host.children())


def processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_a_host_that_requires_a_sandbox_starts_only_trusted_unsandboxed_servers_without_one(
    tmp_path, settings, caller, caplog
):
    settings.TOOLGATE_MCP_CHILD_MEMORY_MB = 4096
    settings.TOOLGATE_MCP_HOST_REQUIRE_SANDBOX = True  # what DEBUG=False sets
    settings.TOOLGATE_MCP_HOST_SANDBOX = "none"  # what `add` checks a command against, as the host runs it
    _account, key = caller
    config = host_config(sandbox="none", root=tmp_path / "mcp_host", sweep_s=0.2)
    with McpHostThread(config) as host:
        settings.TOOLGATE_MCP_HOST_URL, settings.TOOLGATE_MCP_HOST_TOKEN = host.url, host.token
        add_server("kit", "--command", COMMAND)
        out = _Out()
        with pytest.raises(CommandError, match="could not list: kit"):
            call_command("mcp_upstream", "discover", "kit", stdout=out)
        assert host.children() == []
        assert not (tmp_path / "mcp_host" / "children" / "kit").exists()  # not even its home was made
        assert "the MCP host's log says why (lines tagged 'mcp server kit')" in out.text
        said = [record.getMessage() for record in caplog.records if record.name == "gateway.host.app"]
        assert said[-1] == (
            "mcp server kit: no sandbox to run it in (TOOLGATE_MCP_HOST_SANDBOX=none); the host starts only servers "
            "added with --trusted-unsandboxed without one (TOOLGATE_MCP_HOST_REQUIRE_SANDBOX)"
        )

        assert "may run unsandboxed" in add_server("lin", "--command", COMMAND, "--trusted-unsandboxed")
        ready("lin", COMMAND, "--trusted-unsandboxed")
        assert value(call(key, "mcp__lin__add", {"a": 2, "b": 3})) == {"result": 5}
        assert [child.spec.slug for child in host.children()] == ["lin"]


# --- a published server over npx -------------------------------------------------------------------


def test_the_published_server_everything_runs_as_a_stdio_upstream(host, caller):
    _account, key = caller
    server_everything_fetched(host)

    add_server("everything", "--command", "npx -y @modelcontextprotocol/server-everything stdio")
    server = McpServer.objects.get(slug="everything")
    report = mcp_server_discover(server_id=server.pk)
    assert "mcp__everything__echo" in report.new
    mcp_tool_approve(tool_id="mcp__everything__echo", via="test")
    tool_set_enabled(tool_ids=["mcp__everything__echo"], enabled=True)

    response = call(key, "mcp__everything__echo", {"message": "hello"})

    assert response.status_code == 200, response.json()
    assert "hello" in str(response.json()["value"])


@pytest.mark.django_db
def test_the_admin_shows_a_stdio_server_without_its_secrets_and_edits_keep_its_command(admin_client, monkeypatch):
    monkeypatch.setenv("DOCS_TOKEN", OPERATOR_SECRET)
    add_server(
        "docs", "--command", "python server.py --ro", "--env", "MODE=ro", "--secret-env", "API_TOKEN=DOCS_TOKEN",
        "--allow-host", "8.8.8.8:443", "--trusted-unsandboxed",
    )  # fmt: skip
    server = McpServer.objects.get(slug="docs")
    sealed = bytes(server.secret_env_sealed)
    page = f"/admin/gateway/mcpserver/{server.pk}/change/"

    listing = admin_client.get("/admin/gateway/mcpserver/").content.decode()
    shown = admin_client.get(page).content.decode()
    saved = admin_client.post(page, {"provider": "", "discover_seconds": 600, "enabled": "on"})

    assert "stdio: python server.py --ro" in listing
    assert "python server.py --ro" in shown
    assert "API_TOKEN (encrypted)" in shown
    assert "MODE" in shown
    assert "8.8.8.8:443" in shown  # the network it may reach
    assert "Trusted unsandboxed" in shown
    assert OPERATOR_SECRET not in listing + shown
    assert saved.status_code == 302
    server.refresh_from_db()
    assert (server.discover_seconds, server.command, server.env) == (
        600,
        ["python", "server.py", "--ro"],
        {"MODE": "ro"},
    )
    assert bytes(server.secret_env_sealed) == sealed
    assert server.secret_env_names == ["API_TOKEN"]
    assert (server.allowed_hosts, server.trusted_unsandboxed) == (["8.8.8.8:443"], True)


def test_stderr_is_bounded_per_line_and_per_window(caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="toolgate.mcp_host.stderr")
    spec = children.ChildSpec(
        slug="noisy", connection_id="", command=("true",), env={}, secret_values=("hunter2-secret",)
    )
    child = children.StdioChild(spec, argv=["true"], env={}, cwd=Path("/"))
    clock = [1000.0]
    monkeypatch.setattr(children.time, "monotonic", lambda: clock[0])

    child._log_line(b"x" * 995 + b"hunter2-secret and more")  # the cut at 1,000 falls inside the secret
    for number in range(children.STDERR_LINES_PER_WINDOW + 9):
        child._log_line(f"line {number}".encode())
    clock[0] += children.STDERR_WINDOW_S + 1
    child._log_line(b"after the window")

    messages = [record.getMessage() for record in caplog.records]
    assert messages[0] == "mcp server noisy: " + "x" * 995 + "[reda"  # never a piece of the secret
    assert len(messages) == children.STDERR_LINES_PER_WINDOW + 2
    assert messages[-2:] == ["mcp server noisy: 10 stderr lines not logged", "mcp server noisy: after the window"]
    assert all(record.mcp_server == "noisy" for record in caplog.records if record.levelname == "INFO")


def test_the_host_process_is_made_non_dumpable_so_same_user_processes_cannot_read_its_environment():
    # In a process of its own: the flag would otherwise stay on the test run.
    code = (
        "import ctypes, django; django.setup(); from gateway.host.serve import protect_host_process; "
        "libc = ctypes.CDLL(None); before = libc.prctl(3, 0, 0, 0, 0); ok = protect_host_process(); "
        "print(before, ok, libc.prctl(3, 0, 0, 0, 0), open('/proc/self/status').read().count('\\n') > 0)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=settings.BASE_DIR,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"},
    )
    assert done.stdout.split() == ["1", "True", "0", "True"]  # PR_GET_DUMPABLE before and after; /proc/self still ours
