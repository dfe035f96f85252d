"""The PostgreSQL backend's health check: no round trip for a healthy connection, a new one for a dead one."""

from __future__ import annotations

import time

import psycopg
import pytest
from django.db import connection, connections

from config.postgresql.base import DatabaseWrapper

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("postgres_required")]


@pytest.fixture
def pings(monkeypatch):
    """Every `SELECT 1` Django's own health check sends."""
    sent = []
    real = DatabaseWrapper.is_usable

    def counting(self):
        sent.append(self.alias)
        return real(self)

    monkeypatch.setattr(DatabaseWrapper, "is_usable", counting)
    return sent


def _next_request() -> None:
    """What Django does between two requests on a persistent connection."""
    connection.close_if_unusable_or_obsolete()


def _backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def test_the_backend_is_in_use():
    assert isinstance(connections["default"], DatabaseWrapper)
    assert connection.settings_dict["CONN_HEALTH_CHECKS"] is True


def test_a_healthy_reused_connection_is_used_without_a_ping(pings):
    # given: a connection that served a request
    pid = _backend_pid()

    # when: the next request queries
    _next_request()
    again = _backend_pid()

    # then
    assert again == pid
    assert pings == []


def test_a_connection_the_server_closed_is_replaced_before_the_request_uses_it(pings):
    # given: a connection that served a request, then was ended by the server
    pid = _backend_pid()
    params = {k: v for k, v in connection.get_connection_params().items() if k not in {"cursor_factory", "context"}}
    with psycopg.connect(**params, autocommit=True) as admin, admin.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    deadline = time.monotonic() + 5
    while connection._quiet() and time.monotonic() < deadline:
        time.sleep(0.01)  # the server's goodbye reaches the socket

    # when: the next request queries
    _next_request()
    replacement = _backend_pid()

    # then: Django's check ran, found it dead, and the query went over a new connection
    assert pings == ["default"]
    assert replacement != pid
