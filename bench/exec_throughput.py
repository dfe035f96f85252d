"""`POST /api/v1/tools/exec` against `/healthz`, a bare DRF view and the floor, in one run, under gunicorn.

What it measures: gunicorn as config/gunicorn.conf.py starts it (or
`--worker-class`, `--workers`, `--threads`) on PostgreSQL and Redis (loopback),
wrk -t2 -c32 and -c1, 64 service accounts rotated, against `/healthz` through the
API's middleware list (`/healthz/api`, what exec runs; `/healthz` itself beside it), `core__get_current_time`
with a policy and no connection, and the same with ten active argument rules
on it (bench/rule_set.py, none matching: all ten evaluated); then `github__get_user` with a connection and
a grant (decrypt, broker, a loopback GitHub answering a fixed user). Each
figure is compared with the baselines measured in the same run, since
machines differ. The floor (bench/urls.py) is the bare view plus the fairness
round trip and the audit row a warm exec must make (`floor + provider` adds
the GitHub call, for exec with a connection): exec's ratio to its floor is
Toolgate's own work, the floor's ratio to `/healthz` the most exec can reach.
`floor, row in place` is the floor with its audit row awaited before the
answer is built, as it was before the row was sent ahead of the answer: a
line after the targets compares the two, their c1 latency measured with
requests to each interleaved one by one (2,000 each) after the wrk runs.
After every run of a target that writes audit rows (the floors and exec), the
rows written are compared with the answers wrk received: the audit row is
durable, one per answer.

    make bench        (or: python -m bench.exec_throughput [--seconds N] [--rounds N] [--only exec,...]
                       [--worker-class sync|gthread|uvicorn.workers.UvicornWorker] [--workers N] [--threads N]
                       [--compare sync:4,gthread:2x4,...])

`--compare` serves each configuration at once, on its own port, and takes
turns between them as between targets, each compared with its own /healthz:
on this noisy machine, configurations measured in separate runs minutes apart
could not be told apart.

The targets take turns, round after round, and each figure is the median of
its rounds: on a machine of two cores a baseline alone moved by a third
between two runs minutes apart, and taking turns exposes every target to the
same disturbances.

Needs PostgreSQL and Redis: DATABASE_URL (default a `toolgate_bench` database
on 127.0.0.1, dropped and re-created each run) and REDIS_URL (default db 9).
Installs wrk with apt-get when it is missing. Prints a table, then one line
per target with its figure and goal (`target: built-in exec / floor = 0.78
(goal >= 0.90)`); nothing passes or fails.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import django
import httpx

from bench.database import fresh_database, manage, production_environment
from bench.targets import target_line

ROOT = Path(__file__).resolve().parents[1]
ACCOUNTS = 64
BARE_AUTH = "Bearer bench-bare-token"  # the baselines' fixed token (bench/urls.py)
BASELINES = frozenset({"healthz", "healthz api", "bare DRF", "floor", "floor, row in place", "floor + provider"})
# Each target's floor: the round trips it cannot do without, and nothing else of exec.
FLOOR_OF = {"exec + connection": "floor + provider", "floor + provider": "floor + provider"}
# What exec is compared with: the probe through the API's middleware list (settings.API_MIDDLEWARE), as exec
# and the floors run; `healthz` (the site's whole list) is shown beside it.
HEALTHZ = "healthz api"
# The targets (docs/performance.md): (label, connections, what is measured, the goal and its direction).
TARGETS = (
    ("built-in exec / floor", 32, ("exec", "floor", "rate"), 0.90, ">="),
    ("exec with a connection / its floor", 32, ("exec + connection", "floor + provider", "rate"), 0.90, ">="),
    ("c1 p50 of exec / healthz's", 1, ("exec", HEALTHZ, "p50"), 3.0, "<="),
)
USER = {"login": "octocat", "id": 583231, "name": "The Octocat", "html_url": "https://github.com/octocat"}


os.environ.update(production_environment("bench.settings"))
django.setup()

from bench.rule_set import TEN_CONDITIONS  # noqa: E402
from connections_app.services import connection_create, grant_create  # noqa: E402
from policies_app.models import ArgumentRule, ToolPolicy  # noqa: E402
from policies_app.services import argument_rule_save, service_account_create, tenant_create  # noqa: E402
from tools_app.models import ToolInvocation  # noqa: E402
from tools_app.services import tool_set_enabled  # noqa: E402


@dataclass
class Run:
    name: str
    connections: int
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    requests: int
    non_2xx: int
    audit_rows: int | None = None
    cpu_ms_per_answer: float = 0.0  # the gateway's (gunicorn master and workers), read from /proc
    server: str = ""  # which configuration served it (--compare)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=10, help="duration of each measured run")
    parser.add_argument("--rounds", type=int, default=3, help="turns each target takes; figures are medians")
    parser.add_argument(
        "--worker-class", default=None, help="gunicorn worker class (default: config/gunicorn.conf.py's)"
    )
    parser.add_argument("--workers", type=int, default=None, help="gunicorn workers (default: the config's)")
    parser.add_argument("--threads", type=int, default=None, help="threads per gthread worker")
    parser.add_argument(
        "--compare",
        default="",
        help="serve several configurations side by side and take turns between them, e.g. "
        "'sync:4,gthread:2x4' (class:workers[xthreads]); each is compared with its own /healthz",
    )
    parser.add_argument("--only", default="", help="comma-separated targets to run (default: all)")
    options = parser.parse_args()
    wrk = _wrk()
    env = dict(os.environ)
    fresh_database(env["DATABASE_URL"])
    manage(env, "migrate", "--noinput")
    manage(env, "collectstatic", "--noinput")  # DEBUG=False: the web server refuses to start without it
    manage(env, "sync_tools")
    with _FakeGitHub() as github:
        env["TOOLGATE_GITHUB_API_URL"] = github.url
        accounts = _seed()
        servers = _servers(options)
        for server in servers:
            server.start(env)
        try:
            for server in servers:
                server.wait_until_up()
            runs = _measure(wrk, servers, accounts, options.seconds, options.rounds, only=_targets(options.only))
            interleaved = {server.label: _interleaved_floors(server.base) for server in servers}
        finally:
            for server in servers:
                server.stop()
    _report(runs, servers, interleaved)


# --- set-up --------------------------------------------------------------------------------


@dataclass
class Server:
    """One gunicorn serving Toolgate (config/gunicorn.conf.py, overridden as asked) on a free port."""

    label: str  # "" when it is the only one
    worker_class: str | None = None
    workers: int | None = None
    threads: int | None = None
    base: str = ""
    process: subprocess.Popen | None = None

    def start(self, env: dict[str, str]) -> None:
        port = _free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(self._command(port), cwd=ROOT, env=env)

    def _command(self, port: int) -> list[str]:
        """An ASGI worker class (uvicorn's) serves config.asgi instead of config.wsgi."""
        worker_class = self.worker_class or ""
        application = "config.asgi:application" if "uvicorn" in worker_class.lower() else "config.wsgi:application"
        command = [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "config" / "gunicorn.conf.py"), application]
        command += ["--bind", f"127.0.0.1:{port}", "--log-level", "warning"]
        if worker_class:
            command += ["--worker-class", worker_class]
        if self.workers:
            command += ["--workers", str(self.workers)]
        if self.threads:
            command += ["--threads", str(self.threads)]
        return command

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def wait_until_up(self) -> None:
        for _ in range(200):
            try:
                if httpx.get(f"{self.base}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        sys.exit(f"bench: gunicorn {self.label} did not come up")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)


def _servers(options: argparse.Namespace) -> list[Server]:
    """The configurations to measure: `--compare`'s, else the one the other options describe."""
    if not options.compare:
        return [Server("", options.worker_class, options.workers, options.threads)]
    servers = []
    for label in options.compare.split(","):
        match = re.fullmatch(r"([\w.]+):(\d+)(?:x(\d+))?", label.strip())
        if not match:
            sys.exit(f"bench: --compare takes class:workers[xthreads], not {label!r}")
        worker_class, workers, threads = match.groups()
        servers.append(Server(label.strip(), worker_class, int(workers), int(threads) if threads else None))
    return servers


def _targets(only: str) -> frozenset[str] | None:
    return frozenset(name.strip() for name in only.split(",") if name.strip()) or None


def _wrk() -> str:
    found = shutil.which("wrk")
    if found:
        return found
    print("bench: installing wrk with apt-get", flush=True)
    subprocess.run(["apt-get", "install", "-y", "-q", "wrk"], check=True, stdout=subprocess.DEVNULL)
    return shutil.which("wrk") or sys.exit("bench: wrk could not be installed")


def _seed() -> list[dict[str, str]]:
    """64 service accounts of one tenant, a policy for both tools, a connection and grant each."""
    tool_set_enabled(tool_ids=["core__get_current_time", "github__get_user"], enabled=True)
    tenant = tenant_create(slug="bench")
    ToolPolicy.objects.create(name="bench", tenant=tenant, allowed_tools=["core__get_current_time", "github__get_user"])
    accounts = []
    for index in range(ACCOUNTS):
        account, key = service_account_create(tenant=tenant, name=f"agent-{index}")
        connection = connection_create(
            tenant=tenant, provider="github", credential_type="api_key", credentials={"api_key": f"ghp_{index:036d}"}
        )
        grant = grant_create(tenant=tenant, service_account=account, connections=[connection])
        accounts.append({"key": key, "connection_id": str(connection.pk), "grant_id": str(grant.pk)})
    # A second tenant, the same policy, and ten active argument rules on the clock (none matching): exec's
    # cost with rules, beside the first tenant's exec without any, in the same run.
    ruled = tenant_create(slug="bench-rules")
    ToolPolicy.objects.create(name="bench-rules", tenant=ruled, allowed_tools=["core__get_current_time"])
    for number, condition in enumerate(TEN_CONDITIONS):
        argument_rule_save(
            rule=ArgumentRule(
                name=f"bench-rule-{number}",
                tenant=ruled,
                tools=["core__get_current_time"],
                condition=condition,
                action="deny",
            )
        )
    for index in range(ACCOUNTS):
        _account, key = service_account_create(tenant=ruled, name=f"ruled-{index}")
        accounts[index]["ruled_key"] = key
    return accounts


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _FakeGitHub:
    """A minimal keep-alive HTTP server answering GET /user, fast enough not to be what is measured."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        body = json.dumps(USER).encode()
        self._answer = (
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body
        )
        self.url = ""

    def __enter__(self) -> _FakeGitHub:
        self._thread.start()
        server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop
        ).result()
        self.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                writer.write(self._answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


# --- measuring ------------------------------------------------------------------------------

_LUA = """
local calls = %s
local index = 0
request = function()
  index = index %% #calls + 1
  local call = calls[index]
  return wrk.format("%s", "%s", {["Authorization"] = call[1], ["Content-Type"] = "application/json"}, call[2])
end
"""


def _script(directory: Path, name: str, method: str, path: str, calls: list[tuple[str, str]]) -> Path:
    entries = ",".join(f"{{{json.dumps(auth)}, {json.dumps(body)}}}" for auth, body in calls)
    script = directory / f"{name}.lua"
    script.write_text(_LUA % ("{" + entries + "}", method, path))
    return script


def _measure(
    wrk: str,
    servers: list[Server],
    accounts: list[dict[str, str]],
    seconds: int,
    rounds: int,
    *,
    only: frozenset[str] | None,
) -> list[Run]:
    time_body = json.dumps({"tool_id": "core__get_current_time", "args": {}})
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        targets = {
            "healthz": _script(directory, "healthz", "GET", "/healthz", [("", "")]),
            HEALTHZ: _script(directory, "healthz_api", "GET", "/healthz/api", [("", "")]),
            "bare DRF": _script(directory, "bare", "POST", "/bench/bare", [(BARE_AUTH, time_body)]),
            "floor": _script(directory, "floor", "POST", "/bench/floor", [(BARE_AUTH, time_body)]),
            "floor, row in place": _script(
                directory, "floor_in_place", "POST", "/bench/floor/in-place", [(BARE_AUTH, time_body)]
            ),
            "floor + provider": _script(
                directory, "floor_provider", "POST", "/bench/floor/provider", [(BARE_AUTH, time_body)]
            ),
            "exec": _script(
                directory, "exec", "POST", "/api/v1/tools/exec", [(f"Bearer {a['key']}", time_body) for a in accounts]
            ),
            "exec + 10 rules": _script(
                directory,
                "exec_rules",
                "POST",
                "/api/v1/tools/exec",
                [(f"Bearer {a['ruled_key']}", time_body) for a in accounts],
            ),
            "exec + connection": _script(
                directory,
                "exec_connection",
                "POST",
                "/api/v1/tools/exec",
                [
                    (
                        f"Bearer {a['key']}",
                        json.dumps(
                            {
                                "tool_id": "github__get_user",
                                "args": {},
                                "connection_id": a["connection_id"],
                                "grant_id": a["grant_id"],
                            }
                        ),
                    )
                    for a in accounts
                ],
            ),
        }
        if only:  # the baselines stay: every figure is a ratio to them
            targets = {name: script for name, script in targets.items() if name in only | BASELINES}
        runs = []
        for connections in (32, 1):
            turns: dict[tuple[str, str], list[Run]] = {(s.label, name): [] for s in servers for name in targets}
            for round_number in range(1, rounds + 1):
                for server in servers:
                    for name, script in targets.items():
                        if round_number == 1:
                            _wrk_run(wrk, server.base, script, connections, 2)  # warm every worker's caches and pools
                        time.sleep(0.5)  # let answers still in flight land before counting
                        before = ToolInvocation.objects.count()
                        cpu_before = _gateway_cpu_s(server.pid)
                        run = _wrk_run(wrk, server.base, script, connections, seconds)
                        run.cpu_ms_per_answer = (_gateway_cpu_s(server.pid) - cpu_before) * 1000 / max(run.requests, 1)
                        run.name, run.server = name, server.label
                        if name not in ("healthz", HEALTHZ, "bare DRF"):  # the targets that write audit rows
                            time.sleep(0.5)  # answers in flight when wrk stopped
                            run.audit_rows = ToolInvocation.objects.count() - before
                        turns[server.label, name].append(run)
                        print(
                            f"bench: round {round_number}, {server.label or 'gunicorn'} {name} c{connections}: "
                            f"{run.requests_per_s:,.0f} req/s",
                            flush=True,
                        )
            runs.extend(_median_of(taken) for taken in turns.values())
    return runs


def _median_of(taken: list[Run]) -> Run:
    """One target's rounds as one figure: medians of the rates and latencies, sums of the counts."""
    audit = [run.audit_rows for run in taken if run.audit_rows is not None]
    return Run(
        name=taken[0].name,
        server=taken[0].server,
        connections=taken[0].connections,
        requests_per_s=statistics.median(run.requests_per_s for run in taken),
        p50_ms=statistics.median(run.p50_ms for run in taken),
        p99_ms=statistics.median(run.p99_ms for run in taken),
        requests=sum(run.requests for run in taken),
        non_2xx=sum(run.non_2xx for run in taken),
        audit_rows=sum(audit) if audit else None,
        cpu_ms_per_answer=statistics.median(run.cpu_ms_per_answer for run in taken),
    )


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _gateway_cpu_s(master_pid: int) -> float:
    """CPU seconds (user + system) of gunicorn's master and its live workers, from /proc.

    CPU per answer holds on a busy machine where throughput does not: other
    processes take turns on the cores, not instructions from the gateway.
    """
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        pid, parent = int(stat.parent.name), int(fields[1])
        if master_pid in (pid, parent):
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _CLOCK_TICKS


def _wrk_run(wrk: str, base: str, script: Path, connections: int, seconds: int) -> Run:
    threads = min(2, connections)
    output = subprocess.run(
        [wrk, f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(script), base],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return Run(
        name="",
        connections=connections,
        requests_per_s=float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1)),
        p50_ms=_latency(output, "50%"),
        p99_ms=_latency(output, "99%"),
        requests=int(re.search(r"(\d+) requests in", output).group(1)),
        non_2xx=int(m.group(1)) if (m := re.search(r"Non-2xx or 3xx responses: (\d+)", output)) else 0,
    )


def _latency(output: str, percentile: str) -> float:
    value, unit = re.search(rf"{percentile}\s+([\d.]+)(us|ms|s)", output).groups()
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def _report(runs: list[Run], servers: list[Server], interleaved: dict[str, tuple[float, float]]) -> None:
    for server in servers:
        print()
        if server.label:
            print(f"gunicorn {server.label}")
        print(
            f"{'endpoint':<20}{'conns':>6}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}"
            f"{'x healthz':>11}{'x bare':>8}{'x floor':>9}{'cpu ms':>8}{'non-2xx':>9}{'audit rows/answers':>21}"
        )
        for connections in (32, 1):
            group = {run.name: run for run in runs if run.connections == connections and run.server == server.label}
            healthz, bare, floor = group[HEALTHZ], group["bare DRF"], group["floor"]
            for run in group.values():
                audit = f"{run.audit_rows}/{run.requests}" if run.audit_rows is not None else "-"
                print(
                    f"{run.name:<20}{connections:>6}{run.requests_per_s:>10,.0f}{run.p50_ms:>9.2f}{run.p99_ms:>9.2f}"
                    f"{run.requests_per_s / healthz.requests_per_s:>11.2f}"
                    f"{run.requests_per_s / bare.requests_per_s:>8.2f}"
                    f"{run.requests_per_s / group[FLOOR_OF.get(run.name, 'floor')].requests_per_s:>9.2f}"
                    f"{run.cpu_ms_per_answer:>8.2f}{run.non_2xx:>9}{audit:>21}"
                )
            print(f"  c{connections}: the floor's p50 is {floor.p50_ms / healthz.p50_ms:.1f}x healthz's", end="")
            if "exec" in group:
                print(f", exec's {group['exec'].p50_ms / healthz.p50_ms:.1f}x", end="")
            print()
        for line in target_lines(runs, server.label):
            print(line)
        print(floor_line(runs, interleaved[server.label], server.label))


def floor_line(runs: list[Run], interleaved: tuple[float, float], server: str = "") -> str:
    """The floor as it is (its audit row sent ahead of the answer) against the floor as it was (awaited in place)."""
    by = {(run.name, run.connections): run for run in runs if run.server == server}
    rate = by[("floor", 32)].requests_per_s / by[("floor, row in place", 32)].requests_per_s
    ahead, in_place = interleaved
    return (
        f"floor: the audit row sent ahead against awaited in place: c1 p50 {ahead:.2f} against {in_place:.2f} ms "
        f"({ahead / in_place:.2f}x, requests interleaved one by one); c32 rate {rate:.2f}x (wrk)"
    )


INTERLEAVED = 2000  # requests to each floor


def _interleaved_floors(base: str) -> tuple[float, float]:
    """The two floors' p50 at c1 (ms), their requests interleaved one by one, each pair in turn order.

    Five-second wrk runs of each, taken in turns, moved by more than the
    difference between the two on the machine measured here; one client
    alternating between them exposes both to the same moment.
    """
    host, port = base.removeprefix("http://").split(":")
    client = http.client.HTTPConnection(host, int(port), timeout=10)
    body = json.dumps({"tool_id": "core__get_current_time", "args": {}})
    headers = {"Authorization": BARE_AUTH, "Content-Type": "application/json"}
    paths = ("/bench/floor", "/bench/floor/in-place")
    seconds: dict[str, list[float]] = {path: [] for path in paths}
    for turn in range(INTERLEAVED):
        for path in paths if turn % 2 else paths[::-1]:
            started = time.perf_counter()
            client.request("POST", path, body, headers)  # gunicorn's sync workers close: it connects again
            answer = client.getresponse()
            answer.read()
            if answer.status != 200:
                sys.exit(f"bench: {path} answered {answer.status}")
            seconds[path].append(time.perf_counter() - started)
    client.close()
    ahead, in_place = (statistics.median(seconds[path]) * 1000 for path in paths)
    return ahead, in_place


def target_lines(runs: list[Run], server: str = "") -> list[str]:
    """One line per target measured in this run: its figure and its goal (`x healthz` is the API list's probe)."""
    by = {(run.name, run.connections): run for run in runs if run.server == server}
    lines = []
    for label, connections, (measured, baseline, figure), goal, direction in TARGETS:
        target, base = by.get((measured, connections)), by.get((baseline, connections))
        if target is None or base is None:
            continue
        value = target.requests_per_s / base.requests_per_s if figure == "rate" else target.p50_ms / base.p50_ms
        lines.append(target_line(label, value, goal, direction))
    return lines


if __name__ == "__main__":
    main()
