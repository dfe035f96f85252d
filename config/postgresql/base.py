"""Django's PostgreSQL backend with a per-request health check that costs no round trip,
and the audit's statements prepared on the connection, its row's INSERT sent ahead
of the answer (`execute_prepared`, `write_ahead`).

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

import logging
import select
import socket
import struct
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

import psycopg
from django.conf import settings
from django.db.backends.postgresql import base
from django.db.backends.postgresql.psycopg_any import errors
from psycopg import generators
from psycopg.adapt import PyFormat, Transformer
from psycopg.pq import ExecStatus, TransactionStatus

logger = logging.getLogger("django.db.backends")


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


class DatabaseWrapper(base.DatabaseWrapper):
    Database = _Driver()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ahead: tuple[str, Sequence[Any]] | None = None  # the write sent ahead whose result is not read yet
        self._ahead_scopes = 0  # open `writes_awaited_at_exit` scopes
        self._statements: dict[str, bytes] = {}  # SQL → its prepared name, on the current connection

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

    # --- the audit's statements: prepared, and the row's INSERT sent ahead of the answer -------

    def write_ahead(self, sql: str, params: Sequence[Any]) -> None:
        """Send a write whose result nobody reads; inside `writes_awaited_at_exit`, return before it is done.

        Why: the audit row is the one durable write of every call, and its
        round trip (the INSERT, then the commit's WAL flush: about 340 µs on
        loopback, 90 µs of it the client's CPU) is most of a warm exec's wait.
        The answer must not leave before the row is committed, but nothing says
        the rest of the answer's work must wait too. So the statement goes out
        at once, as one Bind/Execute/Sync (in autocommit it commits at the
        Sync), and while PostgreSQL inserts and flushes, the worker builds and
        renders the answer; the scope's exit (the API's middleware, just before
        the answer leaves) reads the result, and a failed write turns the
        answer into an error. Outside a scope the result is read at once.
        Measured on one statement with 300 µs of work between the send and
        the wait: 350 µs of wall time against 700 awaited in place.

        Nothing can run on the connection in between: every use of it (a
        cursor, a commit, a health check, autocommit) reads the pending result
        first (`await_writes`), so the protocol never sees two commands at once
        and an error is never lost.
        """
        self._run(sql, params, self._send_ahead)
        if not self._ahead_scopes:
            self.await_writes()

    def execute_prepared(self, sql: str, params: Sequence[Any]) -> list[tuple[str | None, ...]]:
        """Run a prepared statement now; its rows, each value as PostgreSQL's text (None for NULL)."""
        return self._run(sql, params, self._execute_now)

    def _run(self, sql: str, params: Sequence[Any], executor: Callable[..., Any]) -> Any:
        """Through the execute wrappers (their context has no cursor) and Django's query log, as a cursor's statement.

        The statements are sent with libpq's own calls (psycopg.pq), each
        prepared on the connection at its first use, its values dumped by
        psycopg's Transformer as text (PostgreSQL infers each parameter's type
        from the statement): the statement's text is parsed and planned once
        per connection, and each call sends only its values. Beside psycopg's
        own cursor this costs 46–60 µs of client CPU against 90–100. They are
        Toolgate's names, not psycopg's: psycopg drops every prepared statement
        on the connection (DEALLOCATE ALL) after a rollback when it has
        prepared one of its own, so Toolgate lets it prepare none. Prepared
        statements live on the database connection: behind PgBouncer this
        needs session pooling, or PgBouncer ≥ 1.21 with `max_prepared_statements`,
        or TOOLGATE_DATABASE_PREPARED_STATEMENTS=false (then each statement
        is sent unnamed). `sql` takes `%s` placeholders and no other `%`.
        """
        if sql.count("%") != sql.count("%s"):
            raise ValueError("a prepared statement takes %s placeholders and no other %")
        for wrapper in reversed(self.execute_wrappers):
            executor = partial(wrapper, executor)
        started = time.monotonic()
        try:
            return executor(sql, params, False, {"connection": self, "cursor": None})
        finally:
            if self.queries_logged:
                self._log_statement(sql, params, time.monotonic() - started)

    def _send_ahead(self, sql: str, params: Sequence[Any], many: bool, context: dict[str, Any]) -> None:
        self._send(sql, params)
        self._ahead = (sql, params)

    def _execute_now(self, sql: str, params: Sequence[Any], many: bool, context: dict[str, Any]) -> Any:
        self._send(sql, params)
        result = self._result(sql, params)
        return [
            tuple(
                None if value is None else value.decode()
                for value in (result.get_value(row, column) for column in range(result.nfields))
            )
            for row in range(result.ntuples)
        ]

    def _send(self, sql: str, params: Sequence[Any]) -> None:
        self.await_writes()
        self.close_if_health_check_failed()
        self.ensure_connection()
        with self.wrap_database_errors:
            connection = self.connection
            values = Transformer(connection).dump_sequence(params, [PyFormat.TEXT] * len(params))
            if connection.prepare_threshold is None:  # TOOLGATE_DATABASE_PREPARED_STATEMENTS=false
                connection.pgconn.send_query_params(_numbered(sql), values)
            else:
                connection.pgconn.send_query_prepared(self._statement_name(sql), values)
            connection.wait(generators.send(connection.pgconn))

    def _result(self, sql: str, params: Sequence[Any], *, again: bool = True) -> Any:
        """The statement's one result, or its error; a statement the connection lost is prepared and sent again.

        Only `DEALLOCATE ALL` or `DISCARD ALL` run by hand on this connection
        lose one (psycopg prepares none of its own here). Outside a transaction
        nothing ran, so sending it again is safe; inside one, the transaction
        has failed and the error stands.
        """
        with self.wrap_database_errors:
            connection = self.connection
            results = connection.wait(generators.fetch_many(connection.pgconn))
            error = _error_of(connection, results)
            if error is None:
                return results[0]
            lost = isinstance(error, psycopg.errors.InvalidSqlStatementName)
            if not (lost and again) or self.in_atomic_block:
                raise error
        self._statements.clear()
        self._send(sql, params)
        return self._result(sql, params, again=False)

    def _statement_name(self, sql: str) -> bytes:
        """The statement's name on this connection, prepared at its first use."""
        name = self._statements.get(sql)
        if name is None:
            connection = self.connection
            name = f"toolgate_{len(self._statements)}".encode()
            connection.pgconn.send_prepare(name, _numbered(sql))
            connection.wait(generators.send(connection.pgconn))
            error = _error_of(connection, connection.wait(generators.fetch_many(connection.pgconn)))
            if error is not None:
                raise error
            self._statements[sql] = name
        return name

    def _log_statement(self, sql: str, params: Sequence[Any], duration_s: float) -> None:
        try:
            statement = self.ops.compose_sql(sql, params)
        except errors.DataError:
            statement = sql
        self.queries_log.append({"sql": statement, "time": f"{duration_s:.3f}"})
        logger.debug("(%.3f) %s; args=%s; alias=%s", duration_s, statement, params, self.alias)

    def await_writes(self) -> None:
        """Read the result of the write sent ahead, if there is one: the row is committed, or its error raised."""
        if self._ahead is None:
            return
        (sql, params), self._ahead = self._ahead, None
        self._result(sql, params)

    @contextmanager
    def writes_awaited_at_exit(self) -> Iterator[None]:
        """Writes sent ahead inside return before they are done; the exit waits for them (and raises their error)."""
        self._ahead_scopes += 1
        try:
            yield
        except BaseException:
            self._ahead_scopes -= 1
            if not self._ahead_scopes:
                try:
                    self.await_writes()
                except Exception as exc:  # the body's own error is the one to answer; this one is logged
                    logger.error("a write sent ahead failed too: %s", type(exc).__name__)
            raise
        self._ahead_scopes -= 1
        if not self._ahead_scopes:
            self.await_writes()

    # Every other use of the connection reads the pending result first.

    def _cursor(self, name: str | None = None) -> Any:
        self.await_writes()
        return super()._cursor(name)

    def _commit(self) -> None:
        self.await_writes()
        super()._commit()

    def _rollback(self) -> None:
        self.await_writes()
        super()._rollback()

    def _set_autocommit(self, autocommit: bool) -> None:
        self.await_writes()
        super()._set_autocommit(autocommit)

    def is_usable(self) -> bool:
        try:
            self.await_writes()
        except Exception:
            return False
        return super().is_usable()

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        self._ahead, self._statements = None, {}  # a new connection has nothing pending or prepared
        return super().get_new_connection(conn_params)

    def _close(self) -> None:
        self._ahead = None  # closing the connection ends whatever it had pending
        super()._close()


def _numbered(sql: str) -> bytes:
    """`%s` placeholders as libpq's `$1`, `$2`, …"""
    parts = sql.split("%s")
    return "".join([parts[0], *(f"${number}{part}" for number, part in enumerate(parts[1:], start=1))]).encode()


def _error_of(connection: psycopg.Connection, results: list[Any]) -> psycopg.Error | None:
    """The error a statement's results carry, as psycopg's cursor would raise it; None if it succeeded."""
    for result in results:
        if result.status == ExecStatus.FATAL_ERROR:
            return psycopg.errors.error_from_result(result, encoding=connection.info.encoding)
    return None
