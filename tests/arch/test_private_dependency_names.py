"""The two private names of dependencies the code relies on, each used by one module, pinned here.

- `httpx2.AsyncHTTPTransport._pool` (tools_app/upstream/framing.py): httpx2's transport
  takes no network backend, so the framing watch replaces its pool with an equal one
  built over a watched backend.
- `psycopg.errors._WaitTimeout` (config/postgresql/base.py): what psycopg's bounded wait
  raises when it runs out, which tells a frozen server from a slow statement.

A new version of either package fails this test until someone has checked that the name
still means what those modules take it to mean, and moved the pin here.
"""

from __future__ import annotations

from importlib.metadata import version

import httpcore2
import httpx2
import psycopg

PINNED = {"httpx2": "2.16.2", "psycopg": "3.3.9"}


def test_the_versions_are_the_ones_whose_private_names_were_checked():
    assert {name: version(name) for name in PINNED} == PINNED


def test_httpx2_transports_keep_their_connection_pool_in_pool():
    transport = httpx2.AsyncHTTPTransport(trust_env=False)

    assert isinstance(transport._pool, httpcore2.AsyncConnectionPool)


def test_psycopg_signals_a_bounded_wait_that_ran_out_with_wait_timeout():
    # An OperationalError of its own, so base.py can catch exactly it and tell it from a lost connection.
    assert issubclass(psycopg.errors._WaitTimeout, psycopg.OperationalError)
    assert psycopg.errors._WaitTimeout is not psycopg.OperationalError
