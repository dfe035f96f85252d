"""stdio servers people actually run through the MCP host: Node servers that call fetch() under
the default limits, npm packages installed when the server is added (so a child without network
starts), folders bound per server, commands the sandbox cannot run refused at add, and slow
starts that say a retry will work.

Real parts: the host under uvicorn on loopback, bubblewrap when usable here, Node 20, npm and the
published @modelcontextprotocol servers (skipped with the reason when npm cannot fetch them).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import time
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from gateway.host import children
from gateway.host.sandbox import bwrap_problem, find_bwrap
from gateway.host.serve import host_config
from gateway.models import McpServer
from gateway.upstream.definitions import DiscoveryBounds
from gateway.upstream.services import DiscoveryFailed, mcp_server_discover, mcp_tool_approve
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import api_client
from tests.support.mcp_host import McpHostThread
from tools_app.services import tool_set_enabled

SUPPORT = Path(__file__).resolve().parents[2] / "support"
NODE = shutil.which("node")
BWRAP_PROBLEM = bwrap_problem(find_bwrap())
SANDBOX = "bwrap" if BWRAP_PROBLEM is None else "none"
EXEC = "/api/v1/tools/exec"
ALLOWED = [
    "mcp__nodefetch__fetch_loopback",
    "mcp__everything__echo",
    "mcp__memory__create_entities",
    "mcp__memory__read_graph",
    "mcp__files__write_file",
    "mcp__files__read_text_file",
    "mcp__slow__add",
]


class _Out:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass


def add_server(slug: str, *args: str) -> str:
    out = _Out()
    call_command("mcp_upstream", "add", slug, *args, stdout=out)
    return out.text


@pytest.fixture
def caller(transactional_db):
    tenant = TenantFactory(slug="acme-co")
    _account, key = service_account_with_key(tenant, name="agent")
    ToolPolicyFactory(tenant=tenant, allowed_tools=ALLOWED)
    return key


@pytest.fixture
def host(tmp_path, settings):
    """The host with the default limits of settings (nothing lowered or raised for the test)."""
    settings.TOOLGATE_MCP_HOST_DIR = str(tmp_path / "mcp_host")
    config = host_config(sandbox=SANDBOX, sweep_s=0.2)
    with McpHostThread(config) as running:
        settings.TOOLGATE_MCP_HOST_URL, settings.TOOLGATE_MCP_HOST_TOKEN = running.url, running.token
        yield running


def enable(slug: str, *tools: str) -> list[str]:
    server = McpServer.objects.get(slug=slug)
    report = mcp_server_discover(server_id=server.pk)
    tool_ids = [f"mcp__{slug}__{tool}" for tool in tools]
    assert set(tool_ids) <= set(report.new), report.new
    for tool_id in tool_ids:
        mcp_tool_approve(tool_id=tool_id, via="test")
    tool_set_enabled(tool_ids=tool_ids, enabled=True)
    return tool_ids


def call(key: str, tool_id: str, args: dict, *, ok: bool = True) -> dict:
    """The exec answer's body; `ok` is what the tool's result must say (a tool error is still a 200)."""
    response = api_client(key).post(EXEC, {"tool_id": tool_id, "args": args}, format="json")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["ok"] is ok, body
    return body


def text_of(body: dict) -> str:
    return json.dumps(body.get("value") if body["ok"] else body.get("content"))


# --- memory: Node's fetch() under the default limits ------------------------------------------------


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_a_node_server_that_calls_fetch_runs_under_the_default_memory_limit(host, caller, settings):
    assert settings.TOOLGATE_MCP_CHILD_MEMORY_MB == 4096  # the shipped default, not a test's
    script = SUPPORT / "fetch_server.mjs"
    if SANDBOX == "bwrap":  # Toolgate's tree is hidden from the child: the script travels in the command
        command = shlex.join([NODE, "--input-type=module", "-e", script.read_text()])
    else:
        command = shlex.join([NODE, str(script)])
    add_server("nodefetch", "--command", command)
    [tool_id] = enable("nodefetch", "fetch_loopback")

    value = call(caller, tool_id, {"word": "hello"})

    assert "served:hello" in text_of(value), value
    assert "WebAssembly" not in text_of(value)


# --- slow starts ---------------------------------------------------------------------------------


# A server of one tool, short enough to pass inline (the checkout, where the test servers live, is hidden).
ADDER = """
from mcp.server.mcpserver import MCPServer
app = MCPServer(name="adder")
@app.tool()
def add(a: int, b: int) -> int:
    return a + b
app.run("stdio")
"""


def test_a_slow_start_says_the_server_may_still_be_starting_and_the_retry_works(host, caller):
    python = Path(os.path.realpath(sys.prefix)) / "bin" / "python"  # outside Toolgate's tree, which is hidden
    add_server("slow", "--command", shlex.join(["/bin/sh", "-c", 'sleep 4; exec "$0" -c "$1"', str(python), ADDER]))
    server = McpServer.objects.get(slug="slow")
    started = time.monotonic()

    with pytest.raises(DiscoveryFailed) as failure:
        mcp_server_discover(server_id=server.pk, bounds=DiscoveryBounds(total_timeout_s=1.0))
    assert time.monotonic() - started < 3.5  # the listing gave up; the child kept starting
    time.sleep(4)
    report = mcp_server_discover(server_id=server.pk)

    assert failure.value.safe_message == (
        "the listing took longer than 1 s; a stdio server may still be starting (a first start can take "
        "a while): run discover again shortly, the retry finds it started"
    )
    assert "mcp__slow__add" in report.new
    assert len(host.children()) == 1  # the retry used the child the first attempt started


# --- npm packages installed at add, started with no network ----------------------------------------

MEMORY = "@modelcontextprotocol/server-memory@2026.8.31"
FILESYSTEM = "@modelcontextprotocol/server-filesystem@2026.8.31"
FETCH = "mcp-server-fetch==2026.10.24"
IN_SANDBOX = "/tmp/reference"  # noqa: S108 - a path inside the child's private /tmp


def add_npm_server(slug: str, package: str, *args: str) -> str:
    """`mcp_upstream add --npm`, skipped with npm's reason when the registry cannot be reached."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed")
    try:
        return add_server(slug, "--npm", package, *args)
    except CommandError as exc:
        if "npm could not install" in str(exc) or "npm did not install" in str(exc):
            pytest.skip(f"npm cannot fetch {package} here: {exc}")
        raise


@pytest.fixture
def offline(monkeypatch):
    """Children get a network namespace of their own (only their own loopback): nothing to download from."""
    real = children.bwrap_argv

    def without_network(*args, **kwargs):
        return ["--unshare-net" if arg == "--share-net" else arg for arg in real(*args, **kwargs)]

    monkeypatch.setattr(children, "bwrap_argv", without_network)


@pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"no network namespace without bubblewrap: {BWRAP_PROBLEM}")
@pytest.mark.timeout(300)
def test_an_npm_server_installed_at_add_starts_with_no_network(host, caller, offline, settings):
    out = add_npm_server("memory", MEMORY, "--env", "MEMORY_FILE_PATH=/tmp/home/memory.json")
    server = McpServer.objects.get(slug="memory")
    installed = Path(settings.TOOLGATE_MCP_HOST_DIR) / "packages" / "memory"
    manifest = installed / "node_modules" / "@modelcontextprotocol" / "server-memory" / "package.json"
    assert (server.command, server.npm_package) == (["mcp-server-memory"], MEMORY)
    assert json.loads(manifest.read_text())["version"] == "2026.8.31"
    assert "npm @modelcontextprotocol/server-memory@2026.8.31" in out
    create, read = enable("memory", "create_entities", "read_graph")

    call(caller, create, {"entities": [{"name": "toolgate", "entityType": "gateway", "observations": ["offline"]}]})
    graph = call(caller, read, {})

    assert "toolgate" in text_of(graph)
    assert "offline" in text_of(graph)
    [child] = host.children()
    home = host.app.supervisor.home_of(child.spec) / "home"
    assert (home / "memory.json").is_file()  # its data went to its HOME, not the read-only package
    assert not (home / ".npm").exists()  # nothing was downloaded at start


@pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"no network namespace without bubblewrap: {BWRAP_PROBLEM}")
@pytest.mark.timeout(600)  # pip resolves and fetches a dozen wheels
def test_a_pip_server_installed_at_add_into_its_own_virtualenv_starts_with_no_network(host, caller, offline, settings):
    try:
        out = add_server("fetchpy", "--pip", FETCH)
    except CommandError as exc:
        if "pip could not install" in str(exc) or "pip did not install" in str(exc):
            pytest.skip(f"pip cannot fetch {FETCH} here: {exc}")
        raise
    server = McpServer.objects.get(slug="fetchpy")
    venv = Path(settings.TOOLGATE_MCP_HOST_DIR) / "packages" / "fetchpy" / "venv"

    report = mcp_server_discover(server_id=server.pk)

    assert (server.command, server.pip_package, server.npm_package) == (["mcp-server-fetch"], FETCH, "")
    assert f"pip {FETCH}" in out
    assert (venv / "bin" / "mcp-server-fetch").is_file()
    assert "mcp__fetchpy__fetch" in report.new  # listed by a child with no network and nothing to download


@pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"binds need bubblewrap: {BWRAP_PROBLEM}")
@pytest.mark.timeout(300)
def test_server_filesystem_writes_into_a_rw_bound_folder_and_not_a_ro_one(host, caller, offline, tmp_path):
    work, reference = tmp_path / "work", tmp_path / "reference"  # under /tmp: hidden unless bound
    work.mkdir()
    reference.mkdir()
    (reference / "readme.txt").write_text("read me")
    add_npm_server(
        "files",
        FILESYSTEM,
        "--command",
        f"mcp-server-filesystem {work} {IN_SANDBOX}",
        "--bind",
        f"{work}:rw",
        "--bind",
        f"{reference}:{IN_SANDBOX}",
    )
    assert McpServer.objects.get(slug="files").binds == [
        {"host": str(work), "sandbox": str(work), "writable": True},
        {"host": str(reference), "sandbox": IN_SANDBOX, "writable": False},
    ]
    write, read = enable("files", "write_file", "read_text_file")

    written = call(caller, write, {"path": f"{work}/note.txt", "content": "written by a child"})
    shown = call(caller, read, {"path": f"{IN_SANDBOX}/readme.txt"})
    refused = call(caller, write, {"path": f"{IN_SANDBOX}/new.txt", "content": "no"}, ok=False)

    assert "note.txt" in text_of(written)
    assert (work / "note.txt").read_text() == "written by a child"
    assert "read me" in text_of(shown)
    assert "EROFS" in text_of(refused) or "read-only" in text_of(refused).lower(), refused
    assert sorted(path.name for path in reference.iterdir()) == ["readme.txt"]


# --- what the sandbox cannot run is refused at add -------------------------------------------------


def refused(*args: str) -> str:
    with pytest.raises(CommandError) as refusal:
        add_server("docs", *args)
    assert not McpServer.objects.filter(slug="docs").exists()  # nothing registered
    return str(refusal.value)


@pytest.fixture
def sandboxed(settings, tmp_path):
    settings.TOOLGATE_MCP_HOST_SANDBOX = "bwrap"  # the host will run children under bubblewrap
    settings.TOOLGATE_MCP_HOST_DIR = str(tmp_path / "mcp_host")


@pytest.mark.django_db
def test_an_interpreter_under_tmp_is_refused_at_add_with_the_reason(sandboxed, tmp_path):
    venv_python = tmp_path / "venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.symlink_to(sys.executable)

    message = refused("--command", f"{venv_python} -m docs_server")

    assert message == (
        f"mcp server 'docs': the command cannot run in the MCP host's sandbox: {venv_python} lies under /tmp, "
        "which the sandbox replaces with a private one; install it elsewhere (e.g. /opt) or bind its folder with --bind"
    )


@pytest.mark.django_db
def test_a_script_whose_interpreter_the_sandbox_hides_is_refused_even_in_a_bound_folder(sandboxed, tmp_path):
    tools, venv = tmp_path / "tools", tmp_path / "venv"
    tools.mkdir()
    venv.mkdir()
    script = tools / "docs-server"
    script.write_text(f"#!{venv}/bin/python\nprint('hi')\n")
    script.chmod(0o755)

    message = refused("--command", str(script), "--bind", str(tools))

    assert message.endswith(
        f"its interpreter {venv}/bin/python lies under /tmp, which the sandbox replaces "
        "with a private one; install it elsewhere (e.g. /opt) or bind its folder with --bind"
    )


@pytest.mark.django_db
def test_a_program_in_a_bound_folder_or_on_path_is_accepted(sandboxed, tmp_path):
    tools = tmp_path / "tools"
    tools.mkdir()
    script = tools / "docs-server"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)

    add_server("docs", "--command", f"{script} --ro", "--bind", str(tools))
    add_server("notes", "--command", "sh -c true")

    assert McpServer.objects.get(slug="docs").command == [str(script), "--ro"]
    assert McpServer.objects.get(slug="notes").command == ["sh", "-c", "true"]


@pytest.mark.django_db
def test_without_a_sandbox_a_program_under_tmp_is_accepted(settings, tmp_path):
    settings.TOOLGATE_MCP_HOST_SANDBOX = "none"
    program = tmp_path / "server"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)

    add_server("docs", "--command", str(program))

    assert McpServer.objects.get(slug="docs").command == [str(program)]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("command", "reason"),
    [
        ("no-such-program-7f3a --stdio", "no-such-program-7f3a is not found on the child's PATH"),
        ("./server.py", "./server.py is a relative path; give it absolute (the child starts in its private HOME)"),
        ("/usr/share/no-such-server", "/usr/share/no-such-server is not an executable file on this machine"),
    ],
)
def test_a_program_the_host_cannot_find_is_refused(sandboxed, command, reason):
    assert reason in refused("--command", command)


@pytest.mark.django_db
def test_binds_that_cannot_be_made_are_refused(sandboxed, tmp_path, settings):
    folder = tmp_path / "data"
    folder.mkdir()

    assert "is not a folder on this machine" in refused("--command", "sh", "--bind", str(tmp_path / "missing"))
    assert "lies in Toolgate's tree or var/" in refused("--command", "sh", "--bind", str(settings.BASE_DIR))
    assert "one of the sandbox's own folders" in refused("--command", "sh", "--bind", f"{folder}:/tmp/home/data")
    assert "one of the sandbox's own folders" in refused("--command", "sh", "--bind", f"{folder}:/proc")
    assert "must be under /tmp or an existing folder" in refused("--command", "sh", "--bind", f"{folder}:/nowhere")
    assert "must be absolute and normalised" in refused("--command", "sh", "--bind", f"{folder}/../data")
    assert "--bind takes HOST_PATH" in refused("--command", "sh", "--bind", f"{folder}:/tmp/a:/tmp/b")
    assert "share one sandbox path" in refused("--command", "sh", "--bind", str(folder), "--bind", f"{folder}:rw")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("package", "reason"),
    [
        ("@modelcontextprotocol/server-memory", "--npm takes PACKAGE@VERSION with an exact version"),
        ("@modelcontextprotocol/server-memory@latest", "--npm needs an exact version such as 1.2.3, not 'latest'"),
        ("@modelcontextprotocol/server-memory@^2026.8.0", "--npm needs an exact version"),
        ("Not A Package@1.0.0", "is not an npm package name"),
    ],
)
def test_an_npm_package_without_an_exact_version_is_refused_before_npm_runs(sandboxed, settings, package, reason):
    assert reason in refused("--npm", package)
    assert not (Path(settings.TOOLGATE_MCP_HOST_DIR) / "packages").exists()  # npm never ran


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (("--pip", "mcp-server-fetch"), "--pip takes PACKAGE==VERSION with an exact version"),
        (("--pip", "mcp-server-fetch>=1.0"), "--pip takes PACKAGE==VERSION"),
        (("--pip", "mcp-server-fetch==1.*"), "--pip needs an exact version such as 1.2.3, not '1.*'"),
        (("--pip", FETCH, "--npm", MEMORY), "a server has one package: --npm or --pip, not both"),
    ],
)
def test_a_pip_package_without_an_exact_version_is_refused_before_pip_runs(sandboxed, settings, args, reason):
    assert reason in refused(*args)
    assert not (Path(settings.TOOLGATE_MCP_HOST_DIR) / "packages").exists()  # npm never ran


@pytest.mark.django_db
def test_the_admin_shows_the_npm_package_and_bound_folders(admin_client, sandboxed, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    add_server("docs", "--command", "sh -c true", "--bind", f"{folder}:{IN_SANDBOX}:rw")
    McpServer.objects.filter(slug="docs").update(npm_package=MEMORY)  # as --npm leaves it, without npm here
    server = McpServer.objects.get(slug="docs")

    page = admin_client.get(f"/admin/gateway/mcpserver/{server.pk}/change/").content.decode()
    saved = admin_client.post(
        f"/admin/gateway/mcpserver/{server.pk}/change/", {"provider": "", "discover_seconds": 600, "enabled": "on"}
    )

    assert MEMORY in page
    assert f"{folder}:{IN_SANDBOX}:rw" in page
    assert saved.status_code == 302
    server.refresh_from_db()
    assert (server.npm_package, server.binds, server.discover_seconds) == (
        MEMORY,
        [{"host": str(folder), "sandbox": IN_SANDBOX, "writable": True}],
        600,
    )


def test_a_host_without_the_servers_package_says_where_to_install_it(host, caller, settings, caplog):
    add_server("docs", "--command", "sh -c true")
    McpServer.objects.filter(slug="docs").update(npm_package=MEMORY)  # installed elsewhere, not in the host's dir
    server = McpServer.objects.get(slug="docs")

    with pytest.raises(DiscoveryFailed):
        mcp_server_discover(server_id=server.pk)

    directory = Path(settings.TOOLGATE_MCP_HOST_DIR) / "packages" / "docs"
    assert host.children() == []
    assert not directory.exists()
    assert f"its npm package {MEMORY} is not installed in the host's {directory} (nothing there)" in caplog.text


@pytest.mark.django_db
@pytest.mark.skipif(shutil.which("npx") is None, reason="npx is not installed")
def test_an_npx_command_is_registered_with_advice_to_install_at_add(settings):
    settings.TOOLGATE_MCP_HOST_SANDBOX = "none"

    out = add_server("everything", "--command", "npx -y @modelcontextprotocol/server-everything stdio")

    assert "npx downloads the package when the child first starts" in out
    assert "prefer --npm PACKAGE@VERSION or --pip PACKAGE==VERSION, installed now and pinned" in out
    assert McpServer.objects.get(slug="everything").npm_package == ""


@pytest.mark.django_db
def test_a_program_name_is_looked_up_on_path_as_the_sandbox_shows_it(sandboxed, tmp_path, monkeypatch):
    hidden_bin, bound_bin = tmp_path / "hidden-bin", tmp_path / "bound-bin"
    for directory in (hidden_bin, bound_bin):
        directory.mkdir()
        (directory / "docs-tool").write_text("#!/bin/sh\nexit 0\n")
        (directory / "docs-tool").chmod(0o755)
    monkeypatch.setenv("PATH", f"{hidden_bin}:{bound_bin}:/usr/bin:/bin")

    add_server("notes", "--command", "docs-tool", "--bind", str(bound_bin))  # found in the bound folder
    message = refused("--command", "docs-tool")  # under /tmp, unbound: the sandbox shows neither folder

    assert McpServer.objects.get(slug="notes").command == ["docs-tool"]
    assert message == (
        "mcp server 'docs': the command cannot run in the MCP host's sandbox: docs-tool is not found on the "
        "child's PATH (/usr/bin:/bin)"
    )
