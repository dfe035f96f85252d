"""`make run` on a fresh clone serves the demo, and one Ctrl-C stops all of it, quietly.

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


def test_ctrl_c_stops_web_worker_and_beat_once_and_quietly(clone):
    port = _free_port()
    env = {name: value for name, value in os.environ.items() if name not in CONFIGURATION}
    pid, fd = pty.fork()
    if pid == 0:  # the child: a terminal session running `make run`
        os.chdir(clone)
        os.execvpe("make", ["make", "run", f"PORT={port}"], env)

    try:
        output = b""
        deadline = time.monotonic() + 120
        while not (_port_open(port) and b"celery@" in output and b"beat: Starting" in output):
            assert time.monotonic() < deadline, output.decode(errors="replace")[-3000:]
            output += _read(fd, 0.5)
        time.sleep(2)  # let the worker finish starting up
        output += _read(fd, 0.1)

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

    assert os.waitstatus_to_exitcode(status) in (0, 130, -signal.SIGINT), after
    assert not port_open_after
    assert left_running == []
    assert "Segmentation fault" not in after
    assert len(after.splitlines()) < 40, after
    assert after.count("Warm shutdown") <= 1
