"""Suite-wide fixtures and the services switch.

The suite runs on the embedded default (SQLite, no Redis) or on the real
services named by DATABASE_URL / REDIS_URL. With REQUIRE_SERVICES=1 (CI), a
service that is not configured or not reachable fails the run instead of
letting its tests skip.
"""

from __future__ import annotations

import os
from pathlib import Path

import hypothesis
import pytest
from django.core.cache import cache
from django.db import connection

from policies_app.counters import counters
from policies_app.fairness import allowances as fairness_allowances
from policies_app.governance import governance_cache
from tests.support import postgres_for_tests

REQUIRE_SERVICES = os.environ.get("REQUIRE_SERVICES") == "1"

postgres_for_tests.install()  # flush by DELETE, commits not waited to disk: the module says why

# Hypothesis judges what a property holds, not how fast an example ran: on a shared two-core machine
# a database example can take 250 ms, and a deadline would fail the run for the machine's load.
hypothesis.settings.register_profile("toolgate", deadline=None)
hypothesis.settings.load_profile("toolgate")


INTEGRATION_DIR = Path(__file__).resolve().parent / "integration"
E2E_DIR = Path(__file__).resolve().parent / "e2e"
# Transactional for their live servers and threads, but what they test is the wire and the processes:
# the browser tests, tests/integration (processes on the services they need, or on an embedded default
# they configure themselves), and the upstream tests (MCP servers and the stdio host, which keeps no rows).
GATEWAY_TESTS = Path(__file__).resolve().parent / "gateway"
# (the outbound guard's own tests, tests/core/test_netguard.py, came from the upstream tests with it)
ENGINE_NEUTRAL_DIRS = (
    E2E_DIR,
    INTEGRATION_DIR,
    GATEWAY_TESTS / "upstream",
    GATEWAY_TESTS / "host",
    Path(__file__).resolve().parent / "core" / "test_netguard.py",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--engine-sensitive",
        action="store_true",
        help="run only the tests whose outcome can depend on the database engine of the run: the transactional "
        "tests (several connections to the test database: threads, live servers), not the browser tests",
    )


def _engine_sensitive(item: pytest.Item) -> bool:
    """Whether `item` can pass on one engine and fail on another (CI runs these on SQLite too).

    A test in one transaction on one connection sees the same database behaviour on both engines;
    what differs (locking, concurrent writers, what another thread sees) needs commits.
    ENGINE_NEUTRAL_DIRS commit too, but what they test does not depend on the run's database.
    """
    path = Path(item.path)
    if any(path.is_relative_to(folder) for folder in ENGINE_NEUTRAL_DIRS):
        return False
    marker = item.get_closest_marker("django_db")
    return bool(marker is not None and marker.kwargs.get("transaction")) or "transactional_db" in getattr(
        item, "fixturenames", ()
    )


# Folders whose files hold the suite's longest tests (live servers, subprocesses, installs), handed out first:
# `--dist loadfile` gives files to workers in collection order, and a long file taken last keeps the
# whole run waiting on one worker. The browser tests stay last (see the Makefile's test target).
FIRST_FOLDERS = ("tests/integration/", "tests/gateway/upstream/", "tests/gateway/host/", "tests/config/")
LAST_FOLDERS = ("tests/e2e/",)


def _turn(item: pytest.Item) -> int:
    path = item.nodeid
    if path.startswith(LAST_FOLDERS):
        return len(FIRST_FOLDERS) + 1
    return next((turn for turn, folder in enumerate(FIRST_FOLDERS) if path.startswith(folder)), len(FIRST_FOLDERS))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_turn)  # stable: each file keeps its own order, and its tests stay together
    if not config.getoption("engine_sensitive"):
        return
    selected = [item for item in items if _engine_sensitive(item)]
    config.hook.pytest_deselected(items=[item for item in items if not _engine_sensitive(item)])
    items[:] = selected


def pytest_sessionstart(session: pytest.Session) -> None:
    if not REQUIRE_SERVICES:
        return
    missing = [name for name in ("DATABASE_URL", "REDIS_URL") if not os.environ.get(name)]
    if missing:
        pytest.exit(f"REQUIRE_SERVICES=1 but {', '.join(missing)} is not set", returncode=3)
    if not os.environ["DATABASE_URL"].startswith(("postgres://", "postgresql://")):
        pytest.exit("REQUIRE_SERVICES=1 expects DATABASE_URL to point at PostgreSQL", returncode=3)


def _service_missing(name: str) -> None:
    message = f"{name} is not configured"
    if REQUIRE_SERVICES:
        pytest.fail(f"{message} (REQUIRE_SERVICES=1)")
    pytest.skip(message)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's test databases; at the end, the run's last worker drops the template they were cloned from."""
    yield
    with django_db_blocker.unblock():
        postgres_for_tests.drop_template_if_last(connection)


@pytest.fixture
def redis_url() -> str:
    """The Redis the suite may use; skips (or fails under REQUIRE_SERVICES) without one."""
    url = os.environ.get("REDIS_URL", "")
    if not url:
        _service_missing("REDIS_URL")
    return url


@pytest.fixture
def postgres_required(settings) -> None:
    """For tests that only mean something on PostgreSQL (row locks, concurrency)."""
    if connection.vendor != "postgresql":
        _service_missing("DATABASE_URL (PostgreSQL)")


@pytest.fixture
def commits_refused(postgres_required):
    """PostgreSQL refuses every commit that wrote a tool call's claim, as a shutting-down server would.

    A deferred constraint trigger: the INSERT itself succeeds, the commit fails, after the view built
    its answer. (The durability tests of exec over REST and of tools/call over MCP.)
    """
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION refuse_the_commit() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'the server is shutting down' USING ERRCODE = '57P01'; END $$"
        )
        cursor.execute(
            "CREATE CONSTRAINT TRIGGER refuse_the_commit AFTER INSERT ON tools_app_toolcallclaim "
            "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_the_commit()"
        )
    yield
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER refuse_the_commit ON tools_app_toolcallclaim")
        cursor.execute("DROP FUNCTION refuse_the_commit()")


@pytest.fixture(autouse=True)
def _fresh_governance_cache():
    """Each test's database rolls back, so a later test can reach the same generation
    number with other rows: never let the in-process cache carry entries across tests."""
    governance_cache.clear()
    cache.clear()
    counters().clear()  # rate windows, fairness and concurrency slots
    fairness_allowances.clear()  # and this process's leased share of the fairness windows
    yield
    governance_cache.clear()


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """PBKDF2's deliberate slowness buys nothing in tests (users are created per test)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
