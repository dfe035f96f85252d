"""Django's PostgreSQL backend with a per-request health check that costs no round trip,
and a cursor whose statements PostgreSQL prepares (`prepared_cursor`, for the audit row).

Django's CONN_HEALTH_CHECKS sends `SELECT 1` before the first query of every
request on a reused connection: on the exec hot path that is a round trip
beside the call's one durable write. A connection the server has closed (a
restart, `idle_session_timeout`, `pg_terminate_backend`) has something to read,
the server's FATAL message and the end of the stream, while an idle healthy
connection has nothing. So the check asks the kernel, without waiting, whether
the socket is readable; only a readable socket, or a connection not idle at
the protocol level, gets Django's real `SELECT 1`, and a dead connection is
replaced before the request uses it, as Django's own check would. After an
error Django still decides with `SELECT 1` (`is_usable` is unchanged).

Its connections also never wait on a silent server for long (`AnsweringConnection`).
"""

from __future__ import annotations

import select
import socket
import struct
from typing import Any

import psycopg
from django.conf import settings
from django.db.backends.postgresql import base, operations
from django.db.backends.postgresql.psycopg_any import errors, register_tzloader
from django.db.backends.utils import CursorWrapper
from psycopg.pq import Format, TransactionStatus


class AnsweringConnection(psycopg.Connection):
    """A psycopg connection that gives up on a server that stopped answering, within about a second.

    Why: a server that is frozen (stopped, swapped out, a hung host) still has a
    kernel that accepts and acknowledges our bytes, so neither `connect_timeout`
    (the connection is already open) nor TCP keepalives nor the server's own
    `statement_timeout` end the wait: every request would hang for the whole
    freeze. So each wait on the server is cut into slices of
    TOOLGATE_DATABASE_ANSWER_TIMEOUT_MS; when a slice passes in silence, a fresh
    connection attempt (bounded by the same timeout) asks whether the server
    still answers at all. A server that answers is busy with a long
    statement and is waited for; one that does not is given up: the connection
    is closed (its state is unknown) and OperationalError is raised, which the
    API answers as 503 `unavailable_dependency` with Retry-After.
    """

    def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        if timeout is not None:  # psycopg's own bounded waits (notifies, cancellation)
            return super().wait(gen, interval=interval, timeout=timeout)
        slice_s = settings.TOOLGATE_DATABASE_ANSWER_TIMEOUT_MS / 1000
        if slice_s <= 0:
            return super().wait(gen, interval=interval)
        while True:
            try:
                return super().wait(gen, interval=interval, timeout=slice_s)
            except psycopg.errors._WaitTimeout:  # psycopg's signal for a bounded wait that ran out
                if self._server_answers(slice_s):
                    continue
                self.pgconn.finish()
                raise psycopg.OperationalError(
                    f"the database server did not answer within {slice_s:g} s (it may be frozen or cut off)"
                ) from None

    def _server_answers(self, timeout_s: float) -> bool:
        """Whether the server's postmaster still answers a fresh connection (nothing logs in).

        It is sent an SSLRequest, which every PostgreSQL answers at once with one
        byte ("S" or "N") before any authentication. Plain sockets, so the wait
        releases the GIL (libpq's PQping, through psycopg, holds it: every other
        thread of the worker would stop with this one).
        """
        info = self.info
        try:
            if info.host.startswith("/"):
                probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                probe.settimeout(timeout_s)
                probe.connect(f"{info.host}/.s.PGSQL.{info.port}")
            else:
                probe = socket.create_connection((info.host, info.port), timeout=timeout_s)
            with probe:
                probe.sendall(_SSL_REQUEST)
                return probe.recv(1) in (b"S", b"N")
        except OSError:
            return False


# The protocol's SSLRequest: length 8, code 80877103.
_SSL_REQUEST = struct.pack("!ii", 8, 80877103)


class _Driver:
    """psycopg as Django's backend uses it (`DatabaseWrapper.Database`), its connections `AnsweringConnection`s."""

    connect = AnsweringConnection.connect

    def __getattr__(self, name: str) -> Any:
        return getattr(psycopg, name)


class DatabaseOperations(operations.DatabaseOperations):
    def last_executed_query(self, cursor, sql, params):
        """A prepared cursor's statement as Django logs its own (DEBUG, tests' query captures): with its values."""
        if isinstance(cursor, base.ServerBindingCursor):
            try:
                return self.compose_sql(sql, params)
            except errors.DataError:
                return None
        return super().last_executed_query(cursor, sql, params)


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
    Database = _Driver()

    def close_if_health_check_failed(self) -> None:
        if self.connection is not None and self.health_check_enabled and not self.health_check_done and self._quiet():
            self.health_check_done = True
            return
        super().close_if_health_check_failed()

    def _quiet(self) -> bool:
        """Idle, and nothing from the server waiting on the socket: nothing to check."""
        connection = self.connection
        if connection.closed or connection.broken or connection.info.transaction_status != TransactionStatus.IDLE:
            return False
        poller = select.poll()
        try:
            poller.register(connection.fileno(), select.POLLIN)
            return not poller.poll(0)
        except (OSError, ValueError):
            return False

    def prepared_cursor(self) -> CursorWrapper:
        """A cursor that binds its parameters on the server, its statements prepared on the connection.

        Why: Django's default (client-side binding) quotes every parameter into
        the SQL text in Python, and PostgreSQL parses and plans that text again
        on every call. The audit INSERT, the one durable write of every tool
        call, runs with the same text each time: bound on the server, psycopg
        prepares it at its first run on a connection (settings: Django turns
        psycopg's preparing off, for poolers; Toolgate sets `prepare_threshold`
        0, which only statements bound on the server use), and each later run
        sends only the values. Measured on the statement:
        about 40 µs less client CPU, 60 µs less server CPU and 120 µs less wall
        time per row. Prepared statements live on the database connection: behind
        PgBouncer this needs session pooling, or PgBouncer ≥ 1.21 with
        `max_prepared_statements`, or TOOLGATE_DATABASE_PREPARED_STATEMENTS=false.

        The cursor is Django's own wrapper (execute wrappers, query logging and
        error translation apply), only the psycopg cursor class differs.
        """
        self.close_if_health_check_failed()
        self.ensure_connection()
        with self.wrap_database_errors:
            cursor = base.ServerBindingCursor(self.connection)
            # as Django's create_cursor: timestamps read in the connection's time zone
            if self.timezone != self.connection.adapters.get_loader(base.TIMESTAMPTZ_OID, Format.TEXT).timezone:
                register_tzloader(self.timezone, cursor)
            return self._prepare_cursor(cursor)
