"""The first program of every stdio child: set resource limits, drop inherited names, exec the server.

Run by the MCP host as `python -I launcher.py --cpu S --memory B --files N --processes N
--unset A,B -- PROGRAM ARG...`. Limits are set here, in the child's own process after the
fork and exec, instead of in a `preexec_fn` (unsafe in a threaded parent); they are inherited
by bubblewrap and the server it starts. `--unset` removes what the SDK's
`get_default_environment()` adds (LOGNAME, SHELL, TERM, USER) unless the operator declared it.
Standard library only: it must start fast and import nothing of Toolgate.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys

LIMITS = (
    ("cpu", resource.RLIMIT_CPU),
    # Writable private memory (heap, anonymous mappings), not address space: V8 reserves far more
    # address space than it touches (WebAssembly's guard regions), so an address-space cap stops
    # Node's fetch() (undici's WASM parser) long before the process uses that much memory.
    ("memory", resource.RLIMIT_DATA),
    ("files", resource.RLIMIT_NOFILE),
    ("processes", resource.RLIMIT_NPROC),
)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="launcher")
    for name, _limit in LIMITS:
        parser.add_argument(f"--{name}", type=int, default=0)
    parser.add_argument("--unset", default="")
    parser.add_argument("program", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    program = options.program[1:] if options.program[:1] == ["--"] else options.program
    if not program:
        sys.exit("launcher: no program")
    for name, limit in LIMITS:
        value = getattr(options, name)
        if value > 0:
            _soft, hard = resource.getrlimit(limit)
            ceiling = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(limit, (ceiling, ceiling))
    for name in filter(None, options.unset.split(",")):
        os.environ.pop(name, None)
    try:
        os.execvp(program[0], program)  # noqa: S606 - exec the argv as given, never a shell
    except OSError as exc:
        sys.exit(f"launcher: cannot start {program[0]!r}: {exc.strerror}")


if __name__ == "__main__":
    main(sys.argv[1:])
