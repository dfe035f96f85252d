"""An operator's change applies on the very next call in every server process (PostgreSQL).

With Redis configured the change is pushed; a push that is lost is made up for
within MAX_STALENESS_S, when every process re-reads the generation anyway.

Two real `runserver` processes share the test database; each has warmed its
in-process governance cache before the change, and both must see the kill
switch and the policy edit on their next call.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from django.core.management import call_command
from django.db import connection
from django.db.models import F

from policies_app.governance import MAX_STALENESS_S
from policies_app.models import GovernanceState
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tools_app.models import Tool

# Two runservers start before each test (up to 90 s on a busy machine), within pytest-timeout's budget.
pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _database_url() -> str:
    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.fixture
def two_servers(postgres_required):
    env = {**os.environ, "DATABASE_URL": _database_url(), "DEBUG": "True"}
    ports = [_free_port(), _free_port()]
    processes = [
        subprocess.Popen(
            [sys.executable, "manage.py", "runserver", "--noreload", "--skip-checks", f"127.0.0.1:{port}"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for port in ports
    ]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    # A runserver starting beside two busy xdist workers can take well over 30 s here.
    deadline = time.monotonic() + 90
    try:
        for url in urls:
            while True:
                try:
                    if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(f"server {url} did not start")
                time.sleep(0.1)
        yield urls
    finally:  # a server that did not start is stopped too
        for process in processes:
            process.terminate()
            process.wait(timeout=10)


def _exec(url: str, key: str, call_id: str) -> httpx.Response:
    return httpx.post(
        f"{url}/api/v1/tools/exec",
        json={"tool_id": "core__get_current_time", "args": {}, "tool_call_id": call_id},
        headers={"Authorization": f"Bearer {key}"},
        timeout=10,
    )


@pytest.mark.django_db(transaction=True)
def test_kill_switch_and_policy_edit_reach_every_process_on_the_next_call(two_servers):
    # given: both processes have served a call, so their caches are warm
    call_command("sync_tools")
    tool = Tool.objects.get(pk="core__get_current_time")
    tool.is_enabled = True
    tool.save()
    account, key = service_account_with_key(TenantFactory(slug="procs"))
    policy = ToolPolicyFactory(tenant=account.tenant, allowed_tools=["core__get_current_time"])
    assert [_exec(url, key, f"warm-{i}").status_code for i, url in enumerate(two_servers)] == [200, 200]

    # when: the operator flips the kill switch
    tool.is_enabled = False
    tool.save()
    killed = [_exec(url, key, f"killed-{i}") for i, url in enumerate(two_servers)]

    # and then re-enables it but removes the tool from the policy
    tool.is_enabled = True
    tool.save()
    policy.allowed_tools = ["core__wait"]
    policy.save()
    narrowed = [_exec(url, key, f"narrowed-{i}") for i, url in enumerate(two_servers)]

    # then
    assert [(r.status_code, r.json()["error_code"]) for r in killed] == [(403, "policy_denied")] * 2
    assert [(r.status_code, r.json()["error_code"]) for r in narrowed] == [(403, "policy_denied")] * 2
    assert {r.json()["safe_message"] for r in killed} == {"tool is disabled"}


@pytest.mark.django_db(transaction=True)
def test_a_change_whose_push_is_lost_still_reaches_every_process_within_a_second(two_servers):
    # given: warm processes
    call_command("sync_tools")
    Tool.objects.filter(pk="core__get_current_time").update(is_enabled=True)
    GovernanceState.objects.update(generation=F("generation") + 1)
    account, key = service_account_with_key(TenantFactory(slug="lost"))
    ToolPolicyFactory(tenant=account.tenant, allowed_tools=["core__get_current_time"])
    assert [_exec(url, key, f"warm-{i}").status_code for i, url in enumerate(two_servers)] == [200, 200]

    # when: the kill switch is flipped and the generation bumped by bare UPDATEs (nothing is published)
    Tool.objects.filter(pk="core__get_current_time").update(is_enabled=False)
    GovernanceState.objects.update(generation=F("generation") + 1)
    changed_at = time.monotonic()

    # then: each process refuses within the staleness bound
    # (timed from when each call was sent, not answered: a loaded machine's answer time is not staleness)
    seen_after = []
    for index, url in enumerate(two_servers):
        attempt = 0
        last_allowed = changed_at
        while True:
            sent = time.monotonic()
            if _exec(url, key, f"poll-{index}-{attempt}").status_code != 200:
                break
            last_allowed = sent
            attempt += 1
            assert sent - changed_at < MAX_STALENESS_S + 1.0, f"{url} still allows the tool"
            time.sleep(0.05)
        seen_after.append(last_allowed - changed_at)
    assert max(seen_after) < MAX_STALENESS_S + 1.0
