"""MCP `tools/call` against `POST /api/v1/tools/exec` for the same tool, in one run under gunicorn.

Both go through the same stack (key check, governance cache, runner, audit
INSERT); MCP adds the JSON-RPC envelope, the catalog check that hides tools
outside the caller's catalog, and the value twice in the answer (structured
and as text). The target is MCP >= 0.9x REST.

    python -m bench.mcp_vs_rest        (or: make bench)

Uses DATABASE_URL / REDIS_URL when set (a fresh tenant each run), else a
fresh SQLite file under var/bench/. Starts gunicorn (sync workers = 2 x cores)
on a free loopback port, rotates 32 service-account keys (the API's fairness
throttle is per key), and alternates short rounds of each kind so that drift
on a shared machine hits all of them alike. Prints req/s, p50 and the ratios;
not a test, nothing passes or fails (a run with failed requests says so).
"""

from __future__ import annotations

import base64
import http.client
import io
import itertools
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = ROOT / "var" / "bench"
TOOL = "core__get_current_time"
KEYS = 32
CONNECTIONS = 16
ROUND_S = 3.0
ROUNDS = 9
WARMUP_S = 2.0
WORKERS = 2 * (os.cpu_count() or 1)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bench_environment() -> dict[str, str]:
    """The server's environment: the configured services, or a fresh embedded database."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "LOG_LEVEL": "WARNING"}
    if not env.get("DATABASE_URL"):
        shutil.rmtree(BENCH_DIR, ignore_errors=True)
        BENCH_DIR.mkdir(parents=True)
        env["DATABASE_URL"] = f"sqlite:///{BENCH_DIR / 'bench.sqlite3'}"
    if env.get("REDIS_URL"):  # production-like: DEBUG off (it needs Redis and real secrets)
        env.update(
            DEBUG="False",
            SECRET_KEY=secrets.token_urlsafe(50),
            TOOLGATE_ENCRYPTION_KEYS=f"bench:{base64.b64encode(secrets.token_bytes(32)).decode()}",
            ALLOWED_HOSTS="127.0.0.1",
        )
    return env


def prepare(env: dict[str, str]) -> list[str]:
    """Migrate, sync and enable the tool, and mint KEYS service accounts under one allowing policy."""
    os.environ.update(env)
    import django  # noqa: PLC0415 - settings come from the environment set just above

    django.setup()
    from django.core.management import call_command  # noqa: PLC0415

    from policies_app.models import ToolPolicy  # noqa: PLC0415
    from policies_app.services import service_account_create, tenant_create  # noqa: PLC0415
    from tools_app.services import tool_set_enabled  # noqa: PLC0415

    call_command("migrate", verbosity=0)
    call_command("collectstatic", interactive=False, verbosity=0)  # DEBUG=False needs the manifest
    call_command("sync_tools", stdout=io.StringIO())
    tool_set_enabled(tool_ids=[TOOL], enabled=True)
    tenant = tenant_create(slug=f"bench-{secrets.token_hex(4)}")
    ToolPolicy.objects.create(name=f"{tenant.slug}-policy", tenant=tenant, allowed_tools=[TOOL])
    keys = []
    for index in range(KEYS):
        _account, key = service_account_create(tenant=tenant, name=f"agent-{index}", scopes=("tools:exec",))
        keys.append(key)
    return keys


@dataclass
class Kind:
    name: str
    path: str
    body: bytes
    headers: dict[str, str]
    expect: bytes  # a byte string every good answer contains


def kinds() -> list[Kind]:
    rest = json.dumps({"tool_id": TOOL, "args": {"timezone": "UTC"}}).encode()
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": TOOL, "arguments": {"timezone": "UTC"}},
    }
    modern = json.loads(json.dumps(call))
    modern["params"]["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    return [
        Kind("REST  POST /api/v1/tools/exec", "/api/v1/tools/exec", rest, {}, b'"ok":true'),
        Kind(
            "MCP   tools/call (2025-11-25)",
            "/mcp",
            json.dumps(call).encode(),
            {"MCP-Protocol-Version": "2025-11-25"},
            b'"isError":false',
        ),
        Kind(
            "MCP   tools/call (2026-07-28)",
            "/mcp",
            json.dumps(modern).encode(),
            {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": TOOL},
            b'"isError":false',
        ),
    ]


@dataclass
class Round:
    done: int = 0
    failed: int = 0
    latencies: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def run_round(port: int, kind: Kind, keys: list[str], seconds: float, connections: int) -> tuple[float, Round]:
    """`connections` threads posting `kind` back to back for `seconds`; answers req/s."""
    outcome = Round()
    key_cycle = itertools.cycle(keys)
    key_lock = threading.Lock()
    deadline = time.perf_counter() + seconds

    def worker() -> None:
        while time.perf_counter() < deadline:
            with key_lock:
                key = next(key_cycle)
            headers = {
                "Authorization": f"Bearer {key}",
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
                **kind.headers,
            }
            started = time.perf_counter()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            try:
                connection.request("POST", kind.path, body=kind.body, headers=headers)
                response = connection.getresponse()
                good = response.status == 200 and kind.expect in response.read()
            except OSError:
                good = False
            finally:
                connection.close()
            elapsed = time.perf_counter() - started
            with outcome.lock:
                outcome.done += 1
                outcome.failed += not good
                outcome.latencies.append(elapsed)

    began = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcome.done / (time.perf_counter() - began), outcome


def wait_healthy(port: int, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"gunicorn exited with {server.returncode}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/healthz")
            if connection.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.2)
    sys.exit("gunicorn did not become healthy within 30 s")


def main() -> None:
    env = bench_environment()
    keys = prepare(env)
    port = _free_port()
    gunicorn = Path(sys.executable).with_name("gunicorn")
    server = subprocess.Popen(
        [
            str(gunicorn),
            "config.wsgi",
            "--workers",
            str(WORKERS),
            "--bind",
            f"127.0.0.1:{port}",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    try:
        wait_healthy(port, server)
        all_kinds = kinds()
        for kind in all_kinds:  # warm every worker's caches and the runner loop
            run_round(port, kind, keys, WARMUP_S, CONNECTIONS)
        rates: dict[str, list[float]] = {kind.name: [] for kind in all_kinds}
        p50: dict[str, list[float]] = {kind.name: [] for kind in all_kinds}
        failed: dict[str, int] = dict.fromkeys(rates, 0)
        for _ in range(ROUNDS):
            for kind in all_kinds:
                rate, outcome = run_round(port, kind, keys, ROUND_S, CONNECTIONS)
                rates[kind.name].append(rate)
                p50[kind.name].append(statistics.median(outcome.latencies) * 1000)
                failed[kind.name] += outcome.failed
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)

    database = env["DATABASE_URL"].split("://", 1)[0]
    print(f"gunicorn sync x{WORKERS}, {CONNECTIONS} connections, {ROUNDS} rounds of {ROUND_S:.0f} s, db={database}")
    baseline = statistics.median(rates[all_kinds[0].name])
    for kind in all_kinds:
        rate = statistics.median(rates[kind.name])
        print(
            f"{kind.name:32s} {rate:8.1f} req/s  p50 {statistics.median(p50[kind.name]):6.1f} ms"
            f"  x{rate / baseline:5.2f} of REST  failed {failed[kind.name]}"
        )


if __name__ == "__main__":
    main()
