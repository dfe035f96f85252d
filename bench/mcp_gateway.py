"""Toolgate in front of an upstream MCP server, against the upstream called directly (one run).

Starts an SDK MCPServer upstream (one uvicorn process), registers it in
Toolgate, approves and enables its `add` tool; registers the same server as a
stdio server run by Toolgate's MCP host (`manage.py mcp_host`, one child, no
sandbox: bubblewrap costs only at spawn); serves Toolgate with two gunicorns
started as production starts them (config/gunicorn.conf.py: its worker class
and counts), one at a time under load: one as configured, whose calls to these
stateless JSON upstreams go out as plain POSTs (gateway/upstream/lean.py),
and one with TOOLGATE_MCP_PLAIN_JSON_CALLS=false, whose calls all go through
the SDK client: the same-run baseline of that path. wrk drives each target at
32 and 1 connections:

  direct          tools/call straight to the upstream (2026-07-28, stateless)
  mcp exec        POST /api/v1/tools/exec of mcp__bench__add (plain JSON, sent from the worker thread)
  mcp exec (sdk)  the same through the SDK client
  stdio exec      POST /api/v1/tools/exec of mcp__benchstdio__add (via the MCP host, one child)
  stdio exec (sdk)
  builtin exec    POST /api/v1/tools/exec of core__get_current_time

For each Toolgate target it prints the gateway's CPU per call: user + system
time of the gunicorn master and its workers, read from /proc before and after
the wrk run, divided by the requests wrk completed (the upstream, the MCP host
and wrk are other processes, not counted).

Every process (gunicorns, MCP host, set-up) runs with production settings,
as bench.exec_throughput's server does (`bench.database.production_environment`:
DEBUG off, fresh secrets, LOG_LEVEL WARNING, whatever DEBUG the caller
exported; `make bench` exports DEBUG=true): under DEBUG Django records every
query and the logs are chattier, and a built-in exec measured here cost about
twice the gateway CPU it costs in bench.exec_throughput. The web, the MCP
host and the set-up share one set of secrets (the host token, the keys that
seal an operator token).

    python -m bench.mcp_gateway

Needs PostgreSQL and Redis: DATABASE_URL (default a `toolgate_bench` database
on 127.0.0.1, dropped and re-created each run) and REDIS_URL (default db 9).
The database gets a `bench` tenant, 64 service accounts (the API's
per-account fairness throttle is 100/s) and a policy. BENCH_SECONDS (10) sets
each wrk run, BENCH_ROUNDS (1) how often the targets alternate. Prints req/s,
p50, CPU per call and the ratios; nothing passes or fails.
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

from bench.database import fresh_database, manage, production_environment
from bench.targets import target_line

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DURATION_S = int(os.environ.get("BENCH_SECONDS", "10"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "1"))
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
KEYS = 64


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
    """Register and approve the upstreams, create the callers (a migrated database); returns their API keys."""
    stdio_command = [sys.executable, str(ROOT / "bench" / "mcp_upstream_app.py"), "stdio"]
    code = f"""
import json, django
django.setup()
from policies_app.models import Tenant, ToolPolicy
from policies_app.services import service_account_create
from tools_app.services import tool_set_enabled
from gateway.upstream.services import mcp_server_register, mcp_server_discover, mcp_tool_approve
tenant = Tenant.objects.create(slug="bench", name="Bench")
keys = [service_account_create(tenant=tenant, name=f"bench-{{i}}", scopes=("tools:exec",))[1] for i in range({KEYS})]
ToolPolicy.objects.create(
    name="bench", tenant=tenant, allowed_tools=["mcp__bench__add", "mcp__benchstdio__add", "core__get_current_time"]
)
server, _ = mcp_server_register(slug="bench", url={upstream_url!r})
mcp_server_discover(server_id=server.pk)
mcp_tool_approve(tool_id="mcp__bench__add", via="bench", only_if_unapproved=True)
stdio, _ = mcp_server_register(slug="benchstdio", command={stdio_command!r}, trusted_unsandboxed=True)
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


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of `pid` and its live children (gunicorn: the master and its workers)."""
    total = 0.0
    for candidate in Path("/proc").iterdir():
        if not candidate.name.isdigit():
            continue
        try:
            stat = (candidate / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        if int(candidate.name) == pid or int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / TICKS_PER_S
    return total


def run_wrk(url: str, script: Path, connections: int) -> tuple[float, float, tuple[int, int], int]:
    """(requests/s, p50 ms, (non-2xx answers, socket errors and timeouts), requests completed)."""
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
    # Requests wrk gave up on (timeouts, resets) cost the gateway CPU too: shown beside non-2xx.
    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    non_2xx = int(errors.group(1)) if errors else 0
    broken = sum(map(int, socket_errors.groups())) if socket_errors else 0
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    return rate, float(p50.group(1)) * scale, (non_2xx, broken), requests


def gunicorn(env: dict[str, str], port: int) -> subprocess.Popen:
    """gunicorn as production starts it (config/gunicorn.conf.py), on `port`."""
    command = [str(BIN / "gunicorn"), "-c", str(ROOT / "config" / "gunicorn.conf.py"), "config.wsgi:application"]
    return subprocess.Popen([*command, "--bind", f"127.0.0.1:{port}", "--log-level", "warning"], cwd=ROOT, env=env)


def main() -> None:
    upstream_port, web_port, sdk_port, host_port = free_port(), free_port(), free_port(), free_port()
    env = {
        **os.environ,
        **production_environment(),  # one set of secrets for the web, the MCP host and the set-up
        "TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS": "true",
        "TOOLGATE_MCP_HOST_URL": f"http://127.0.0.1:{host_port}",
        "TOOLGATE_MCP_HOST_TOKEN": secrets.token_urlsafe(24),
        "TOOLGATE_MCP_HOST_SANDBOX": "none",
    }
    scratch = Path(tempfile.mkdtemp(prefix="toolgate-bench-"))
    env["TOOLGATE_MCP_HOST_DIR"] = str(scratch / "mcp_host")
    fresh_database(env["DATABASE_URL"])
    manage(env, "migrate", "--noinput")
    manage(env, "collectstatic", "--noinput")  # DEBUG=False: the web server refuses to start without it
    manage(env, "sync_tools")
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
        plain = gunicorn(env, web_port)
        sdk = gunicorn({**env, "TOOLGATE_MCP_PLAIN_JSON_CALLS": "false"}, sdk_port)
        processes += [plain, sdk]
        wait_http(f"http://127.0.0.1:{web_port}/healthz", timeout=180)
        wait_http(f"http://127.0.0.1:{sdk_port}/healthz", timeout=180)
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
        sdk_exec_url = f"http://127.0.0.1:{sdk_port}/api/v1/tools/exec"
        # (name, url, script, gateway process whose CPU is read, or None for the upstream itself)
        targets = [
            ("direct upstream", upstream_url, direct, None),
            ("mcp exec", exec_url, mcp_exec, plain),
            ("mcp exec (sdk)", sdk_exec_url, mcp_exec, sdk),
            ("stdio exec", exec_url, stdio_exec, plain),
            ("stdio exec (sdk)", sdk_exec_url, stdio_exec, sdk),
            ("builtin exec", exec_url, builtin, plain),
        ]
        for _name, url, script, _gateway in targets:  # warm every gunicorn worker's pooled session and caches
            run_wrk_short(url, script)
        print(
            f"database: {env['DATABASE_URL'].split(':', 1)[0]}, redis: {'yes' if env.get('REDIS_URL') else 'no'}, "
            f"gunicorn as config/gunicorn.conf.py, DEBUG off, wrk {DURATION_S}s per row, {ROUNDS} round(s)"
        )
        # name, connections -> [(req/s, p50 ms, non-2xx, requests, gateway CPU s)] over the rounds
        runs: dict[tuple[str, int], list[tuple[float, float, tuple[int, int], int, float]]] = {}
        for _round in range(ROUNDS):
            for connections in (32, 1):
                for name, url, script, gateway in targets:
                    cpu_before = process_cpu_s(gateway.pid) if gateway is not None else 0.0
                    rate, p50, errors, requests = run_wrk(url, script, connections)
                    cpu = process_cpu_s(gateway.pid) - cpu_before if gateway is not None else 0.0
                    runs.setdefault((name, connections), []).append((rate, p50, errors, requests, cpu))
        report({key: _summary(rows) for key, rows in runs.items()})
    finally:
        for process in reversed(processes):
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


def report(results: dict[tuple[str, int], tuple[float, float, tuple[int, int], float]]) -> None:
    """The table, then the target figures (each against its same-run baseline)."""
    header = f"{'target':<18} {'conns':>5} {'req/s':>9} {'p50 ms':>8} {'non-2xx':>8} {'sock err':>8} {'x direct':>9}"
    print(f"{header} {'CPU ms/call':>12}")
    for (name, connections), (rate, p50, (non_2xx, broken), cpu_ms) in results.items():
        ratio = rate / results[("direct upstream", connections)][0]
        shown = f"{cpu_ms:>12.2f}" if name != "direct upstream" else f"{'-':>12}"
        row = f"{name:<18} {connections:>5} {rate:>9.0f} {p50:>8.2f} {non_2xx:>8} {broken:>8} {ratio:>9.3f}"
        print(f"{row} {shown}")
    direct_p50 = results[("direct upstream", 1)][1]
    for name in ("mcp exec", "mcp exec (sdk)"):
        added = results[(name, 1)][1] - direct_p50
        over_builtin = results[(name, 1)][1] - results[("builtin exec", 1)][1]
        print(f"{name}: added p50 at c1 over direct {added:.2f} ms; over a builtin exec {over_builtin:.2f} ms")
    for connections in (32, 1):
        plain_cpu, sdk_cpu = results[("mcp exec", connections)][3], results[("mcp exec (sdk)", connections)][3]
        builtin_cpu = results[("builtin exec", connections)][3]
        print(
            f"gateway CPU per proxied call at c{connections}: plain {plain_cpu:.2f} ms, sdk {sdk_cpu:.2f} ms "
            f"(plain / sdk {plain_cpu / sdk_cpu:.2f}); builtin exec {builtin_cpu:.2f} ms"
        )
    throughput = results[("mcp exec", 32)][0] / results[("direct upstream", 32)][0]
    print(f"throughput at c32, mcp exec / direct: {throughput:.3f}")
    stdio_vs_http = results[("stdio exec", 32)][0] / results[("mcp exec", 32)][0]
    stdio_added = results[("stdio exec", 1)][1] - results[("mcp exec", 1)][1]
    print(f"stdio exec (via the MCP host) / mcp exec at c32: {stdio_vs_http:.3f}; added at c1: {stdio_added:.2f} ms")
    for line in target_lines(results):
        print(line)


def target_lines(results: dict[tuple[str, int], tuple[float, float, tuple[int, int], float]]) -> list[str]:
    """The proxied call's targets (docs/performance.md), for the HTTP upstream and, beside it, the stdio one."""
    builtin_cpu = results[("builtin exec", 32)][3]
    direct_p50 = results[("direct upstream", 1)][1]
    lines = []
    for name, upstream in (("mcp exec", "an HTTP upstream"), ("stdio exec", "a stdio upstream")):
        cpu = results[(name, 32)][3] / builtin_cpu
        added = results[(name, 1)][1] - direct_p50
        lines.append(target_line(f"gateway CPU of a call to {upstream} / a built-in exec's, c32", cpu, 1.10, "<="))
        lines.append(target_line(f"p50 a call to {upstream} adds over the direct call, c1", added, 2.5, "<=", " ms"))
    return lines


def _summary(
    rows: list[tuple[float, float, tuple[int, int], int, float]],
) -> tuple[float, float, tuple[int, int], float]:
    """Over the rounds: mean req/s, median p50, non-2xx and socket errors summed, CPU ms per completed request."""
    rates = sorted(row[0] for row in rows)
    p50s = sorted(row[1] for row in rows)
    requests = sum(row[3] for row in rows)
    cpu_ms = 1000 * sum(row[4] for row in rows) / requests if requests else 0.0
    failed = (sum(row[2][0] for row in rows), sum(row[2][1] for row in rows))
    return sum(rates) / len(rates), p50s[len(p50s) // 2], failed, cpu_ms


def run_wrk_short(url: str, script: Path) -> None:
    subprocess.run(["wrk", "-t2", "-c16", "-d2s", "-s", str(script), url], check=True, capture_output=True)


if __name__ == "__main__":
    main()
