"""No answered call lacks its audit row, even when its worker is killed mid-flight.

The audit row is sent ahead of the answer and awaited before it leaves
(config/postgresql's `write_ahead`, config.middleware.answer_after_durable_writes).
A real gunicorn on PostgreSQL serves exec calls to four clients at once; its
worker is killed with SIGKILL, by surprise, while calls are in flight, and the
master starts another. Every call answered 200, before or after the kill,
names a tool_call_id whose row is committed and executed; calls cut by the
kill get no answer and may or may not have a row, which is the audit's
promise (a row for every answer, never an answer without its row).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
from django.db import connection

from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import enable_tools
from tests.support.gunicorn import free_port, start_gunicorn
from tools_app.models import ToolInvocation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("postgres_required")]

CLIENTS = 4
ANSWERS_BEFORE_THE_KILL = 60
ANSWERS_AFTER_THE_KILL = 60


def _workers(master: int) -> list[int]:
    children = Path(f"/proc/{master}/task/{master}/children")
    return [int(pid) for pid in children.read_text().split()] if children.exists() else []


def _database_url() -> str:
    settings = connection.settings_dict
    return f"postgres://{settings['USER']}@{settings['HOST']}:{settings['PORT']}/{settings['NAME']}"


class _Calls:
    """Clients calling exec in a loop: the ids answered 200, and how many calls got no answer."""

    def __init__(self, url: str, key: str) -> None:
        self.url, self.key = url, key
        self.answered: list[str] = []
        self.cut = 0
        self.refused: list[int] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        with httpx.Client(headers={"Authorization": f"Bearer {self.key}"}, timeout=30) as client:
            while not self.stop.is_set():
                try:
                    response = client.post(f"{self.url}/api/v1/tools/exec", json={"tool_id": "core__get_current_time"})
                except httpx.TransportError:
                    with self.lock:
                        self.cut += 1
                    time.sleep(0.05)
                    continue
                with self.lock:
                    if response.status_code == 200:
                        self.answered.append(response.json()["tool_call_id"])
                    else:
                        self.refused.append(response.status_code)

    def wait_for(self, answers: int, deadline_s: float = 120) -> None:
        deadline = time.monotonic() + deadline_s
        while len(self.answered) < answers:
            if time.monotonic() > deadline:
                pytest.fail(f"only {len(self.answered)} of {answers} calls were answered in {deadline_s:g} s")
            time.sleep(0.02)


def test_every_answered_call_has_its_row_after_its_worker_is_killed():
    enable_tools("core__get_current_time")
    tenant = TenantFactory(slug="killed")
    _account, key = service_account_with_key(tenant)
    ToolPolicyFactory(tenant=tenant, allowed_tools=["core__get_current_time"])
    port = free_port()
    env = {**os.environ, "DEBUG": "True", "DATABASE_URL": _database_url(), "REDIS_URL": ""}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    server = start_gunicorn("config.wsgi:application", port=port, env=env, options=("--workers", "1"))
    calls = _Calls(f"http://127.0.0.1:{port}", key)
    clients = [threading.Thread(target=calls.run) for _ in range(CLIENTS)]
    try:
        for client in clients:
            client.start()
        calls.wait_for(ANSWERS_BEFORE_THE_KILL)
        (worker,) = _workers(server.pid)
        os.kill(worker, signal.SIGKILL)
        answered_at_the_kill = len(calls.answered)
        calls.wait_for(answered_at_the_kill + ANSWERS_AFTER_THE_KILL)
        serving = _workers(server.pid)
    finally:
        calls.stop.set()
        for client in clients:
            client.join(timeout=60)
        server.terminate()
        server.wait(timeout=30)

    rows = set(
        ToolInvocation.objects.filter(tool_id="core__get_current_time", ok=True, executed=True).values_list(
            "tool_call_id", flat=True
        )
    )
    missing = set(calls.answered) - rows
    assert not missing, f"{len(missing)} answered calls have no row ({calls.cut} calls were cut by the kill)"
    assert len(rows) >= len(calls.answered)
    assert calls.refused == []
    assert serving  # the calls after the kill were the new worker's
    assert worker not in serving
