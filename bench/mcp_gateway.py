"""Toolgate in front of an upstream MCP server, against the upstream called directly (one run).

Starts an SDK MCPServer upstream (one uvicorn process), registers it in
Toolgate, approves and enables its `add` tool; registers the same server as a
stdio server run by Toolgate's MCP host (`manage.py mcp_host`, one child, no
sandbox: bubblewrap costs only at spawn); serves Toolgate with gunicorn (sync
workers, 2 x cores), and drives four targets with wrk at 32 and 1 connections:

  direct     tools/call straight to the upstream (2026-07-28, stateless)
  mcp exec   POST /api/v1/tools/exec of mcp__bench__add (pooled session upstream)
  stdio exec POST /api/v1/tools/exec of mcp__benchstdio__add (pooled session to the host, one child)
  builtin    POST /api/v1/tools/exec of core__get_current_time

    DATABASE_URL=postgres://... REDIS_URL=redis://... python -m bench.mcp_gateway

Uses the database and Redis of the environment (a scratch SQLite file when
DATABASE_URL is unset: its single writer then dominates exec). The database
is migrated and gets a `bench` tenant, 64 service accounts (the API's
per-account fairness throttle is 100/s) and a policy. Prints req/s, p50 and
the ratios; nothing passes or fails.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DURATION_S = int(os.environ.get("BENCH_SECONDS", "10"))
KEYS = 64
WORKERS = 2 * (os.cpu_count() or 1)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_http(url: str, *, timeout: float = 30.0, method: str = "GET") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=1)  # noqa: S310 - loopback
            return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


def setup(env: dict[str, str], upstream_url: str) -> list[str]:
    """Migrate, register and approve the upstreams, create the callers; returns their API keys."""
    stdio_command = [sys.executable, str(ROOT / "bench" / "mcp_upstream_app.py"), "stdio"]
    code = f"""
import json, django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
call_command("sync_tools", verbosity=0)
from policies_app.models import Tenant, ToolPolicy, ServiceAccount
from policies_app.services import service_account_create
from tools_app.services import tool_set_enabled
from tools_app.upstream.services import mcp_server_register, mcp_server_discover, mcp_tool_approve
tenant, _ = Tenant.objects.get_or_create(slug="bench", defaults={{"name": "Bench"}})
ServiceAccount.objects.filter(tenant=tenant).delete()
keys = [service_account_create(tenant=tenant, name=f"bench-{{i}}", scopes=("tools:exec",))[1] for i in range({KEYS})]
ToolPolicy.objects.filter(name="bench").delete()
ToolPolicy.objects.create(
    name="bench", tenant=tenant, allowed_tools=["mcp__bench__add", "mcp__benchstdio__add", "core__get_current_time"]
)
server, _ = mcp_server_register(slug="bench", url={upstream_url!r})
mcp_server_discover(server_id=server.pk)
mcp_tool_approve(tool_id="mcp__bench__add", via="bench", only_if_unapproved=True)
stdio, _ = mcp_server_register(slug="benchstdio", command={stdio_command!r})
mcp_server_discover(server_id=stdio.pk)
mcp_tool_approve(tool_id="mcp__benchstdio__add", via="bench", only_if_unapproved=True)
tool_set_enabled(tool_ids=["mcp__bench__add", "mcp__benchstdio__add", "core__get_current_time"], enabled=True)
print(json.dumps(keys))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def wrk_script(path: Path, *, body: dict, headers: dict[str, str], keys: list[str]) -> Path:
    """A wrk script: one POST body, fixed headers, the Authorization rotated over the keys."""
    lua_keys = ", ".join(json.dumps(f"Bearer {key}") for key in keys) if keys else ""
    lines = [
        'wrk.method = "POST"',
        f"wrk.body = {json.dumps(json.dumps(body))}",
        *(f"wrk.headers[{json.dumps(name)}] = {json.dumps(value)}" for name, value in headers.items()),
        f"local keys = {{{lua_keys}}}",
        "local i = 0",
        "request = function()",
        "  i = i + 1",
        '  if #keys > 0 then wrk.headers["Authorization"] = keys[(i % #keys) + 1] end',
        "  return wrk.format()",
        "end",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_wrk(url: str, script: Path, connections: int) -> tuple[float, float, int]:
    """(requests/s, p50 ms, non-2xx count)."""
    threads = min(2, connections)
    out = subprocess.run(
        ["wrk", f"-t{threads}", f"-c{connections}", f"-d{DURATION_S}s", "--latency", "-s", str(script), url],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = re.search(r"50%\s+([\d.]+)(us|ms|s)", out)
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[p50.group(2)]
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return rate, float(p50.group(1)) * scale, int(errors.group(1)) if errors else 0


def main() -> None:
    upstream_port, web_port, host_port = free_port(), free_port(), free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS": "true",
        "TOOLGATE_MCP_HOST_URL": f"http://127.0.0.1:{host_port}",
        "TOOLGATE_MCP_HOST_TOKEN": secrets.token_urlsafe(24),
        "TOOLGATE_MCP_HOST_SANDBOX": "none",
    }
    scratch = Path(tempfile.mkdtemp(prefix="toolgate-bench-"))
    env["TOOLGATE_MCP_HOST_DIR"] = str(scratch / "mcp_host")
    if not env.get("DATABASE_URL"):
        env["DATABASE_URL"] = f"sqlite:///{scratch / 'bench.sqlite3'}"
    upstream_url = f"http://127.0.0.1:{upstream_port}/mcp"
    processes = []
    try:
        processes.append(
            subprocess.Popen([sys.executable, "-m", "bench.mcp_upstream_app", str(upstream_port)], cwd=ROOT, env=env)
        )
        processes.append(subprocess.Popen([sys.executable, "manage.py", "mcp_host"], cwd=ROOT, env=env))
        wait_http(upstream_url)
        wait_http(f"http://127.0.0.1:{host_port}/")
        keys = setup(env, upstream_url)
        processes.append(
            subprocess.Popen(
                [
                    str(BIN / "gunicorn"),
                    "config.wsgi",
                    "--workers",
                    str(WORKERS),
                    "--bind",
                    f"127.0.0.1:{web_port}",
                    "--log-level",
                    "warning",
                ],
                cwd=ROOT,
                env={**env, "LOG_LEVEL": "WARNING"},
            )
        )
        wait_http(f"http://127.0.0.1:{web_port}/healthz")
        direct = wrk_script(
            scratch / "direct.lua",
            body={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {
                    "name": "add",
                    "arguments": {"a": 1, "b": 2},
                    "_meta": {
                        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
                        "io.modelcontextprotocol/clientCapabilities": {},
                    },
                },
            },
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
                "MCP-Protocol-Version": "2026-07-28",
                "Mcp-Method": "tools/call",
                "Mcp-Name": "add",
            },
            keys=[],
        )
        exec_headers = {"Content-Type": "application/json"}
        mcp_exec = wrk_script(
            scratch / "mcp.lua",
            body={"tool_id": "mcp__bench__add", "args": {"a": 1, "b": 2}},
            headers=exec_headers,
            keys=keys,
        )
        stdio_exec = wrk_script(
            scratch / "stdio.lua",
            body={"tool_id": "mcp__benchstdio__add", "args": {"a": 1, "b": 2}},
            headers=exec_headers,
            keys=keys,
        )
        builtin = wrk_script(
            scratch / "builtin.lua",
            body={"tool_id": "core__get_current_time", "args": {}},
            headers=exec_headers,
            keys=keys,
        )
        exec_url = f"http://127.0.0.1:{web_port}/api/v1/tools/exec"
        targets = [
            ("direct upstream", upstream_url, direct),
            ("mcp exec", exec_url, mcp_exec),
            ("stdio exec", exec_url, stdio_exec),
            ("builtin exec", exec_url, builtin),
        ]
        for _name, url, script in targets:  # warm every gunicorn worker's pooled session and caches
            run_wrk_short(url, script)
        print(
            f"database: {env['DATABASE_URL'].split(':', 1)[0]}, redis: {'yes' if env.get('REDIS_URL') else 'no'}, "
            f"gunicorn sync x{WORKERS}, wrk {DURATION_S}s per row"
        )
        results = {}
        for connections in (32, 1):
            for name, url, script in targets:
                results[(name, connections)] = run_wrk(url, script, connections)
        print(f"{'target':<16} {'conns':>5} {'req/s':>9} {'p50 ms':>8} {'non-2xx':>8} {'x direct':>9}")
        for (name, connections), (rate, p50, errors) in results.items():
            ratio = rate / results[("direct upstream", connections)][0]
            print(f"{name:<16} {connections:>5} {rate:>9.0f} {p50:>8.2f} {errors:>8} {ratio:>9.3f}")
        added = results[("mcp exec", 1)][1] - results[("direct upstream", 1)][1]
        over_builtin = results[("mcp exec", 1)][1] - results[("builtin exec", 1)][1]
        print(
            f"added per call at c1 (p50, mcp exec - direct): {added:.2f} ms; over a builtin exec: {over_builtin:.2f} ms"
        )
        throughput = results[("mcp exec", 32)][0] / results[("direct upstream", 32)][0]
        print(f"throughput at c32, mcp exec / direct: {throughput:.3f}")
        stdio_vs_http = results[("stdio exec", 32)][0] / results[("mcp exec", 32)][0]
        stdio_added = results[("stdio exec", 1)][1] - results[("mcp exec", 1)][1]
        print(
            f"stdio exec (via the MCP host) / mcp exec at c32: {stdio_vs_http:.3f}; added at c1: {stdio_added:.2f} ms"
        )
    finally:
        for process in reversed(processes):
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


def run_wrk_short(url: str, script: Path) -> None:
    subprocess.run(["wrk", "-t2", "-c16", "-d2s", "-s", str(script), url], check=True, capture_output=True)


if __name__ == "__main__":
    main()
