"""A real gunicorn started with the project's configuration, for the tests of what that configuration promises."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_gunicorn(
    application: str, *, port: int, env: dict[str, str], options: tuple[str, ...] = (), stderr: IO | int | None = None
) -> subprocess.Popen:
    """`gunicorn -c config/gunicorn.conf.py` serving `application` on 127.0.0.1:`port`, with `options` on top."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "-c",
            "config/gunicorn.conf.py",
            "--bind",
            f"127.0.0.1:{port}",
            *options,
            application,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL if stderr is None else stderr,
    )
