"""How a child is started: the launcher (resource limits) and, when usable, bubblewrap.

Under bubblewrap the child sees the host's root read-only, a private /tmp (its TMPDIR),
its own HOME bound at /tmp/home, fresh /dev and /proc in new PID, IPC, UTS and network
namespaces, and empty directories where Toolgate's tree, var/ and the host's directory of
child homes are (but for the Python environment the host runs in, read-only, when it lies
inside them). Its network namespace holds only a loopback of its own: PostgreSQL, Redis,
the web server and every other address are out of reach. A server the operator allowed
hosts for gets the host's egress proxy (egress.py) as a Unix socket bound into the sandbox
and, through relay.py, as 127.0.0.1:EGRESS_PORT inside it. When the server exits, the PID
namespace ends and takes everything it started along, double-forked orphans included.
Without bubblewrap a child gets the scrubbed environment, its own session and process
group (the SDK stops the group as a whole; a process that makes a session of its own
escapes it), a private HOME and TMPDIR and the resource limits, but the host's network and
whatever the host's user can read: when the host requires a sandbox (production) only
servers marked `--trusted-unsandboxed` run that way.
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
RELAY = Path(__file__).resolve().parent / "relay.py"
SANDBOX_EGRESS_DIR = "/tmp/.toolgate"  # noqa: S108 - inside the sandbox's private tmpfs
SANDBOX_EGRESS_SOCKET = f"{SANDBOX_EGRESS_DIR}/egress/proxy.sock"
SANDBOX_RELAY = f"{SANDBOX_EGRESS_DIR}/relay.py"
EGRESS_PORT = 3128  # the child's own loopback: no other service listens in its namespace
SANDBOX_HOME = "/tmp/home"  # noqa: S108 - inside the sandbox's private tmpfs
SANDBOX_TMP = "/tmp/tmp"  # noqa: S108
PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Limits:
    """Per child: CPU seconds, address space bytes, open files, processes (0 = inherit the host's)."""

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
            [bwrap, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
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


def bwrap_argv(bwrap: str, *, home: Path, hidden: Sequence[Path], egress_dir: Path | None = None) -> list[str]:
    """bubblewrap's arguments up to and with the `--` before the server's command (and the relay, with egress).

    `egress_dir` holds the egress proxy's socket; it is bound into the sandbox, and the relay
    runs first, from a read-only bind, with the interpreter the host runs on (outside any
    hidden tree once its links are followed).
    """
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
        "--unshare-all",
        "--die-with-parent", "--new-session",
    ]  # fmt: skip
    if egress_dir is None:
        return [*argv, "--"]
    argv += [
        "--bind", str(egress_dir), str(Path(SANDBOX_EGRESS_SOCKET).parent),
        "--ro-bind", str(RELAY), SANDBOX_RELAY,
        "--",
        str(Path(sys.executable).resolve()), "-I", SANDBOX_RELAY,
        f"--port={EGRESS_PORT}", f"--socket={SANDBOX_EGRESS_SOCKET}",
        "--",
    ]  # fmt: skip
    return argv


def egress_environment() -> dict[str, str]:
    """What points a child's HTTP clients at the relay (curl, Python, npm, Node 24 with NODE_USE_ENV_PROXY)."""
    proxy = f"http://127.0.0.1:{EGRESS_PORT}"
    names = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
    return {**dict.fromkeys(names, proxy), "NO_PROXY": "", "no_proxy": "", "NODE_USE_ENV_PROXY": "1"}


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
