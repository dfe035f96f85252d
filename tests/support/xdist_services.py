"""Each pytest-xdist worker gets a Redis database of its own (loaded with `-p` by `make test`).

The suite flushes its Redis database around tests (the cache, the counters,
Celery's queues); two workers sharing one would wipe each other's state mid-test.
PostgreSQL needs nothing here: pytest-django gives each worker its own test
database (`test_toolgate_gw0`, ...). The governance push channel carries the
database number, so workers do not hear each other's pushes either.

Why a `-p` plugin and not conftest.py: pytest-django reads the settings (and
with them REDIS_URL) before any conftest is imported. xdist sets
PYTEST_XDIST_WORKER in the worker's environment before its configuration is
read, so rewriting REDIS_URL at import reaches the settings, the Celery
broker and every subprocess a test starts. In the controlling process, or
without xdist, it changes nothing.
"""

from __future__ import annotations

import os
import re

REDIS_DATABASES = 16  # Redis's default `databases`
_WORKER = re.compile(r"gw(\d+)")


def redis_url_for_worker(url: str, worker: str) -> str:
    """`url` with database (its own + 1 + the worker's number), modulo Redis's 16: gw0 of db 0 uses db 1."""
    number = _WORKER.fullmatch(worker)
    if not url or number is None:
        return url
    base, _, path = url.partition("://")
    host, _, database = path.partition("/")
    own = int(database.split("?", 1)[0] or 0)
    query = database.partition("?")[2]
    chosen = (own + 1 + int(number.group(1))) % REDIS_DATABASES
    return f"{base}://{host}/{chosen}" + (f"?{query}" if query else "")


if "PYTEST_XDIST_WORKER" in os.environ and os.environ.get("REDIS_URL"):
    os.environ["REDIS_URL"] = redis_url_for_worker(os.environ["REDIS_URL"], os.environ["PYTEST_XDIST_WORKER"])
