"""What one request costs the gateway, in process: exec and its baselines, in CPU time or in instructions.

The WSGI application is called directly, as gunicorn calls it (production
settings, PostgreSQL and Redis on loopback, gunicorn's multiprocess metrics
directory), for `/healthz`, `/healthz/api` (the probe through the API's
middleware list), the floor and the floor with its provider call
(bench/urls.py), built-in exec, exec with a connection, and exec of an MCP
upstream's tool over HTTP (an SDK server in a process of its own, a plain JSON
POST from the calling thread) and over stdio (through the MCP host, also a
process of its own: neither's work is counted), and the HTTP one's tool called
with `tools/call` on /mcp (2025-11-25, stateless). Wall-clock
throughput on a shared two-core machine moves by a third between runs; these
figures do not need a quiet machine:

- CPU time per request (the default), five rounds taking turns;
- `--callgrind`: instructions per request under valgrind's callgrind (apt-get
  installs valgrind when it is missing), counted from the first request to the
  last of each target, which repeat to within about 1 % from run to run. Work
  in the kernel (system calls) is not counted there, only in CPU time.

What depends on the clock is pinned while measuring, so that a slow run (callgrind
is about fifty times slower) makes no more round trips than a fast one: the
governance generation is read once (not once a second), last use is written
once (not once a minute), and the fairness window moves only between one
target's run and the next (a Redis lease every third request of an account, as
at full load, and each run's at most `--requests` over 64 accounts stays within
an account's rate of a window).

    python -m bench.exec_cost [--requests N] [--only exec,floor,...] [--callgrind | --profile N]

By default it then prints each pipeline stage's own time per call, read off
the stage histogram operators scrape (`toolgate_pipeline_stage_duration_seconds`),
for every target that runs the pipeline.

`--profile N` runs each target under cProfile instead and prints its N
functions of most own CPU time, each as a share of the target's time: where
a target's work goes, to compare exec's with the floor's.

Needs DATABASE_URL (a PostgreSQL database it drops and re-creates; default
`toolgate_bench` on 127.0.0.1) and REDIS_URL (default db 9). Prints a table;
nothing passes or fails.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import ctypes
import io
import json
import os
import pstats
import re
import resource
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import types
from datetime import timedelta
from pathlib import Path

import django
from prometheus_client import CollectorRegistry, multiprocess

from bench.database import fresh_database, manage, production_environment

os.environ.update(production_environment("bench.settings"))
django.setup()

from connections_app.services import connection_create, grant_create  # noqa: E402
from gateway.upstream.services import mcp_server_discover, mcp_server_register, mcp_tool_approve  # noqa: E402
from policies_app import fairness, governance, services  # noqa: E402
from policies_app.models import ToolPolicy  # noqa: E402
from policies_app.services import service_account_create, tenant_create  # noqa: E402
from tools_app.metrics import STAGE_METRIC  # noqa: E402
from tools_app.services import tool_set_enabled  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TARGETS = (
    "healthz",
    "healthz api",
    "floor",
    "floor + provider",
    "exec",
    "exec + connection",
    "mcp exec",
    "stdio exec",
    "mcp tools/call",
)
# Each needs its upstream: an SDK server over HTTP, or the MCP host's child (`mcp tools/call`: the HTTP one, over /mcp).
MCP_TARGETS = ("mcp exec", "stdio exec", "mcp tools/call")
MCP_TOOLS = ("mcp__bench__add", "mcp__benchstdio__add")  # of `mcp exec` and `stdio exec`
# What a 2025-11-25 client sends on /mcp beside its body (stateless: no session), as WSGI environ keys.
MCP_ENVIRON = {"HTTP_ACCEPT": "application/json, text/event-stream", "HTTP_MCP_PROTOCOL_VERSION": "2025-11-25"}
USER = {"login": "octocat", "id": 583231, "name": "The Octocat", "html_url": "https://github.com/octocat"}
# Callgrind's client requests, so that only the measured requests are counted (compiled when asked for).
_CLIENT_REQUESTS = """
#include <valgrind/callgrind.h>
void bench_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void bench_zero(void) { CALLGRIND_ZERO_STATS; }
void bench_dump(const char *name) { CALLGRIND_DUMP_STATS_AT(name); }
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=0, help="requests per target and round")
    parser.add_argument("--only", default="", help="comma-separated targets (default: all)")
    parser.add_argument("--callgrind", action="store_true", help="count instructions under callgrind")
    parser.add_argument(
        "--profile", type=int, default=0, metavar="N", help="print each target's N functions of most own CPU time"
    )
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)  # the process measured
    parser.add_argument("--github", type=int, default=0, help=argparse.SUPPRESS)  # the provider's stand-in
    options = parser.parse_args()
    if options.github:
        asyncio.run(_serve_github(options.github))
    elif options.measure:
        _measure(options)
    else:
        _prepare_and_run(options)


def _prepare_and_run(options: argparse.Namespace) -> None:
    env = dict(os.environ)
    env["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="bench-prometheus-")  # as under gunicorn
    fresh_database(env["DATABASE_URL"])
    manage(env, "migrate", "--noinput")
    manage(env, "collectstatic", "--noinput")
    manage(env, "sync_tools")
    github_port = _free_port()
    env["TOOLGATE_GITHUB_API_URL"] = f"http://127.0.0.1:{github_port}"
    github = subprocess.Popen([sys.executable, "-m", "bench.exec_cost", "--github", str(github_port)], cwd=ROOT)
    upstreams = _start_mcp_upstreams(env, options.only)
    command = [sys.executable, "-m", "bench.exec_cost", "--measure", "--only", options.only]
    try:
        if options.callgrind:
            _callgrind(env, command, options)
        elif options.profile:
            requests = options.requests or 2000
            subprocess.run(
                [*command, "--requests", str(requests), "--profile", str(options.profile)],
                cwd=ROOT,
                env=env,
                check=True,
            )
        else:
            requests = options.requests or 1000
            subprocess.run([*command, "--requests", str(requests)], cwd=ROOT, env=env, check=True)
    finally:
        for process in (github, *upstreams):
            process.terminate()
        for process in (github, *upstreams):
            process.wait()


def _start_mcp_upstreams(env: dict[str, str], only: str) -> list[subprocess.Popen]:
    """The MCP targets' upstreams, in processes of their own (their work is not counted): the SDK server
    the HTTP upstream is, and the MCP host that runs the stdio one (no sandbox: bubblewrap costs only at spawn)."""
    wanted = [name.strip() for name in only.split(",") if name.strip()] or list(TARGETS)
    if not set(wanted) & set(MCP_TARGETS):
        return []
    upstream_port, host_port = _free_port(), _free_port()
    env.update(
        {
            "BENCH_MCP_URL": f"http://127.0.0.1:{upstream_port}/mcp",
            "TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS": "true",
            "TOOLGATE_MCP_HOST_URL": f"http://127.0.0.1:{host_port}",
            "TOOLGATE_MCP_HOST_TOKEN": secrets.token_urlsafe(24),
            "TOOLGATE_MCP_HOST_SANDBOX": "none",
            "TOOLGATE_MCP_HOST_DIR": tempfile.mkdtemp(prefix="bench-mcp-host-"),
        }
    )
    processes = [
        subprocess.Popen([sys.executable, "-m", "bench.mcp_upstream_app", str(upstream_port)], cwd=ROOT, env=env),
        subprocess.Popen([sys.executable, "manage.py", "mcp_host"], cwd=ROOT, env=env),
    ]
    for port in (upstream_port, host_port):
        _wait_for_listener(port)
    return processes


def _wait_for_listener(port: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                sys.exit(f"bench: nothing listens on 127.0.0.1:{port} (an MCP target's upstream)")
            time.sleep(0.1)


def _callgrind(env: dict[str, str], command: list[str], options: argparse.Namespace) -> None:
    if shutil.which("valgrind") is None:
        print("bench: installing valgrind with apt-get", flush=True)
        subprocess.run(["apt-get", "install", "-y", "-q", "valgrind"], check=True, stdout=subprocess.DEVNULL)
    requests = options.requests or 200
    with tempfile.TemporaryDirectory() as tmp:
        library = Path(tmp) / "client_requests.so"
        source = Path(tmp) / "client_requests.c"
        source.write_text(_CLIENT_REQUESTS)
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
        env = {**env, "BENCH_CLIENT_REQUESTS": str(library)}
        valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={tmp}/out.%p"]
        subprocess.run(
            [*valgrind, *command, "--requests", str(requests)],
            cwd=ROOT,
            env=env,
            check=True,
            stderr=subprocess.DEVNULL,
        )
        counted: dict[str, list[float]] = {}
        for dump in Path(tmp).glob("out.*"):
            text = dump.read_text()
            named = re.search(r"^desc: Trigger: Client Request: (.+)@(\d+)$", text, re.MULTILINE)
            if named:
                total = int(re.search(r"^summary: (\d+)", text, re.MULTILINE).group(1))
                counted.setdefault(named.group(1), []).append(total / requests)
    print(f"{'target':<20}{'instructions/request':>22}   (least of the rounds; each round)")
    for name in TARGETS:
        if name in counted:
            rounds = " ".join(f"{value:,.0f}" for value in counted[name])
            print(f"{name:<20}{min(counted[name]):>22,.0f}   {rounds}")


# --- the measured process --------------------------------------------------------------------


def _measure(options: argparse.Namespace) -> None:
    # The production entry point, with its middleware; imported only here: it refuses to load before collectstatic.
    from config.wsgi import application  # noqa: PLC0415

    _pin_the_clock()
    accounts = _seed()
    only = [name.strip() for name in options.only.split(",") if name.strip()] or list(TARGETS)
    requests = {name: _requests(name, accounts) for name in only}
    for name in only:  # warm every cache, pool and lease
        _run(application, requests[name], 100)
    client_requests = os.environ.get("BENCH_CLIENT_REQUESTS")
    if client_requests:
        callgrind = ctypes.CDLL(client_requests)
        callgrind.bench_start()
        for round_number in range(2):
            for name in only:
                callgrind.bench_zero()
                _run(application, requests[name], options.requests)
                callgrind.bench_dump(f"{name}@{round_number}".encode())
        return
    if options.profile:
        for name in only:
            _profile(application, name, requests[name], options.requests, options.profile)
        return
    spent: dict[str, list[float]] = {name: [] for name in only}
    in_kernel: dict[str, list[float]] = {name: [] for name in only}  # the system calls' share of it
    staged: dict[str, dict[str, float]] = {name: {} for name in only}  # target -> stage -> seconds, all rounds
    for _ in range(5):
        for name in only:
            before = _stage_seconds()
            started = resource.getrusage(resource.RUSAGE_SELF)
            _run(application, requests[name], options.requests)
            ended = resource.getrusage(resource.RUSAGE_SELF)
            user, kernel = ended.ru_utime - started.ru_utime, ended.ru_stime - started.ru_stime
            spent[name].append((user + kernel) / options.requests * 1e6)
            in_kernel[name].append(kernel / options.requests * 1e6)
            for stage, seconds in _stage_seconds().items():
                staged[name][stage] = staged[name].get(stage, 0.0) + seconds - before.get(stage, 0.0)
    print(f"{'target':<20}{'CPU us/request':>16}{'in the kernel':>15}   (median of 5 rounds; least)")
    for name in only:
        cpu, kernel = statistics.median(spent[name]), statistics.median(in_kernel[name])
        print(f"{name:<20}{cpu:>16.0f}{kernel:>15.0f}   {min(spent[name]):.0f}")
    ran = {name: stages for name, stages in staged.items() if sum(stages.values()) > 0}  # the floor runs no stage
    if ran:
        _print_stages(ran, spent, options.requests * 5)


def _stage_seconds() -> dict[str, float]:
    """Each pipeline stage's own seconds so far, summed over this process's calls (the stage histogram's sums)."""
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return {
        sample.labels["stage"]: sample.value
        for family in registry.collect()
        if family.name == STAGE_METRIC
        for sample in family.samples
        if sample.name == f"{STAGE_METRIC}_sum"
    }


def _print_stages(staged: dict[str, dict[str, float]], spent: dict[str, list[float]], calls: int) -> None:
    """Where each call's time went, stage by stage, read off the stage histogram operators scrape."""
    names = list(staged)
    stages = sorted(staged[names[0]], key=staged[names[0]].__getitem__, reverse=True)
    print("\nown wall time of each pipeline stage, us per call (toolgate_pipeline_stage_duration_seconds, all rounds)")
    print(f"{'stage':<20}" + "".join(f"{name:>20}" for name in names))
    for stage in stages:
        print(f"{stage:<20}" + "".join(f"{staged[name].get(stage, 0.0) / calls * 1e6:>20.0f}" for name in names))
    in_stages = {name: sum(staged[name].values()) / calls * 1e6 for name in names}
    print(f"{'all stages':<20}" + "".join(f"{in_stages[name]:>20.0f}" for name in names))
    print(f"{'CPU per request':<20}" + "".join(f"{statistics.mean(spent[name]):>20.0f}" for name in names))
    print("(wall time: execute includes the wait for an upstream or provider, fairness and audit their round trips)")


def _profile(application: object, name: str, requests: list[Request], count: int, top: int) -> None:
    """The target's functions by their own CPU time (cProfile, its overhead included), each as a share of the whole."""
    profiler = cProfile.Profile(time.process_time)
    profiler.runcall(_run, application, requests, count)
    stats = pstats.Stats(profiler)
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)[:top]  # type: ignore[attr-defined]
    print(f"\n{name}: {total / count * 1e6:.0f} us/request under cProfile; own time of its top {top} functions")
    for (filename, line, function), (_calls, _primitive, own, _cumulative, _callers) in rows:
        where = filename.removeprefix(str(ROOT) + "/").split("site-packages/")[-1]
        print(f"  {own / total:>6.1%}  {own / count * 1e6:>7.1f} us  {function} ({where}:{line})")


_WINDOW = [int(time.time())]  # the fairness window's second, moved by each run (_run)


def _pin_the_clock() -> None:
    governance.MAX_STALENESS_S = float("inf")
    services.LAST_USED_RESOLUTION = timedelta(days=365)
    fairness.time = types.SimpleNamespace(time=lambda: _WINDOW[0])  # type: ignore[assignment]


def _seed() -> list[dict[str, str]]:
    tools = ["core__get_current_time", "github__get_user"]
    if os.environ.get("BENCH_MCP_URL"):
        _register_mcp_upstreams(os.environ["BENCH_MCP_URL"])
        tools += MCP_TOOLS
    tool_set_enabled(tool_ids=tools, enabled=True)
    tenant = tenant_create(slug="bench")
    ToolPolicy.objects.create(name="bench", tenant=tenant, allowed_tools=tools)
    accounts = []
    for index in range(64):
        account, key = service_account_create(tenant=tenant, name=f"agent-{index}")
        connection = connection_create(
            tenant=tenant, provider="github", credential_type="api_key", credentials={"api_key": f"ghp_{index:036d}"}
        )
        grant = grant_create(tenant=tenant, service_account=account, connections=[connection])
        accounts.append({"key": key, "connection_id": str(connection.pk), "grant_id": str(grant.pk)})
    return accounts


def _register_mcp_upstreams(url: str) -> None:
    stdio_command = [sys.executable, str(ROOT / "bench" / "mcp_upstream_app.py"), "stdio"]
    http, _ = mcp_server_register(slug="bench", url=url)
    stdio, _ = mcp_server_register(slug="benchstdio", command=stdio_command, trusted_unsandboxed=True)
    for server, tool_id in zip((http, stdio), MCP_TOOLS, strict=True):
        mcp_server_discover(server_id=server.pk)
        mcp_tool_approve(tool_id=tool_id, via="bench", only_if_unapproved=True)


Request = tuple[str, str, str, bytes]


def _requests(name: str, accounts: list[dict[str, str]]) -> list[Request]:
    clock = json.dumps({"tool_id": "core__get_current_time", "args": {}}).encode()
    bare = "Bearer bench-bare-token"
    if name == "healthz":
        return [("GET", "/healthz", "", b"")]
    if name == "healthz api":
        return [("GET", "/healthz/api", "", b"")]
    if name == "floor":
        return [("POST", "/bench/floor", bare, clock)]
    if name == "floor + provider":
        return [("POST", "/bench/floor/provider", bare, clock)]
    if name == "exec":
        return [("POST", "/api/v1/tools/exec", f"Bearer {account['key']}", clock) for account in accounts]
    if name == "exec + connection":
        return [
            (
                "POST",
                "/api/v1/tools/exec",
                f"Bearer {account['key']}",
                json.dumps(
                    {
                        "tool_id": "github__get_user",
                        "args": {},
                        "connection_id": account["connection_id"],
                        "grant_id": account["grant_id"],
                    }
                ).encode(),
            )
            for account in accounts
        ]
    if name == "mcp tools/call":
        call = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": MCP_TOOLS[0], "arguments": {"a": 1, "b": 2}},
        }
        return [("POST", "/mcp", f"Bearer {account['key']}", json.dumps(call).encode()) for account in accounts]
    if name in MCP_TARGETS:
        add = json.dumps({"tool_id": MCP_TOOLS[MCP_TARGETS.index(name)], "args": {"a": 1, "b": 2}}).encode()
        return [("POST", "/api/v1/tools/exec", f"Bearer {account['key']}", add) for account in accounts]
    sys.exit(f"bench: no target {name!r}; targets: {', '.join(TARGETS)}")


def _run(application: object, requests: list[Request], count: int) -> None:
    _WINDOW[0] += 1  # a fresh fairness window per run: a whole run stays within each account's rate
    answered: list[str] = []

    def start_response(status: str, headers: list, exc_info: object = None) -> None:
        answered.append(status)

    for index in range(count):
        method, path, authorization, body = requests[index % len(requests)]
        environ = {
            "REQUEST_METHOD": method,
            "SCRIPT_NAME": "",
            "PATH_INFO": path,
            "QUERY_STRING": "",
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1",
            "HTTP_HOST": "127.0.0.1",
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
            "wsgi.version": (1, 0),
        }
        if authorization:
            environ["HTTP_AUTHORIZATION"] = authorization
        if path == "/mcp":
            environ.update(MCP_ENVIRON)
        if body:
            environ["CONTENT_TYPE"] = "application/json"
            environ["CONTENT_LENGTH"] = str(len(body))
        response = application(environ, start_response)  # type: ignore[operator]
        content = b"".join(response)
        response.close()
        status = answered.pop()
        if not status.startswith("200") or (path == "/mcp" and b'"isError":false' not in content):
            sys.exit(f"bench: {method} {path} did not answer 200 with a result but {status}: {content[:300]!r}")


# --- the provider's stand-in ------------------------------------------------------------------


async def _serve_github(port: int) -> None:
    """GET /user answered on keep-alive connections, in a process of its own (its work is not counted)."""
    body = json.dumps(USER).encode()
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                writer.write(answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    await server.serve_forever()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


if __name__ == "__main__":
    main()
