"""Real Celery worker and beat processes for integration tests.

Each process is `celery -A config worker|beat` from the virtualenv running the
tests, started with an environment the test chooses (database, broker, refresh
settings), in its own process group and with its log in a file. Readiness is
read from that log ("<node> ready.", "beat: Starting..."), which costs nothing
and works on every transport, the embedded filesystem one included. Use it as
a context manager: on exit every process it started is stopped, and killed if
it does not stop in time, whatever the test did.

    with CeleryProcesses(env=env, log_dir=tmp_path) as celery:
        first, second = celery.worker("a", queues=[queue]), celery.worker("b", queues=[queue])
        celery.wait_ready(first, second)
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

from celery import Celery

ROOT = Path(__file__).resolve().parents[2]
CELERY = Path(sys.executable).with_name("celery")  # .venv/bin/celery beside .venv/bin/python
NODE_HOST = "toolgate-test"
WORKER_READY = " ready."  # "<node> ready.", logged at INFO once the worker consumes
BEAT_READY = "beat: Starting..."
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 10.0
LOG_TAIL_CHARS = 4000


def database_url(settings_dict: Mapping[str, Any]) -> str:
    """A DATABASE_URL for another process to reach this process's (test) PostgreSQL database."""
    user = quote(str(settings_dict.get("USER") or ""), safe="")
    password = settings_dict.get("PASSWORD") or ""
    credentials = f"{user}:{quote(str(password), safe='')}" if password else user
    host = settings_dict.get("HOST") or "127.0.0.1"
    port = settings_dict.get("PORT") or 5432
    return f"postgres://{credentials}@{host}:{port}/{settings_dict['NAME']}"


def wait_until(condition: Callable[[], object], *, timeout: float, interval: float = 0.05, what: str = "") -> Any:
    """Poll `condition` until it returns something truthy (returned) or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        outcome = condition()
        if outcome:
            return outcome
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f}s: {what or condition}")
        time.sleep(interval)


class TaskEvents:
    """Celery's event stream (workers started with `events=True`), captured in a thread of the test.

    This is what a monitor such as Flower sees: for each task the worker that
    received it, its arguments (as the worker logged them), its eta, and its
    outcome. Start it before the workers so no event is missed; `wait_for_nodes`
    proves the subscription is live.
    """

    def __init__(self, app: Celery) -> None:
        self.app = app
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._receiver: Any = None
        self._thread = threading.Thread(target=self._capture, name="celery-events", daemon=True)

    def __enter__(self) -> TaskEvents:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        deadline = time.monotonic() + 10
        while self._receiver is None and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self._receiver is not None:
            self._receiver.should_stop = True  # its loop checks this at least once a second
        self._thread.join(timeout=10)

    def of_type(self, event_type: str) -> list[dict[str, Any]]:
        with self._lock:
            return [event for event in self._events if event["type"] == event_type]

    def of_task(self, event_type: str, task_name: str, *, count: int, timeout: float = 10) -> list[dict[str, Any]]:
        """The `event_type` events (`task-sent`, `task-received`) of this task, once there are at least `count`."""

        def enough() -> list[dict[str, Any]] | None:
            found = [event for event in self.of_type(event_type) if event["name"] == task_name]
            return found if len(found) >= count else None

        return wait_until(enough, timeout=timeout, what=f"{count} {task_name} {event_type}")

    def wait_for_nodes(self, *nodes: str, timeout: float = START_TIMEOUT_S) -> None:
        """Until every node has sent an event (worker-online or a heartbeat) that this receiver got."""

        def seen() -> bool:
            with self._lock:
                return set(nodes) <= {event.get("hostname") for event in self._events}

        wait_until(seen, timeout=timeout, what=f"events from {nodes}")

    def _capture(self) -> None:
        with self.app.connection_for_read() as connection:
            self._receiver = self.app.events.Receiver(connection, handlers={"*": self._record})
            self._receiver.capture(limit=None, timeout=None, wakeup=False)

    def _record(self, event: dict[str, Any]) -> None:
        with self._lock:
            self._events.append(event)


class CeleryProcess:
    """One running `celery` process and its log file."""

    def __init__(self, *, name: str, argv: list[str], env: Mapping[str, str], cwd: Path, log_path: Path, ready: str):
        self.name = name
        self.log_path = log_path
        self.ready_marker = ready
        with log_path.open("wb") as log:
            # Own session and process group: prefork children die with their parent at teardown.
            self.process = subprocess.Popen(
                argv,
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, pattern: str, *, timeout: float = START_TIMEOUT_S) -> re.Match[str]:
        """The first match of the regex `pattern` in this process's log, waiting for it to appear."""
        compiled = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            found = compiled.search(self.log())
            if found:
                return found
            if not self.running():
                raise AssertionError(
                    f"celery {self.name} exited ({self.process.returncode}) before {pattern!r}:\n{self}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"celery {self.name}: no {pattern!r} within {timeout:.0f}s:\n{self}")
            time.sleep(0.05)

    def wait_ready(self, *, timeout: float = START_TIMEOUT_S) -> None:
        self.wait_for_log(re.escape(self.ready_marker), timeout=timeout)

    def kill(self) -> None:
        """SIGKILL the whole process group, as a crash or the OOM killer would; no warm shutdown."""
        self._signal_group(signal.SIGKILL)
        self.process.wait(timeout=STOP_TIMEOUT_S)

    def terminate(self) -> None:
        """Ask for a warm shutdown (SIGTERM to the main process); `stop` waits for it."""
        if self.running():
            self.process.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        """Warm shutdown, then SIGKILL to whatever is left of the group after STOP_TIMEOUT_S."""
        self.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=STOP_TIMEOUT_S)
        self._signal_group(signal.SIGKILL)
        self.process.wait(timeout=STOP_TIMEOUT_S)

    def _signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):  # the whole group is gone already
            os.killpg(self.process.pid, signum)  # the group id is the pid: start_new_session

    def __str__(self) -> str:
        return f"--- {self.name} (pid {self.pid}) log tail ---\n{self.log()[-LOG_TAIL_CHARS:]}"


class CeleryProcesses:
    """Starts `celery -A config worker|beat` processes with one environment; stops them all on exit."""

    def __init__(self, *, env: Mapping[str, str], log_dir: Path, cwd: Path = ROOT) -> None:
        self.env = {**env, "PYTHONUNBUFFERED": "1"}
        self.log_dir = log_dir
        self.cwd = cwd
        self.processes: list[CeleryProcess] = []

    def worker(
        self,
        name: str,
        *,
        queues: Iterable[str] = (),
        pool: str = "solo",
        concurrency: int | None = None,
        events: bool = False,
    ) -> CeleryProcess:
        """A worker node `name@toolgate-test`; `queues` replaces the default queue when given;
        `events` sends task events for a monitor: `-E` (received with args and eta, succeeded, ...), and
        `task-sent` for the tasks its own tasks queue, stamped when each is published (extra configuration
        after the options, as `celery worker` reads it)."""
        node = f"{name}@{NODE_HOST}"
        args = ["worker", f"--pool={pool}", "--loglevel=INFO", "-n", node]
        args += ["--without-mingle", "--without-gossip"]  # no chatter with other nodes: start fast
        if concurrency is not None:
            args.append(f"--concurrency={concurrency}")
        if events:
            args.append("--task-events")
        if queues:
            args += ["-Q", ",".join(queues)]
        if events:
            args.append("task.send_sent_event=true")
        return self.start(name, *args, ready=f"{node} ready.")

    def beat(self, name: str = "beat") -> CeleryProcess:
        """Beat with the project's scheduler (django_celery_beat's DatabaseScheduler, from settings)."""
        return self.start(name, "beat", "--loglevel=INFO", ready=BEAT_READY)

    def start(self, name: str, *args: str, ready: str) -> CeleryProcess:
        """`celery -A config <args>` as given (e.g. exactly as the Makefile runs it); `ready` is the log
        line that says it is up. The log goes to `<log_dir>/celery-<name>.log`."""
        process = CeleryProcess(
            name=name,
            argv=[str(CELERY), "-A", "config", *args],
            env=self.env,
            cwd=self.cwd,
            log_path=self.log_dir / f"celery-{name}.log",
            ready=ready,
        )
        self.processes.append(process)
        return process

    def wait_ready(self, *processes: CeleryProcess, timeout: float = START_TIMEOUT_S) -> None:
        for process in processes:
            process.wait_ready(timeout=timeout)

    def logs(self) -> str:
        return "\n".join(process.log() for process in self.processes)

    def close(self) -> None:
        for process in self.processes:
            process.terminate()  # all at once: each shutdown takes a moment
        for process in self.processes:
            process.stop()

    def __enter__(self) -> CeleryProcesses:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def __str__(self) -> str:
        return "\n".join(str(process) for process in self.processes)
