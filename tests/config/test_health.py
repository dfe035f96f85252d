"""/healthz (process up, touches nothing) and /readyz (database and, when configured, Redis)."""

from __future__ import annotations

import pytest
from django.db import OperationalError

from config import health

UNREACHABLE_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1: connection refused


def test_healthz_answers_ok_without_touching_the_database(client):
    # no django_db mark: any query would fail this test
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert "no-cache" in response["Cache-Control"]


@pytest.mark.django_db
def test_readyz_checks_the_database(client, settings, django_assert_num_queries):
    settings.REDIS_URL = ""

    with django_assert_num_queries(1):
        response = client.get("/readyz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "checks": {"database": "ok"}}


@pytest.mark.django_db
def test_readyz_answers_503_naming_an_unreachable_redis(client, settings, caplog):
    settings.REDIS_URL = UNREACHABLE_REDIS
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": UNREACHABLE_REDIS}
    }

    response = client.get("/readyz")

    assert response.status_code == 503
    assert response.json() == {"status": "unavailable", "checks": {"database": "ok", "redis": "failed"}}
    assert "127.0.0.1" not in response.content.decode()
    assert "readiness check redis failed: ConnectionError" in caplog.text


def test_readyz_answers_503_naming_an_unreachable_database(client, settings, monkeypatch):
    settings.REDIS_URL = ""

    class UnreachableDatabase:
        def cursor(self):
            raise OperationalError("could not connect to server at db.internal:5432 (password=hunter2)")

    monkeypatch.setattr(health, "connection", UnreachableDatabase())

    response = client.get("/readyz")

    assert response.status_code == 503
    assert response.json() == {"status": "unavailable", "checks": {"database": "failed"}}
    assert "hunter2" not in response.content.decode()


@pytest.mark.django_db
def test_readyz_with_a_real_redis(client, settings, redis_url):
    settings.REDIS_URL = redis_url
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": redis_url}}

    response = client.get("/readyz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "checks": {"database": "ok", "redis": "ok"}}


def test_health_probes_refuse_writes(client):
    assert client.post("/healthz").status_code == 405
