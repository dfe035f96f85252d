"""/metrics: refresh counters by provider and outcome, read from the audit trail every process writes."""

from __future__ import annotations

import pytest
from django.test import Client

from connections_app.models import ConnectionEvent
from tests.factories import ConnectionFactory

pytestmark = pytest.mark.django_db


def metric_lines(text: str) -> list[str]:
    return sorted(line for line in text.splitlines() if line.startswith("toolgate_oauth_refresh_total"))


def test_refresh_outcomes_are_counted_by_provider_and_outcome():
    connection = ConnectionFactory()
    for kind, detail in [
        ("refreshed", ""),
        ("refreshed", ""),
        ("refresh_failed", "timeout"),
        ("refresh_failed", "server_error"),
        ("refresh_failed", "timeout"),
        ("needs_reauth", "invalid_grant"),
        ("revoked", ""),  # not a refresh: not counted
    ]:
        ConnectionEvent.objects.create(
            tenant=connection.tenant, connection_id=connection.pk, provider="github", kind=kind, detail=detail
        )

    response = Client().get("/metrics")

    assert response.status_code == 200
    assert metric_lines(response.content.decode()) == [
        'toolgate_oauth_refresh_total{outcome="needs_reauth",provider="github"} 1.0',
        'toolgate_oauth_refresh_total{outcome="server_error",provider="github"} 1.0',
        'toolgate_oauth_refresh_total{outcome="success",provider="github"} 2.0',
        'toolgate_oauth_refresh_total{outcome="timeout",provider="github"} 2.0',
    ]


def test_no_refresh_yet_exports_the_family_without_samples():
    text = Client().get("/metrics").content.decode()

    assert "# TYPE toolgate_oauth_refresh_total counter" in text
    assert metric_lines(text) == []
