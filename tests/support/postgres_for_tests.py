"""What the suite changes about PostgreSQL for its own runs: cheaper flushes and commits, same outcomes.

**Flush by DELETE.** A transactional test (live servers, threads, processes) ends with a flush of
every table. Django's flush on PostgreSQL is one TRUNCATE of all of them, which replaces the files
of each table, index and audit partition (about 670 relations): 0.4-0.6 s per test on an idle
machine and several times that under the suite's load, for some 300 tests. A test leaves a few
rows behind, so deleting them costs a tenth of that. Django declares its foreign keys on
PostgreSQL DEFERRABLE INITIALLY DEFERRED, and the flush runs its statements in one transaction,
so the deletes may come in any order and the constraints are checked at the commit (SQLite's
flush deletes the same way). They go as one batch, one round trip instead of one per table
(13 ms against 3 ms idle, for 53 tables). A flush that resets sequences or cascades keeps
Django's TRUNCATE.

**Commits not waited to disk.** `synchronous_commit=off` for the suite's connections and the
processes it starts (libpq reads PGOPTIONS): a commit still happens in order and survives any
client process being killed, and is lost only if the PostgreSQL server itself crashes, which
no test does.

**One migration per run.** Each pytest-xdist worker needs a test database of its own, and
migrating one costs 10-12 s of CPU on an idle machine (about a hundred migrations, most of it
Django rendering model states), several times that with four workers migrating at once on two
cores. The first worker migrates a template instead (the test database's name without the
worker's suffix, dropped first if a killed run left one) and every worker clones its own from
it with `CREATE DATABASE ... TEMPLATE`, which copies it in well under a second. A ledger file
named by the run's id, under a lock, orders the workers; the last worker to finish drops the
template (tests/conftest.py's `django_db_setup`).

Benchmarks do not load this module.
"""

from __future__ import annotations

import fcntl
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.db.backends.postgresql.creation import DatabaseCreation
from django.db.backends.postgresql.operations import DatabaseOperations

ASYNCHRONOUS_COMMIT = "-c synchronous_commit=off"

_truncating_flush = DatabaseOperations.sql_flush
_migrating_create = DatabaseCreation.create_test_db
_WORKER_SUFFIX = re.compile(r"_(gw\d+)$")
_cloned_from: dict[str, str] = {}  # database alias -> the template its test database was cloned from


def _deleting_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
    if reset_sequences or allow_cascade or not tables:
        return _truncating_flush(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
    delete_from = f"{style.SQL_KEYWORD('DELETE')} {style.SQL_KEYWORD('FROM')}"
    return ["\n".join(f"{delete_from} {style.SQL_FIELD(self.quote_name(table))};" for table in tables)]


def run_ledger() -> Path | None:
    """The file that orders this run's workers and records what they did; None outside pytest-xdist."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    return Path(tempfile.gettempdir()) / f"toolgate-tests-{run}.ledger" if run else None


@contextmanager
def _ledger_locked(ledger: Path) -> Iterator[list[str]]:
    """The ledger's lines under an exclusive lock (a worker killed holding it releases it); appended lines are kept."""
    with ledger.open("a+") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        file.seek(0)
        lines = file.read().split()
        known = len(lines)
        yield lines
        file.write("".join(f"{line}\n" for line in lines[known:]))


def _template_ready(lines: list[str]) -> bool:
    return lines.count("migrated") > lines.count("dropped")


def _cloning_create(self, verbosity=1, autoclobber=False, serialize=True, keepdb=False):
    """`create_test_db` for a pytest-xdist worker: its database cloned from the run's one migrated template."""
    ledger, own = run_ledger(), self._get_test_db_name()
    worker = _WORKER_SUFFIX.search(own)
    if keepdb or ledger is None or worker is None:
        return _migrating_create(self, verbosity, autoclobber, serialize, keepdb)
    template = own[: worker.start()]
    with _ledger_locked(ledger) as lines:
        if not _template_ready(lines):
            self.connection.settings_dict["TEST"]["NAME"] = template
            try:
                _migrating_create(self, verbosity, autoclobber=True, serialize=False)
            finally:
                self.connection.settings_dict["TEST"]["NAME"] = own
            lines.append("migrated")
        self.connection.close()  # PostgreSQL copies a template only while no session is connected to it
        self.connection.settings_dict["NAME"] = template
        self.clone_test_db(suffix=worker.group(1), verbosity=verbosity, autoclobber=True)
        lines.append("cloned")
    _cloned_from[self.connection.alias] = template
    self.connection.settings_dict["NAME"] = settings.DATABASES[self.connection.alias]["NAME"] = own
    if serialize:
        self.connection._test_serialized_contents = self.serialize_db_to_string()
    self.connection.ensure_connection()
    return own


def drop_template_if_last(connection) -> None:
    """At a worker's end: the last worker using the run's template drops it (a later one would migrate anew)."""
    ledger, template = run_ledger(), _cloned_from.get(connection.alias)
    if ledger is None or template is None:
        return
    with _ledger_locked(ledger) as lines:
        lines.append("finished")
        if lines.count("finished") < lines.count("cloned") or not _template_ready(lines):
            return
        own = connection.settings_dict["NAME"]
        connection.settings_dict["NAME"] = template
        connection.creation.destroy_test_db(old_database_name=own, verbosity=0)
        lines.append("dropped")


def install() -> None:
    """Patch the flush and test database creation, set the commit mode; called before any connection opens."""
    DatabaseOperations.sql_flush = _deleting_flush
    DatabaseCreation.create_test_db = _cloning_create
    options = os.environ.get("PGOPTIONS", "")
    if ASYNCHRONOUS_COMMIT not in options:
        os.environ["PGOPTIONS"] = f"{options} {ASYNCHRONOUS_COMMIT}".strip()
