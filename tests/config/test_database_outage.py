"""A PostgreSQL server that freezes mid-connection: 503 within about a second, not a request hung for the freeze.

The server is frozen through a relay (tests/support/tcp_relay.py) rather than with
SIGSTOP: the client sees the same thing (connections accepted, bytes taken, no
answer), and only this test's connections freeze, not the machine's shared server.
"""

from __future__ import annotations

import time

import pytest
from django.db import OperationalError, connection

from config.postgresql.base import DatabaseWrapper
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import api_client, enable_tools
from tests.support.tcp_relay import TcpRelay

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("postgres_required")]


@pytest.fixture
def relay():
    with TcpRelay(connection.settings_dict["HOST"] or "127.0.0.1", int(connection.settings_dict["PORT"] or 5432)) as r:
        yield r


@pytest.fixture
def through_relay(relay):
    """The test's default connection, reopened through the relay (and put back afterwards)."""
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update(HOST="127.0.0.1", PORT=str(relay.port))
    try:
        yield relay
    finally:
        relay.thaw()
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


def exec_call(key: str):
    return api_client(key).post("/api/v1/tools/exec", {"tool_id": "core__get_current_time", "args": {}}, format="json")


def _wrapper_through(relay: TcpRelay) -> DatabaseWrapper:
    return DatabaseWrapper({**connection.settings_dict, "HOST": "127.0.0.1", "PORT": str(relay.port)}, alias="relay")


def test_a_query_on_a_frozen_server_fails_within_about_a_second(relay):
    wrapper = _wrapper_through(relay)
    with wrapper.cursor() as cursor:  # an open, healthy connection, as a worker keeps one
        cursor.execute("SELECT 1")
    relay.freeze()

    started = time.monotonic()
    with pytest.raises(OperationalError, match="did not answer within 1 s"), wrapper.cursor() as cursor:
        cursor.execute("SELECT 1")
    waited = time.monotonic() - started

    assert 1.0 <= waited < 4.0  # one silent second, then libpq's ping gives up on the server
    assert wrapper.connection.closed  # never reused: its protocol state is unknown
    wrapper.close()


def test_a_slow_statement_on_a_live_server_is_waited_for(relay):
    wrapper = _wrapper_through(relay)
    with wrapper.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(2.5), 42")
        assert cursor.fetchone()[1] == 42
    wrapper.close()


def test_an_api_call_on_a_frozen_database_answers_503_with_retry_after(through_relay):
    tenant = TenantFactory(slug="acme")
    _account, key = service_account_with_key(tenant, name="agent")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["core__get_current_time"])
    enable_tools("core__get_current_time")
    assert exec_call(key).status_code == 200
    through_relay.freeze()

    started = time.monotonic()
    response = exec_call(key)  # its audit row needs the database
    waited = time.monotonic() - started

    assert response.status_code == 503
    assert response.json()["error_code"] == "unavailable_dependency"
    assert response["Retry-After"].isdigit()
    assert waited < 4.0
