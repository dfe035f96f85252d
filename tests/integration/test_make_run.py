"""`make run` on a fresh clone serves the demo, ends its output with the logins, and one Ctrl-C stops it.

Driven through a pseudo-terminal, as a person at a terminal runs it: Ctrl-C is
the byte a terminal turns into SIGINT for the whole foreground process group.
After it, the port is free, no process of the clone is left, the output is a
few lines (no flood of shutdown messages, no "Segmentation fault"), and the
exit status is that of an interrupted command.
"""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import shutil
import signal
import socket
import time
from pathlib import Path

import pytest

from tests.integration.test_embedded_refresh import CONFIGURATION, NOT_IN_A_CLONE
from tests.support.celery_workers import ROOT


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
    except OSError:
        return False
    return True


def _processes_in(directory: Path) -> list[int]:
    """Processes whose working directory is `directory` (what `make run` started there)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if Path(os.readlink(entry / "cwd")) == directory:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _read(fd: int, timeout: float) -> bytes:
    ready, _, _ = select.select([fd], [], [], timeout)
    if not ready:
        return b""
    try:
        return os.read(fd, 65536)
    except OSError:  # the child side closed: everything has exited
        return b""


@pytest.fixture
def clone(tmp_path) -> Path:
    target = tmp_path / "clone"
    shutil.copytree(ROOT, target, ignore=NOT_IN_A_CLONE)
    (target / ".venv").symlink_to(ROOT / ".venv")  # installed already by `make test`
    return target


# honcho's prefix: its time stamp and the process name; then the line as the process wrote it.
HONCHO_PREFIX = re.compile(r"^(?:\x1b\[[0-9;]*m)*\d\d:\d\d:\d\d (\S+)\s*\| (?:\x1b\[[0-9;]*m)*")
ISO_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d")
RULE = "=" * 78


def _lines(output: bytes) -> list[str]:
    return [line for line in output.decode(errors="replace").replace("\r", "").splitlines() if line.strip()]


def test_make_run_ends_with_the_logins_and_ctrl_c_stops_everything_once_and_quietly(clone):
    port = _free_port()
    env = {name: value for name, value in os.environ.items() if name not in CONFIGURATION}
    env["TOOLGATE_REFRESH_SWEEP_SECONDS"] = "1"  # periodic sweeps run (and find nothing) while we watch
    pid, fd = pty.fork()
    if pid == 0:  # the child: a terminal session running `make run`
        os.chdir(clone)
        os.execvpe("make", ["make", "run", f"PORT={port}"], env)

    try:
        output = b""
        deadline = time.monotonic() + 180
        while not (_port_open(port) and output.count(RULE.encode()) >= 2):
            assert time.monotonic() < deadline, output.decode(errors="replace")[-3000:]
            output += _read(fd, 0.5)
        ready_at = len(output)
        quiet_until = time.monotonic() + 6  # several sweeps and beat ticks: none of them says anything
        while time.monotonic() < quiet_until:
            output += _read(fd, 0.5)
        started = _lines(output)
        after_ready = _lines(output[ready_at:])

        interrupted_at = len(output)
        os.write(fd, b"\x03")
        deadline = time.monotonic() + 45
        while (chunk := _read(fd, 0.5)) or time.monotonic() < deadline:
            output += chunk
            finished, status = os.waitpid(pid, os.WNOHANG)
            if finished:
                break
        else:
            os.kill(pid, signal.SIGKILL)
            pytest.fail("make run did not stop within 45 s of Ctrl-C")
        port_open_after, left_running = _port_open(port), _processes_in(clone)
    finally:  # whatever happened, leave nothing of the clone running
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    output += _read(fd, 0.2)
    after = output[interrupted_at:].decode(errors="replace")

    # the logins and the curl are the last lines, framed, nothing after them; few lines since "ready"
    assert after_ready == [], after_ready
    (ready_line,) = [
        index for index, line in enumerate(started) if " ready. " in line and "[celery.apps.worker]" in line
    ]
    assert len(started) - ready_line < 40, "\n".join(started)
    last = [HONCHO_PREFIX.sub("", line) for line in started[-13:]]
    assert (last[0], last[-1]) == (RULE, RULE), "\n".join(started[-14:])
    assert last[1].startswith("Toolgate demo is ready (tenant demo)")
    assert last[-4].startswith(
        f'  curl -s -X POST http://127.0.0.1:{port}/api/v1/tools/exec -H "Authorization: Bearer tg_'
    )
    assert last[-3].startswith(f"  MCP:          http://127.0.0.1:{port}/mcp")
    assert all(HONCHO_PREFIX.match(line).group(1) == "demo.1" for line in started[-11:])
    # console logs, one time stamp per line (honcho's): no JSON, no ISO stamp, no banner, no migration list
    logged = [HONCHO_PREFIX.sub("", line) for line in started if HONCHO_PREFIX.match(line)]
    assert any(line.startswith("[info     ] request ") and "path=/readyz" in line for line in logged), logged
    assert [line for line in logged if line.startswith("{") or ISO_TIMESTAMP.search(line)] == []
    text = "\n".join(started)
    for noise in ("Applying ", "celery beat v", "-------------- celery@", "SecurityWarning", "development server"):
        assert noise not in text, noise
    # Ctrl-C
    assert os.waitstatus_to_exitcode(status) in (0, 130, -signal.SIGINT), after
    assert not port_open_after
    assert left_running == []
    assert "Segmentation fault" not in after
    assert "make: ***" not in after  # neither "Error 130" nor "Interrupt" for a clean stop
    assert len(after.splitlines()) < 40, after
    assert after.count("Warm shutdown") <= 1
