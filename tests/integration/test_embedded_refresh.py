"""`make run` on a fresh clone refreshes OAuth tokens without manual steps (no PostgreSQL, no Redis).

A copy of the working tree without `var/` and `.venv` stands in for the fresh
clone: with nothing configured, its settings create their own SQLite database,
dev secrets and embedded filesystem broker under the copy's `var/`, so this
test shares nothing with a developer's `make run` or with other test runs. The
copy runs `manage.py migrate`, `add_oauth_provider` and a shell snippet that
stores an OAuth connection expiring soon, then a Celery worker and beat started
as `make run` starts them; the fake provider must see exactly one refresh.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest

from tests.support.celery_workers import ROOT, WORKER_READY, CeleryProcesses, wait_until
from tests.support.fake_oauth import CLIENT_ID, CLIENT_SECRET, FakeOAuthProvider

# What a fresh clone does not have: the virtualenv, local state, caches, a developer's .env.
NOT_IN_A_CLONE = shutil.ignore_patterns(
    ".venv", "var", ".git", ".env", "__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", ".hypothesis"
)
# Anything that would point the copy at a developer's services or secrets.
CONFIGURATION = ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "SECRET_KEY", "TOOLGATE_ENCRYPTION_KEYS", "DEBUG")
# `make run` starts exactly these (Procfile.dev), from the project root.
MAKE_RUN_WORKER = ("--quiet", "worker", "--pool=solo", "--loglevel=INFO")
MAKE_RUN_BEAT = ("--quiet", "beat", "--loglevel=WARNING")  # beat says nothing unless something is wrong
SWEEP_SECONDS = 1
JITTER_SECONDS = 2
EXPIRES_IN_S = 120  # inside the default 600 s refresh window: due at once

STORE_CONNECTION = """
import json, os
from datetime import timedelta
from django.conf import settings
from django.utils import timezone
from connections_app.models import OAuthProvider
from connections_app.oauth import oauth_connection_store
from policies_app.models import Tenant

tenant = Tenant.objects.create(slug="fresh", name="Fresh")
connection = oauth_connection_store(
    tenant=tenant,
    provider=OAuthProvider.objects.get(name="github"),
    token=json.loads(os.environ["FAKE_PROVIDER_TOKEN"]),
    now=timezone.now(),
    refresh_window=timedelta(seconds=settings.TOOLGATE_REFRESH_WINDOW_SECONDS),
    created_by=None,
)
print(json.dumps({"id": str(connection.pk), "encrypted_credentials": bytes(connection.encrypted_credentials).hex()}))
"""

REFRESHED = r"refresh_connection\[[0-9a-f-]+\] succeeded in [0-9.]+s: 'refreshed'"


@pytest.fixture
def clone(tmp_path) -> Path:
    target = tmp_path / "clone"
    shutil.copytree(ROOT, target, ignore=NOT_IN_A_CLONE)
    return target


@pytest.fixture
def embedded_env() -> dict[str, str]:
    """The environment of `make run` on a fresh clone: nothing configured but quicker refresh timings."""
    env = {name: value for name, value in os.environ.items() if name not in CONFIGURATION}
    env |= {
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DEBUG": "true",  # as `make run` sets it
        "TOOLGATE_REFRESH_SWEEP_SECONDS": str(SWEEP_SECONDS),
        "TOOLGATE_REFRESH_JITTER_SECONDS": str(JITTER_SECONDS),
        "PYTHONUNBUFFERED": "1",
    }
    return env


def manage(clone: Path, env: dict[str, str], *args: str, extra_env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=clone,
        env={**env, **(extra_env or {})},
        capture_output=True,
        text=True,
        timeout=180,  # migrating a fresh SQLite database takes 20 s here, and much longer on a loaded machine
    )
    assert result.returncode == 0, f"manage.py {args[0]} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def shell_json(clone: Path, env: dict[str, str], code: str, extra_env: dict[str, str]) -> dict:
    """Run `manage.py shell -c` and read the JSON it prints last (secrets travel in the environment, not argv)."""
    output = manage(clone, env, "shell", "-v", "0", "-c", code, extra_env=extra_env)
    return json.loads(output.strip().splitlines()[-1])


def test_worker_and_beat_on_the_embedded_defaults_refresh_a_connection_exactly_once(clone, embedded_env, tmp_path):
    with socket.socket() as sock:  # the worker's own metrics page (config/worker_metrics.py)
        sock.bind(("127.0.0.1", 0))
        metrics_port = sock.getsockname()[1]
    embedded_env["TOOLGATE_WORKER_METRICS_PORT"] = str(metrics_port)
    procfile = (clone / "Procfile.dev").read_text()
    assert all(f"celery -A config {' '.join(args)}" in procfile for args in (MAKE_RUN_WORKER, MAKE_RUN_BEAT))
    with FakeOAuthProvider() as provider, CeleryProcesses(env=embedded_env, log_dir=tmp_path, cwd=clone) as celery:
        # given: a migrated fresh clone with worker and beat running as `make run` runs them
        manage(clone, embedded_env, "migrate", "--noinput")
        worker = celery.start("worker", *MAKE_RUN_WORKER, ready=WORKER_READY)
        beat = celery.start("beat", *MAKE_RUN_BEAT, ready="")  # silent at WARNING: the refresh shows it runs
        # and, while they start, a provider registered by the operator command and a connection expiring soon
        manage(
            clone,
            embedded_env,
            "add_oauth_provider", "github",
            "--authorize-url", provider.authorize_url,
            "--token-url", provider.token_url,
            "--client-id", CLIENT_ID,
            extra_env={"TOOLGATE_OAUTH_CLIENT_SECRET": CLIENT_SECRET},
        )  # fmt: skip
        access, refresh = provider.issue_tokens()
        token = {"access_token": access, "refresh_token": refresh, "expires_in": EXPIRES_IN_S, "token_type": "Bearer"}
        stored = shell_json(clone, embedded_env, STORE_CONNECTION, {"FAKE_PROVIDER_TOKEN": json.dumps(token)})
        stored_at = time.monotonic()
        celery.wait_ready(worker, beat)

        # then: one refresh with the stored refresh token, within a sweep and the jitter (plus slack)
        wait_until(lambda: provider.refresh_calls, timeout=30, what=f"a refresh call\n{celery}")
        refreshed_after = time.monotonic() - stored_at
        worker.wait_for_log(REFRESHED, timeout=10)
        # and the worker counted it where Prometheus scrapes it
        worker_metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
        assert 'toolgate_oauth_refresh_total{outcome="success",provider="github"} 1.0' in worker_metrics
        # and no second one: more sweeps run (silently: a sweep that queues nothing logs nothing) and find
        # nothing due
        time.sleep(3 * SWEEP_SECONDS + JITTER_SECONDS)
        logs = celery.logs()

    assert provider.refresh_calls == [refresh]
    assert provider.revoked_families == 0
    assert refreshed_after < SWEEP_SECONDS + JITTER_SECONDS + 10
    assert len(re.findall(REFRESHED, logs)) == 1
    # the sweep that queued the refresh says so; the idle ones (several by now) say nothing
    assert len(re.findall(r"refresh_sweep\[[0-9a-f-]+\] succeeded in [0-9.]+s: 1\b", logs)) == 1
    assert re.findall(r"refresh_sweep\[[0-9a-f-]+\] (received|succeeded in [0-9.]+s: 0\b)", logs) == []
    row = read_connection(clone / "var" / "toolgate.sqlite3", stored["id"])  # the clone's database, not ours
    assert row["status"] == "active"
    assert row["refresh_failures"] == 0
    assert row["last_refresh_error"] == ""
    assert row["expires_at"] - row["refreshed_at"] == timedelta(seconds=provider.expires_in)
    assert row["encrypted_credentials"] != stored["encrypted_credentials"]
    for secret in (access, refresh, CLIENT_SECRET, *provider.refresh_calls):
        assert secret not in logs


def read_connection(database: Path, connection_id: str) -> dict:
    """The refresh columns of one connection, read straight from the SQLite file."""
    with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as conn:
        conn.row_factory = sqlite3.Row
        row = conn.execute(
            "SELECT status, expires_at, refreshed_at, refresh_failures, last_refresh_error, encrypted_credentials"
            " FROM connections_app_connection WHERE id = ?",
            [connection_id.replace("-", "")],
        ).fetchone()
    assert row is not None, f"no connection {connection_id} in {database}"
    values = dict(row)
    for name in ("expires_at", "refreshed_at"):
        values[name] = datetime.fromisoformat(values[name])
    values["encrypted_credentials"] = bytes(values["encrypted_credentials"]).hex()
    return values
