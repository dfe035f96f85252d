"""Beat runs one discovery task per server at the server's own interval."""

from __future__ import annotations

import json

import pytest
from django_celery_beat.models import PeriodicTask

from gateway.models import McpServer, McpTool
from gateway.upstream.services import DISCOVER_TASK, mcp_server_register, mcp_server_remove
from gateway.upstream.tasks import discover_server

pytestmark = pytest.mark.django_db


def test_registering_a_server_schedules_its_discovery_at_its_interval(allow_private, legacy_upstream):
    server, _ = mcp_server_register(slug="acme", url=legacy_upstream.url, discover_seconds=90)

    entry = PeriodicTask.objects.get(name="mcp-discover:acme")
    assert (entry.task, json.loads(entry.args), entry.enabled) == (DISCOVER_TASK, [server.pk], True)
    assert (entry.interval.every, entry.interval.period) == (90, "seconds")

    mcp_server_register(slug="acme", url=legacy_upstream.url, discover_seconds=600)
    assert PeriodicTask.objects.get(name="mcp-discover:acme").interval.every == 600
    assert PeriodicTask.objects.filter(name__startswith="mcp-discover:").count() == 1

    mcp_server_remove(slug="acme")
    assert not PeriodicTask.objects.filter(name="mcp-discover:acme").exists()


def test_the_task_discovers_the_server_and_records_a_failure_without_raising(allow_private, legacy_upstream):
    server, _ = mcp_server_register(slug="acme", url=legacy_upstream.url)

    summary = discover_server.apply(args=[server.pk]).get()

    assert summary.startswith("acme: ok (2025-11-25): 5 new")
    assert McpTool.objects.filter(server=server).count() == 5
    legacy_upstream.stop()
    assert discover_server.apply(args=[server.pk]).get() == "failed: the upstream cannot be reached"
    server.refresh_from_db()
    assert server.last_discovery_status == McpServer.DiscoveryStatus.FAILED


def test_the_task_skips_a_removed_server(allow_private, legacy_upstream):
    server, _ = mcp_server_register(slug="acme", url=legacy_upstream.url)
    mcp_server_remove(slug="acme")

    assert discover_server.apply(args=[server.pk]).get() == "skipped: no such enabled server"
    assert legacy_upstream.requests == []
