"""Django's PostgreSQL backend with a per-request health check that costs no round trip.

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
"""

from __future__ import annotations

import select

from django.db.backends.postgresql import base
from psycopg.pq import TransactionStatus


class DatabaseWrapper(base.DatabaseWrapper):
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
