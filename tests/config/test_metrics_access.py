"""Who may read /metrics (docs/configuration.md): a bearer of TOOLGATE_METRICS_TOKEN, else loopback only."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

TOKEN = "metrics-token-3f9a1c"


def scrape(remote_addr: str = "127.0.0.1", **headers: str):
    return Client(REMOTE_ADDR=remote_addr).get("/metrics", **headers)


def is_the_metrics_page(response) -> bool:
    return response.status_code == 200 and b"# TYPE toolgate_oauth_refresh_total counter" in response.content


@pytest.mark.parametrize("remote_addr", ["127.0.0.1", "::1"])
def test_without_a_token_loopback_reads_the_metrics(settings, remote_addr):
    settings.TOOLGATE_METRICS_TOKEN = ""

    assert is_the_metrics_page(scrape(remote_addr))


@pytest.mark.parametrize(
    ("remote_addr", "headers"),
    [
        ("203.0.113.7", {}),
        ("10.0.0.5", {}),
        ("127.0.0.2", {}),
        ("127.0.0.1", {"HTTP_X_FORWARDED_FOR": "203.0.113.7"}),  # a proxy on this machine forwarded it
        ("127.0.0.1", {"HTTP_X_REAL_IP": "203.0.113.7"}),
        ("127.0.0.1", {"HTTP_FORWARDED": "for=203.0.113.7"}),
    ],
)
def test_without_a_token_anything_but_loopback_is_refused(settings, remote_addr, headers):
    # /metrics was public
    settings.TOOLGATE_METRICS_TOKEN = ""

    response = scrape(remote_addr, **headers)

    assert response.status_code == 403
    assert response.json() == {
        "error_code": "forbidden",
        "safe_message": "metrics answer only on loopback; "
        "set TOOLGATE_METRICS_TOKEN to let a scraper elsewhere read them",
    }
    assert b"toolgate_" not in response.content


@pytest.mark.parametrize("scheme", ["Bearer", "bearer"])
def test_with_a_token_its_bearer_reads_the_metrics_from_anywhere(settings, scheme):
    settings.TOOLGATE_METRICS_TOKEN = TOKEN

    assert is_the_metrics_page(scrape("203.0.113.7", HTTP_AUTHORIZATION=f"{scheme} {TOKEN}"))


@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", f"Basic {TOKEN}", f"Bearer  {TOKEN}", "Bearer é"],
)
def test_with_a_token_anything_else_is_refused_even_on_loopback(settings, authorization):
    settings.TOOLGATE_METRICS_TOKEN = TOKEN
    headers = {} if authorization is None else {"HTTP_AUTHORIZATION": authorization}

    response = scrape("127.0.0.1", **headers)

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"
    assert response.json() == {
        "error_code": "unauthenticated",
        "safe_message": "send Authorization: Bearer <TOOLGATE_METRICS_TOKEN> to read the metrics",
    }
    assert TOKEN not in response.content.decode()
