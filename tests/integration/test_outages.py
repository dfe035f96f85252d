"""A server whose database or Redis is gone answers 503, never 500.

A real gunicorn process is started against a PostgreSQL address where nothing
listens: every API call answers the contract's envelope
`unavailable_dependency` with Retry-After, quickly, and /readyz says not
ready. No traceback reaches the client. (A Redis outage is tested in process,
in tests/policies_app/test_counters.py.)
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
KEY = "tg_" + "a" * 12 + "_" + "x" * 43  # well formed, so only the database can say it is unknown


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve(env_overrides: dict[str, str]) -> Iterator[str]:
    port = _closed_port()
    env = {**os.environ, "DEBUG": "True", **env_overrides}
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "config.wsgi:application", "--bind", f"127.0.0.1:{port}", "--workers", "1"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                httpx.get(f"{url}/healthz", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(scope="module")
def without_database() -> Iterator[str]:
    yield from _serve({"DATABASE_URL": f"postgres://postgres@127.0.0.1:{_closed_port()}/toolgate", "REDIS_URL": ""})


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/api/v1/tools"), ("POST", "/api/v1/tools/exec"), ("GET", "/api/v1/invocations")],
)
def test_api_calls_answer_503_when_the_database_is_unreachable(without_database, method, path):
    started = time.monotonic()
    response = httpx.request(
        method,
        f"{without_database}{path}",
        headers={"Authorization": f"Bearer {KEY}"},
        json={"tool_id": "core__get_current_time", "args": {}} if method == "POST" else None,
        timeout=10,
    )

    assert response.status_code == 503
    assert response.json()["error_code"] == "unavailable_dependency"
    assert response.headers["Retry-After"] == "5"
    assert "Traceback" not in response.text
    assert time.monotonic() - started < 3


def test_readyz_reports_the_database_outage(without_database):
    assert httpx.get(f"{without_database}/readyz", timeout=10).status_code == 503
