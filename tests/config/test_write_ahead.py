"""The PostgreSQL backend's audit statements: prepared on the connection, the row's INSERT sent ahead of the answer.

Each test writes to a scratch table of its own; a second, plain psycopg
connection plays another session (it holds a lock, or looks at what is committed).
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from django.db import IntegrityError, OperationalError, connection
from django.test.utils import CaptureQueriesContext

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("postgres_required")]

INSERT = "INSERT INTO write_ahead_rows (id, note) VALUES (%s, %s)"


@pytest.fixture
def rows() -> Iterator[None]:
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE write_ahead_rows (id integer PRIMARY KEY, note text NOT NULL)")
    yield
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE write_ahead_rows")


@pytest.fixture
def other_session() -> Iterator[psycopg.Connection]:
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("prepare_threshold", None)
    with psycopg.connect(**params) as other:
        yield other


def _on(other: psycopg.Connection, sql: str, params: list | None = None) -> None:
    with other.cursor() as cursor:
        cursor.execute(sql, params)


def _committed(other: psycopg.Connection) -> list[tuple[int, str]]:
    with other.transaction(), other.cursor() as cursor:
        cursor.execute("SELECT id, note FROM write_ahead_rows ORDER BY id")
        return cursor.fetchall()


def test_inside_the_scope_a_write_returns_before_the_server_has_done_it(rows, other_session):
    # given: the statement is prepared (preparing it takes the table's lock too), then another session
    # holds the table, so the INSERT cannot finish until it lets go
    connection.write_ahead(INSERT, [0, "prepared"])
    _on(other_session, "BEGIN")
    _on(other_session, "LOCK TABLE write_ahead_rows IN ACCESS EXCLUSIVE MODE")
    with connection.cursor() as cursor:
        cursor.execute("SET lock_timeout = '20s'")  # a write awaited in place would hang here, not forever

    with connection.writes_awaited_at_exit():
        # when: the write is sent while the table is locked
        connection.write_ahead(INSERT, [1, "sent ahead"])
        # then: it returned; the lock is released only now, and the exit waits for the commit
        _on(other_session, "COMMIT")

    assert _committed(other_session) == [(0, "prepared"), (1, "sent ahead")]


def test_outside_a_scope_the_write_is_committed_when_it_returns(rows, other_session):
    connection.write_ahead(INSERT, [1, "awaited in place"])

    assert _committed(other_session) == [(1, "awaited in place")]


def test_any_other_use_of_the_connection_reads_the_pending_result_first(rows):
    with connection.writes_awaited_at_exit():
        connection.write_ahead(INSERT, [1, "first"])
        with connection.cursor() as cursor:  # the protocol never sees two commands at once
            cursor.execute("SELECT note FROM write_ahead_rows")
            seen = cursor.fetchall()
        connection.write_ahead(INSERT, [2, "second"])
        again = connection.execute_prepared("SELECT count(*) FROM write_ahead_rows WHERE id > %s", [0])

    assert seen == [("first",)]
    assert again == [("2",)]


def test_a_write_that_fails_raises_at_the_scopes_exit_and_leaves_the_connection_usable(rows):
    connection.write_ahead(INSERT, [1, "kept"])

    scope = connection.writes_awaited_at_exit()
    scope.__enter__()
    connection.write_ahead(INSERT, [1, "a duplicate"])  # returns: the error is read at the exit
    with pytest.raises(IntegrityError, match="duplicate key"):
        scope.__exit__(None, None, None)

    assert connection.execute_prepared("SELECT note FROM write_ahead_rows", []) == [("kept",)]


def test_an_error_of_the_scopes_body_is_the_one_raised(rows):
    def failing_after_sending() -> None:
        with connection.writes_awaited_at_exit():
            connection.write_ahead(INSERT, [1, "sent"])
            raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        failing_after_sending()

    assert connection.execute_prepared("SELECT note FROM write_ahead_rows", []) == [("sent",)]


def test_a_statement_prepared_once_is_prepared_again_after_deallocate_all(rows):
    connection.write_ahead(INSERT, [1, "prepared"])
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")  # by hand: the connection lost the statement

    connection.write_ahead(INSERT, [2, "prepared again"])

    assert connection.execute_prepared("SELECT id FROM write_ahead_rows ORDER BY id", []) == [("1",), ("2",)]


def test_values_travel_as_text_whatever_their_type(rows):
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE write_ahead_rows ADD COLUMN extra jsonb, ADD COLUMN at timestamptz")
    statement = "INSERT INTO write_ahead_rows (id, note, extra, at) VALUES (%s, %s, %s, %s)"
    extra = connection.ops.adapt_json_value({"ü": [1, None, "\u2028"]}, None)

    connection.write_ahead(statement, [1, "naïve 'quotes' %s", extra, "2026-12-06T20:00:00+01:00"])

    assert connection.execute_prepared("SELECT note, extra::text, at FROM write_ahead_rows", []) == [
        ("naïve 'quotes' %s", '{"ü": [1, null, "\u2028"]}', "2026-12-06 19:00:00+00")
    ]


def test_the_statements_are_counted_and_logged_as_a_cursors(rows):
    with CaptureQueriesContext(connection) as captured:
        connection.write_ahead(INSERT, [1, "counted"])
        connection.execute_prepared("SELECT note FROM write_ahead_rows WHERE id = %s", [1])

    assert [query["sql"] for query in captured.captured_queries] == [
        "INSERT INTO write_ahead_rows (id, note) VALUES (1, 'counted')",
        "SELECT note FROM write_ahead_rows WHERE id = 1",
    ]


def test_a_literal_percent_is_refused_before_anything_is_sent(rows):
    with pytest.raises(ValueError, match="%s placeholders and no other %"):
        connection.write_ahead("INSERT INTO write_ahead_rows (id, note) VALUES (%s, '100%')", [1])


def test_a_connection_the_server_ends_before_the_write_is_done_raises_an_outage(rows, other_session):
    connection.write_ahead(INSERT, [0, "prepared"])
    _on(other_session, "BEGIN")
    _on(other_session, "LOCK TABLE write_ahead_rows IN ACCESS EXCLUSIVE MODE")

    scope = connection.writes_awaited_at_exit()
    scope.__enter__()
    connection.write_ahead(INSERT, [1, "lost"])  # waits on the lock, on the server
    _on(other_session, "SELECT pg_terminate_backend(%s)", [connection.connection.info.backend_pid])
    with pytest.raises(OperationalError):
        scope.__exit__(None, None, None)
    _on(other_session, "COMMIT")
    connection.close_if_unusable_or_obsolete()  # as at the request's end: the next request connects again

    assert _committed(other_session) == [(0, "prepared")]


def test_the_api_answers_503_when_a_write_sent_ahead_fails_after_its_view_answered(rows, settings, client):
    # given: the server refuses the row, as one shutting down would
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION write_ahead_refused() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'the server is shutting down' USING ERRCODE = '57P01'; END $$"
        )
        cursor.execute(
            "CREATE TRIGGER write_ahead_refused AFTER INSERT ON write_ahead_rows "
            "FOR EACH ROW EXECUTE FUNCTION write_ahead_refused()"
        )
    settings.ROOT_URLCONF = "tests.config.urls_write_ahead"

    # when: the view sends the row and answers 200 before its result is read
    response = client.get("/api/v1/write-ahead")

    # then: the answer that leaves is the outage's, not the view's
    assert response.status_code == 503
    assert response.json()["error_code"] == "unavailable_dependency"
    assert response["Retry-After"]
    with connection.cursor() as cursor:
        cursor.execute("DROP FUNCTION write_ahead_refused() CASCADE")


def test_the_api_answers_the_views_answer_once_the_write_sent_ahead_is_committed(rows, settings, client, other_session):
    settings.ROOT_URLCONF = "tests.config.urls_write_ahead"

    response = client.get("/api/v1/write-ahead")

    assert (response.status_code, response.json()) == (200, {"written": True})
    assert _committed(other_session) == [(1, "from the view")]
