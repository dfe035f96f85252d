"""How a child is started: the launcher (resource limits) and, when usable, bubblewrap.

Under bubblewrap the child sees the host's root read-only, a private /tmp (its TMPDIR),
its own HOME bound at /tmp/home, fresh /dev and /proc in new PID, IPC, UTS and network
namespaces, and empty directories where Toolgate's tree, var/ and the host's directory of
child homes are (but for the Python environment the host runs in, read-only, when it lies
inside them), the server's installed package read-only at its own path, and the folders its
operator bound. Its network namespace holds only a loopback of its own: PostgreSQL, Redis,
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
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ConfigDict

logger = logging.getLogger(__name__)

LAUNCHER = Path(__file__).resolve().parent / "launcher.py"
RELAY = Path(__file__).resolve().parent / "relay.py"
SANDBOX_EGRESS_DIR = "/tmp/.toolgate"  # noqa: S108 - inside the sandbox's private tmpfs
SANDBOX_EGRESS_SOCKET = f"{SANDBOX_EGRESS_DIR}/egress/proxy.sock"
SANDBOX_RELAY = f"{SANDBOX_EGRESS_DIR}/relay.py"
EGRESS_PORT = 3128  # the child's own loopback: no other service listens in its namespace
SANDBOX_HOME = "/tmp/home"  # noqa: S108 - inside the sandbox's private tmpfs
SANDBOX_TMP = "/tmp/tmp"  # noqa: S108
PRIVATE_TMP = "/tmp"  # noqa: S108 - the path the sandbox replaces with a tmpfs of its own
# Where a folder may not be bound: the sandbox's own mounts and the child's private directories.
RESERVED_SANDBOX_PATHS = ("/", "/proc", "/dev", PRIVATE_TMP, SANDBOX_HOME, SANDBOX_TMP)
PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Limits:
    """Per child: CPU seconds, writable memory bytes (RLIMIT_DATA), open files, processes (0 = the host's)."""

    cpu_seconds: int = 0
    memory_bytes: int = 0
    open_files: int = 0
    processes: int = 0


@dataclass(frozen=True, slots=True)
class Bind:
    """A host folder an operator bound into one server's sandbox, read-only unless `writable`."""

    __pydantic_config__ = ConfigDict(extra="forbid", strict=True)  # as decoded from the worker's spec header

    host: str
    sandbox: str
    writable: bool = False

    @property
    def label(self) -> str:
        return f"{self.host}:{self.sandbox}:{'rw' if self.writable else 'ro'}"


def binds_from_rows(rows: object) -> tuple[Bind, ...]:
    """A server row's `binds` JSON ([{"host", "sandbox", "writable"}]) as Bind values."""
    if not isinstance(rows, list):
        return ()
    return tuple(
        Bind(host=str(row["host"]), sandbox=str(row["sandbox"]), writable=bool(row.get("writable")))
        for row in rows
        if isinstance(row, dict) and "host" in row and "sandbox" in row
    )


def bind_rows(binds: Sequence[Bind]) -> list[dict[str, object]]:
    return [{"host": bind.host, "sandbox": bind.sandbox, "writable": bind.writable} for bind in binds]


def parse_bind(text: str) -> Bind:
    """`HOST_PATH[:SANDBOX_PATH][:ro|rw]` (read-only by default; the sandbox path defaults to the host's)."""
    parts = text.split(":")
    writable = False
    if len(parts) > 1 and parts[-1] in ("ro", "rw"):
        writable = parts.pop() == "rw"
    if len(parts) > 2 or not parts[0]:
        raise ValueError(f"--bind takes HOST_PATH[:SANDBOX_PATH][:ro|rw], not {text[:120]!r}")
    return Bind(host=parts[0], sandbox=parts[1] if len(parts) == 2 and parts[1] else parts[0], writable=writable)


def bind_problem(bind: Bind, *, hidden: Sequence[Path]) -> str | None:
    """Why `bind` cannot be made (None when it can), said so that the operator can fix it."""
    for label, path in (("host", bind.host), ("sandbox", bind.sandbox)):
        if not path.startswith("/") or any(part in (".", "..") for part in path.split("/")) or "//" in path:
            return f"the {label} path {path[:120]!r} must be absolute and normalised (no '.', '..' or '//')"
    host = Path(bind.host)
    if not host.is_dir():
        return f"{bind.host} is not a folder on this machine"
    real = host.resolve()
    if any(real.is_relative_to(tree) for tree in hidden):
        return f"{bind.host} lies in Toolgate's tree or var/, which children never see; bind a folder outside them"
    sandbox = Path(bind.sandbox.rstrip("/") or "/")
    inside_own = (Path(own) for own in RESERVED_SANDBOX_PATHS if own not in ("/", PRIVATE_TMP))
    if str(sandbox) in RESERVED_SANDBOX_PATHS or any(sandbox.is_relative_to(own) for own in inside_own):
        return f"{bind.sandbox} is one of the sandbox's own folders; choose another sandbox path"
    if not sandbox.is_relative_to(PRIVATE_TMP) and not sandbox.is_dir():
        # bubblewrap can create a mount point in the private /tmp only: the rest of the root is read-only.
        return f"the sandbox path {bind.sandbox} must be under /tmp or an existing folder (the root is read-only)"
    return None


def bind_args(binds: Sequence[Bind]) -> list[str]:
    """bubblewrap's mounts for the server's bound folders (after /tmp and the hidden trees)."""
    argv: list[str] = []
    for bind in binds:
        argv += ["--bind" if bind.writable else "--ro-bind", bind.host, bind.sandbox]
    return argv


def package_args(package: Path | None) -> list[str]:
    """The server's installed package, read-only at its own path (inside the host's directory, otherwise hidden).

    The same path inside and out: a virtualenv's scripts name their interpreter by absolute path.
    """
    return ["--ro-bind", str(package), str(package)] if package is not None else []


def visible_path_problem(path: str, *, hidden: Sequence[Path], binds: Sequence[Bind]) -> str | None:
    """Why a child under bubblewrap could not open `path` (None when it can)."""
    given = Path(path)
    for bind in binds:
        if given.is_relative_to(bind.sandbox):
            return None
    interpreter = Path(sys.prefix).resolve()  # re-bound over a hidden tree or the private /tmp, at its real path
    for candidate in (given, given.resolve()):
        if candidate.is_relative_to(interpreter):
            return None
        if candidate.is_relative_to(PRIVATE_TMP):
            return (
                f"{path} lies under /tmp, which the sandbox replaces with a private one; install it elsewhere "
                "(e.g. /opt) or bind its folder with --bind"
            )
        if any(candidate.is_relative_to(tree) for tree in hidden):
            return f"{path} lies in Toolgate's tree or var/, which the sandbox hides; install it elsewhere (e.g. /opt)"
    return None


def program_problem(
    program: str,
    *,
    search_path: str,
    package_programs: Sequence[str],
    binds: Sequence[Bind],
    hidden: Sequence[Path],
    sandboxed: bool,
) -> str | None:
    """Why a child could not start `program` (None when it can): checked when the server is added."""
    if "/" not in program:
        if program in package_programs:
            return None
        if sandboxed:  # a PATH entry the sandbox hides is empty there: the lookup goes on to the next one
            entries = search_path.split(os.pathsep)
            search_path = os.pathsep.join(
                entry for entry in entries if entry and visible_path_problem(entry, hidden=hidden, binds=binds) is None
            )
        found = shutil.which(program, path=search_path)
        if found is None:
            named = f"; the package's programs are {', '.join(package_programs)}" if package_programs else ""
            return f"{program} is not found on the child's PATH ({search_path[:300]}){named}"
        path = host_path = found
    elif not program.startswith("/"):
        return f"{program} is a relative path; give it absolute (the child starts in its private HOME)"
    else:
        path = host_path = program
        for bind in binds:
            if Path(program).is_relative_to(bind.sandbox):
                host_path = str(Path(bind.host) / Path(program).relative_to(bind.sandbox))
                break
        if not Path(host_path).is_file() or not os.access(host_path, os.X_OK):
            return f"{program} is not an executable file on this machine"
    if not sandboxed:
        return None
    problem = visible_path_problem(path, hidden=hidden, binds=binds)
    if problem is None and (interpreter := shebang_interpreter(Path(host_path))):
        problem = visible_path_problem(interpreter, hidden=hidden, binds=binds)
        if problem is not None:
            problem = f"its interpreter {problem}"
    return problem


def shebang_interpreter(path: Path) -> str | None:
    """The interpreter a script's `#!` line names (None for a binary, or `#!/usr/bin/env NAME`)."""
    try:
        with path.open("rb") as script:
            head = script.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
    return words[0] if words and Path(words[0]).name != "env" else None


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


def bwrap_argv(
    bwrap: str,
    *,
    home: Path,
    hidden: Sequence[Path],
    package: Path | None = None,
    binds: Sequence[Bind] = (),
    egress_dir: Path | None = None,
) -> list[str]:
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
        "--tmpfs", PRIVATE_TMP,
    ]  # fmt: skip
    for path in hidden:
        argv += ["--tmpfs", str(path)]
    # A virtualenv inside a hidden tree or under /tmp (a checkout's .venv) holds the interpreter children
    # such as `python -m server` run with: it stays visible, read-only, over the empty directory.
    interpreter = Path(sys.prefix).resolve()
    if interpreter.is_relative_to(PRIVATE_TMP) or any(interpreter.is_relative_to(path) for path in hidden):
        argv += ["--ro-bind", str(interpreter), str(interpreter)]
    argv += package_args(package)
    argv += bind_args(binds)
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
