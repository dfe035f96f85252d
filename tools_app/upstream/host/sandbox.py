"""How a child is started: the launcher (resource limits) and, when usable, bubblewrap.

Under bubblewrap the child sees the host's root read-only, a private /tmp (its TMPDIR),
its own HOME bound at /tmp/home, fresh /dev and /proc in new PID, IPC and UTS namespaces,
and empty directories where Toolgate's tree, var/ and the host's directory of child homes
are (but for the Python environment the host runs in, read-only, when it lies inside them);
it keeps the network (servers call their APIs; `npx` fetches packages). Without
bubblewrap a child still gets the scrubbed environment, its own process group, a private
HOME and TMPDIR and the resource limits, but can read whatever the host's user can read.
"""

from __future__ import annotations

import functools
import logging
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

LAUNCHER = Path(__file__).resolve().parent / "launcher.py"
SANDBOX_HOME = "/tmp/home"  # noqa: S108 - inside the sandbox's private tmpfs
SANDBOX_TMP = "/tmp/tmp"  # noqa: S108
PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Limits:
    """Per child: CPU seconds, writable memory bytes (RLIMIT_DATA), open files, processes (0 = the host's)."""

    cpu_seconds: int = 0
    memory_bytes: int = 0
    open_files: int = 0
    processes: int = 0


@functools.cache
def bwrap_problem(bwrap: str | None) -> str | None:
    """Why bubblewrap cannot be used here (None when it can): missing, or no namespaces allowed."""
    if bwrap is None:
        return "bwrap is not installed (Debian: apt-get install bubblewrap)"
    try:
        probe = subprocess.run(  # noqa: S603 - a fixed argv, no shell
            [bwrap, "--ro-bind", "/", "/", "--unshare-all", "--share-net", "--die-with-parent", "true"],
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap cannot run ({type(exc).__name__})"
    if probe.returncode != 0:
        first_line = probe.stderr.decode(errors="replace").strip().splitlines()[:1]
        return f"bwrap cannot create namespaces here: {(first_line or ['no reason given'])[0][:200]}"
    return None


def find_bwrap() -> str | None:
    return shutil.which("bwrap")


def bwrap_argv(bwrap: str, *, home: Path, hidden: Sequence[Path]) -> list[str]:
    """bubblewrap's arguments up to the `--` before the server's own command."""
    argv = [
        bwrap,
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--tmpfs", "/tmp",  # noqa: S108
    ]  # fmt: skip
    for path in hidden:
        argv += ["--tmpfs", str(path)]
    # A virtualenv inside a hidden tree (a checkout's .venv) holds the interpreter children such as
    # `python -m server` run with: it stays visible, read-only, over the empty directory.
    interpreter = Path(sys.prefix).resolve()
    if any(interpreter.is_relative_to(path) for path in hidden):
        argv += ["--ro-bind", str(interpreter), str(interpreter)]
    argv += [
        "--dir", SANDBOX_TMP,
        "--bind", str(home), SANDBOX_HOME,
        "--chdir", SANDBOX_HOME,
        "--unshare-all", "--share-net",
        "--die-with-parent", "--new-session",
        "--",
    ]  # fmt: skip
    return argv


def launch_argv(command: Sequence[str], *, limits: Limits, unset: Sequence[str], bwrap: list[str] | None) -> list[str]:
    """The full argv: python -I launcher [limits] -- [bwrap ... --] command."""
    return [
        sys.executable,
        "-I",
        str(LAUNCHER),
        f"--cpu={limits.cpu_seconds}",
        f"--memory={limits.memory_bytes}",
        f"--files={limits.open_files}",
        f"--processes={limits.processes}",
        f"--unset={','.join(unset)}",
        "--",
        *(bwrap or []),
        *command,
    ]
