"""The configured services are the ones in use (CI runs these against PostgreSQL and Redis)."""

from __future__ import annotations

import os
import uuid

import pytest
from django.core.cache import cache
from django.db import connection


@pytest.mark.django_db
def test_database_is_the_configured_engine():
    expected = "postgresql" if os.environ.get("DATABASE_URL", "").startswith("postgres") else "sqlite"

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)
    assert connection.vendor == expected


def test_cache_round_trips_through_redis_when_configured(redis_url, settings):
    key = f"toolgate-test-{uuid.uuid4().hex}"

    cache.set(key, {"n": 1}, timeout=5)

    assert settings.CACHES["default"]["BACKEND"] == "django.core.cache.backends.redis.RedisCache"
    assert cache.get(key) == {"n": 1}
    cache.delete(key)
