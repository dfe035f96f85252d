"""A request stuck in a worker thread takes its worker down, as gunicorn ends a silent sync worker.

gunicorn's `timeout` watches a gthread worker's main loop, which stays alive
while a request thread is stuck; config/gunicorn.conf.py's watchdog ends such a
worker itself, and gunicorn starts a fresh one. A real gunicorn with the
project's configuration serves a two-line WSGI application, with a 2 s timeout.
"""

from __future__ import annotations

import os
import time

import httpx
import pytest

from tests.support.gunicorn import free_port, start_gunicorn

TIMEOUT_S = 2


def _worker_pid(url: str, deadline_s: float = 30) -> str:
    """The pid of the worker answering `/`, waiting for one to be up."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return httpx.get(f"{url}/", timeout=1).raise_for_status().text
        except httpx.TransportError:
            if time.monotonic() > deadline:
                pytest.fail("no gunicorn worker answered")
            time.sleep(0.1)


@pytest.fixture
def gunicorn_one_worker(tmp_path):
    port = free_port()
    log = tmp_path / "gunicorn.log"
    with log.open("w") as log_file:
        process = start_gunicorn(
            "tests.config.stuck_app:application",
            port=port,
            env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prometheus")},
            options=("--workers", "1", "--timeout", str(TIMEOUT_S)),
            stderr=log_file,
        )
    try:
        yield f"http://127.0.0.1:{port}", log
    finally:
        process.terminate()
        process.wait(timeout=15)


def test_a_request_within_the_timeout_finishes_on_the_same_worker(gunicorn_one_worker):
    url, _log = gunicorn_one_worker
    before = _worker_pid(url)

    slow = httpx.get(f"{url}/sleep/{TIMEOUT_S / 2}", timeout=10)

    assert slow.status_code == 200
    assert slow.text == before == _worker_pid(url)


def test_a_stuck_request_ends_its_worker_and_a_fresh_one_answers(gunicorn_one_worker):
    url, log = gunicorn_one_worker
    before = _worker_pid(url)
    started = time.monotonic()

    with pytest.raises(httpx.TransportError):  # the worker ended under it: the connection closed unanswered
        httpx.get(f"{url}/sleep/60", timeout=30)

    assert time.monotonic() - started < TIMEOUT_S + 5  # cut at the timeout, not after the request's 60 s
    assert _worker_pid(url) != before
    assert f"a request has run for more than {TIMEOUT_S} s: replacing worker {before}" in log.read_text()
