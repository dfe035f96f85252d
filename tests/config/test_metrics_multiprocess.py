"""/metrics under a real gunicorn with several workers: every worker's counts, whichever worker answers.

A fresh SQLite file is migrated and seeded (the demo's key and policy), then
gunicorn starts with the project's own configuration and three workers. Each
exec call comes on a new connection, so the workers share them; every scrape,
answered by any worker, must report all of them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.gunicorn import free_port, start_gunicorn

ROOT = Path(__file__).resolve().parents[2]
CALLS = 24
COUNTED = re.compile(
    r'^toolgate_tool_calls_total\{error_code="",outcome="ok",tenant="[^"]+",tool="core__get_current_time"\} (\S+)$',
    re.MULTILINE,
)
EXECUTE_STAGE_TIMED = re.compile(
    r'^toolgate_pipeline_stage_duration_seconds_count\{stage="execute"\} (\S+)$', re.MULTILINE
)


def _manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True)


@pytest.fixture
def gunicorn_with_three_workers(tmp_path):
    env = {
        **os.environ,
        "DEBUG": "True",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "REDIS_URL": "",
        "TOOLGATE_API_RATE_PER_SECOND": "0",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    _manage(env, "migrate", "--noinput")
    _manage(env, "sync_tools")
    _manage(env, "seed_demo", "--credentials-file", str(tmp_path / "demo.json"))
    key = json.loads((tmp_path / "demo.json").read_text())["api_key"]
    port = free_port()
    process = start_gunicorn(
        "config.wsgi:application",
        port=port,
        env={**env, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prometheus"), "WEB_CONCURRENCY": "3"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("gunicorn did not start")
            time.sleep(0.1)
        yield url, key, tmp_path / "prometheus"
    finally:
        process.terminate()
        process.wait(timeout=15)


# Three Django commands and three gunicorn workers start first: on a loaded machine that alone nears the default.
@pytest.mark.timeout(300)
def test_every_workers_calls_are_counted_on_every_scrape(gunicorn_with_three_workers):
    url, key, directory = gunicorn_with_three_workers
    # No kept-alive connection, so each call may land on another worker; one client, so one TLS context is built.
    with httpx.Client(limits=httpx.Limits(max_keepalive_connections=0), timeout=10) as http:
        for _ in range(CALLS):
            response = http.post(
                f"{url}/api/v1/tools/exec",
                json={"tool_id": "core__get_current_time", "args": {}},
                headers={"Authorization": f"Bearer {key}"},
            )
            assert response.status_code == 200

        writers = {path.name.rsplit("_", 1)[-1] for path in directory.glob("counter_*.db")}
        assert len(writers) >= 2, f"the calls were not spread over workers: {sorted(writers)}"
        for _ in range(6):
            page = http.get(f"{url}/metrics")
            assert page.status_code == 200
            counted = COUNTED.search(page.text)
            assert counted is not None, page.text[:2000]
            assert float(counted.group(1)) == CALLS
            # the stage timings each worker writes to a file of its own (tools_app.metrics.StageFile)
            timed = EXECUTE_STAGE_TIMED.search(page.text)
            assert timed is not None, page.text[:2000]
            assert float(timed.group(1)) == CALLS
