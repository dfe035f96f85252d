"""What the suite changes about PostgreSQL for its own runs: cheaper flushes and commits, same outcomes.

**Flush by DELETE.** A transactional test (live servers, threads, processes) ends with a flush of
every table. Django's flush on PostgreSQL is one TRUNCATE of all of them, which replaces the files
of each table, index and audit partition (about 670 relations): 0.4-0.6 s per test on an idle
machine and several times that under the suite's load, for some 300 tests. A test leaves a few
rows behind, so deleting them costs a tenth of that. Django declares its foreign keys on
PostgreSQL DEFERRABLE INITIALLY DEFERRED, and the flush runs its statements in one transaction,
so the deletes may come in any order and the constraints are checked at the commit (SQLite's
flush deletes the same way). A flush that resets sequences or cascades keeps Django's TRUNCATE.

**Commits not waited to disk.** `synchronous_commit=off` for the suite's connections and the
processes it starts (libpq reads PGOPTIONS): a commit still happens in order and survives any
client process being killed, and is lost only if the PostgreSQL server itself crashes, which
no test does. Benchmarks do not load this module.
"""

from __future__ import annotations

import os

from django.db.backends.postgresql.operations import DatabaseOperations

ASYNCHRONOUS_COMMIT = "-c synchronous_commit=off"

_truncating_flush = DatabaseOperations.sql_flush


def _deleting_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
    if reset_sequences or allow_cascade or not tables:
        return _truncating_flush(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
    delete_from = f"{style.SQL_KEYWORD('DELETE')} {style.SQL_KEYWORD('FROM')}"
    return [f"{delete_from} {style.SQL_FIELD(self.quote_name(table))};" for table in tables]


def install() -> None:
    """Patch the flush and set the commit mode; called once, before the suite opens a connection."""
    DatabaseOperations.sql_flush = _deleting_flush
    options = os.environ.get("PGOPTIONS", "")
    if ASYNCHRONOUS_COMMIT not in options:
        os.environ["PGOPTIONS"] = f"{options} {ASYNCHRONOUS_COMMIT}".strip()
