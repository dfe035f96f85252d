"""The credential broker behind the grant gate, driven through POST /api/v1/tools/exec.

Every refusal is checked on four sides: the contract's code and status, the
loopback GitHub never called, the audit row's error code, and the connection's
own trail (the broker records `use_denied` for its refusals; the gate, which runs
first, records nothing on the connection and never reaches the broker).
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.conf import settings
from django.db import connection as db_connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from config.runtime import runtime
from connections_app.adapters import EXPIRED, NOT_AVAILABLE, UNREADABLE, DatabaseConnectionBroker
from connections_app.models import Connection, ConnectionEvent
from connections_app.selectors import connection_events
from connections_app.services import (
    connection_create,
    connection_revoke,
    grant_create,
    grant_revoke,
)
from core.crypto import KeyRing, seal_json
from core.errors import AppError
from policies_app import governance
from policies_app.governance import governance_cache
from runner.errors import BrokerError
from runner.grants import GRANT_REFUSED, NOT_GRANTED
from runner.types import ErrorCode, ToolInvocationContext
from tests.factories import ConnectionFactory, GrantFactory, TenantFactory, service_account_with_key
from tools_app.models import ToolInvocation

pytestmark = pytest.mark.django_db

TOKEN = "ghp_brokerToken0123456789abcdefABCDEF"
USER = {"login": "octocat", "id": 583231, "name": "The Octocat", "html_url": "https://github.com/octocat"}
TOOL = "github__get_user"


@pytest.fixture
def connection(caller):
    account, _key = caller
    return ConnectionFactory(tenant=account.tenant, credentials={"api_key": TOKEN})


@pytest.fixture
def grant(caller, connection):
    account, _key = caller
    return GrantFactory(service_account=account, connections=[connection])


def assert_refused(response, github, *, status: int, code: str, message: str) -> None:
    """The contract's refusal, GitHub untouched, and the audit row saying the same."""
    assert response.status_code == status
    body = response.json()
    assert body == {
        "tool_call_id": body["tool_call_id"],
        "tool_id": TOOL,
        "ok": False,
        "error_code": code,
        "safe_message": message,
    }
    assert github.requests == []
    row = ToolInvocation.objects.get(tool_call_id=body["tool_call_id"])
    assert (row.ok, row.executed, row.error_code, row.safe_message, row.result) == (False, False, code, message, None)


def denials(connection_id) -> list[tuple]:
    """The broker's refusals recorded against this connection id: (tenant, caller, tool, reason)."""
    return list(
        ConnectionEvent.objects.filter(connection_id=connection_id, kind=ConnectionEvent.Kind.USE_DENIED).values_list(
            "tenant_id", "service_account_id", "tool_id", "detail"
        )
    )


def kinds(connection) -> list[str]:
    return list(ConnectionEvent.objects.filter(connection_id=connection.pk).values_list("kind", flat=True))


def last_used(connection) -> datetime | None:
    return Connection.objects.values_list("last_used_at", flat=True).get(pk=connection.pk)


def connection_row(tenant, *, provider: str, credentials: dict) -> Connection:
    """A connection written at the row level, sealed like the service seals (for states the service refuses)."""
    row = Connection(tenant=tenant, provider=provider, credential_type=Connection.CredentialType.API_KEY, label="x")
    sealed = seal_json(credentials, binding=row.binding(), ring=KeyRing.from_settings())
    row.encrypted_credentials = sealed.blob
    row.encryption_key_id = sealed.key_id
    row.save()
    return row


# --- the broker's own refusals: 409, and a use_denied event ----------------------------


def test_another_tenants_connection_in_the_grant_is_refused_like_one_that_does_not_exist(
    github, caller, call_tool, grant
):
    # given another tenant's connection slipped into our grant at the row level (grant_create refuses it)
    account, _key = caller
    globex = TenantFactory(slug="globex")
    theirs = ConnectionFactory(tenant=globex, credentials={"api_key": "ghp_globexSecret0123456789"})
    with pytest.raises(AppError):
        grant_create(tenant=account.tenant, service_account=account, connections=[theirs])
    grant.connections.add(theirs)

    # when
    response = call_tool(theirs, grant)

    # then: the broker's answer for an id that exists nowhere is the same, word for word
    nonexistent = str(uuid.uuid4())
    ctx = ToolInvocationContext(
        run_id="",
        tool_call_id="probe",
        tenant_id=str(account.tenant_id),
        actor_id=str(account.pk),
        connection_id=nonexistent,
    )
    with pytest.raises(BrokerError) as missing:
        DatabaseConnectionBroker().resolve(ctx, runtime().source.get(TOOL).spec)
    assert (missing.value.code, missing.value.safe_message) == (ErrorCode.CONNECTION_UNAVAILABLE, NOT_AVAILABLE)
    assert_refused(response, github, status=409, code="connection_unavailable", message=NOT_AVAILABLE)
    # the refusal is on the asking tenant's trail, not on globex's
    assert denials(theirs.pk) == [(account.tenant_id, account.pk, TOOL, NOT_AVAILABLE)]
    assert list(connection_events(tenant=globex).values_list("kind", flat=True)) == ["created"]
    assert last_used(theirs) is None


def test_revoked_connection_answers_409_connection_unavailable(github, caller, call_tool, connection, grant):
    account, _key = caller
    connection_revoke(connection=connection)

    response = call_tool(connection, grant)

    assert_refused(response, github, status=409, code="connection_unavailable", message="connection has been revoked")
    assert denials(connection.pk) == [(account.tenant_id, account.pk, TOOL, "connection has been revoked")]
    assert last_used(connection) is None


def test_connection_of_another_provider_answers_409_connection_unavailable(github, caller, call_tool):
    # given a gitlab connection: connection_create knows no such provider, so the row is written directly
    account, _key = caller
    with pytest.raises(AppError):
        connection_create(
            tenant=account.tenant, provider="gitlab", credential_type="api_key", credentials={"api_key": TOKEN}
        )
    gitlab = connection_row(account.tenant, provider="gitlab", credentials={"api_key": TOKEN})
    grant = GrantFactory(service_account=account, connections=[gitlab])

    response = call_tool(gitlab, grant)

    message = "connection is for gitlab, the tool needs github"
    assert_refused(response, github, status=409, code="connection_unavailable", message=message)
    assert denials(gitlab.pk) == [(account.tenant_id, account.pk, TOOL, message)]
    assert last_used(gitlab) is None


def test_connection_awaiting_reauthorisation_answers_409(github, caller, call_tool, connection, grant):
    account, _key = caller
    Connection.objects.filter(pk=connection.pk).update(status=Connection.Status.NEEDS_REAUTH)

    response = call_tool(connection, grant)

    message = "connection needs re-authorisation by the tenant"
    assert_refused(response, github, status=409, code="connection_unavailable", message=message)
    assert denials(connection.pk) == [(account.tenant_id, account.pk, TOOL, message)]
    assert last_used(connection) is None


def test_expired_api_key_connection_answers_409(github, caller, call_tool, connection, grant):
    account, _key = caller
    Connection.objects.filter(pk=connection.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    response = call_tool(connection, grant)

    assert_refused(response, github, status=409, code="connection_unavailable", message=EXPIRED)
    assert denials(connection.pk) == [(account.tenant_id, account.pk, TOOL, EXPIRED)]
    assert last_used(connection) is None


def test_credentials_under_a_key_gone_from_the_ring_answer_409_without_the_secret(
    github, call_tool, grant, settings, caplog
):
    connection = grant.connections.get()
    settings.TOOLGATE_KEY_RING = {"replacement": bytes(range(32))}

    response = call_tool(connection, grant)

    assert_refused(response, github, status=409, code="connection_unavailable", message=UNREADABLE)
    assert [record.levelname for record in caplog.records if record.name == "connections_app.adapters"] == ["ERROR"]
    assert "is not in TOOLGATE_ENCRYPTION_KEYS" in caplog.text
    assert TOKEN not in caplog.text
    assert last_used(connection) is None


# --- the gate's refusals: 403, before the broker, nothing on the connection ----------------


def test_another_callers_grant_answers_403_and_never_reaches_the_broker(github, tenant, call_tool, connection):
    other, _other_key = service_account_with_key(tenant, name="other")
    theirs = GrantFactory(service_account=other, connections=[connection])

    response = call_tool(connection, theirs)

    message = GRANT_REFUSED
    assert_refused(response, github, status=403, code="policy_denied", message=message)
    assert kinds(connection) == ["created"]
    assert last_used(connection) is None


def test_revoked_grant_answers_403(github, call_tool, connection, grant):
    grant_revoke(grant=grant)

    response = call_tool(connection, grant)

    assert_refused(
        response,
        github,
        status=403,
        code="policy_denied",
        message="the grant was revoked; ask the tenant for a new one",
    )
    assert kinds(connection) == ["created"]
    assert last_used(connection) is None


def test_a_grant_revoked_after_it_was_used_refuses_the_next_call(github, call_tool, connection, grant, monkeypatch):
    # given the grant used once, so this process keeps its view, and no staleness re-read due during the test
    monkeypatch.setattr(governance, "MAX_STALENESS_S", 3600.0)
    github.route("GET", "/user", json=USER)
    assert call_tool(connection, grant).status_code == 200

    # when it is revoked
    grant_revoke(grant=grant)
    response = call_tool(connection, grant)

    # then the kept view was dropped with it
    body = response.json()
    assert (response.status_code, body["error_code"], body["safe_message"]) == (
        403,
        "policy_denied",
        "the grant was revoked; ask the tenant for a new one",
    )
    assert [request.path for request in github.requests] == ["/user"]


def test_expired_grant_answers_403(github, caller, call_tool, connection):
    account, _key = caller
    grant = GrantFactory(
        service_account=account, connections=[connection], expires_at=timezone.now() - timedelta(seconds=1)
    )

    response = call_tool(connection, grant)

    assert_refused(
        response,
        github,
        status=403,
        code="policy_denied",
        message="the grant has expired; ask the tenant for a new one",
    )
    assert kinds(connection) == ["created"]
    assert last_used(connection) is None


def test_granted_connection_the_request_does_not_declare_answers_403(github, caller, call_tool, connection):
    account, _key = caller
    declared = ConnectionFactory(tenant=account.tenant)
    grant = GrantFactory(service_account=account, connections=[connection, declared])

    response = call_tool(connection, grant, connection_ids=[str(declared.pk)])

    message = NOT_GRANTED
    assert_refused(response, github, status=403, code="policy_denied", message=message)
    assert kinds(connection) == ["created"]
    assert last_used(connection) is None


@pytest.mark.parametrize("revoked", [False, True])
def test_connection_outside_the_grant_is_refused_by_the_gate_before_the_broker(
    github, caller, call_tool, grant, revoked
):
    # given a connection of the caller's tenant that the grant does not name; when revoked, a broker
    # asked first would answer 409 "connection has been revoked" and record use_denied
    account, _key = caller
    outside = ConnectionFactory(tenant=account.tenant, credentials={"api_key": "ghp_outside0123456789"})
    if revoked:
        connection_revoke(connection=outside)

    response = call_tool(outside, grant)

    message = NOT_GRANTED
    assert_refused(response, github, status=403, code="policy_denied", message=message)
    assert kinds(outside) == (["revoked", "created"] if revoked else ["created"])
    assert ConnectionEvent.objects.filter(kind=ConnectionEvent.Kind.USE_DENIED).count() == 0
    assert last_used(outside) is None


# --- recording use ----------------------------------------------------------------------------


def _connection_updates(queries) -> list[str]:
    return [query["sql"] for query in queries if query["sql"].startswith('UPDATE "connections_app_connection"')]


def test_last_used_at_is_written_at_most_once_a_minute(github, call_tool, connection, grant):
    github.route("GET", "/user", json=USER)
    start = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)

    with time_machine.travel(start, tick=False), CaptureQueriesContext(db_connection) as first:
        assert call_tool(connection, grant).status_code == 200
    with time_machine.travel(start + timedelta(seconds=59), tick=False), CaptureQueriesContext(db_connection) as second:
        assert call_tool(connection, grant).status_code == 200
    after_second = last_used(connection)
    with time_machine.travel(start + timedelta(seconds=61), tick=False), CaptureQueriesContext(db_connection) as third:
        assert call_tool(connection, grant).status_code == 200

    assert (len(_connection_updates(first)), len(_connection_updates(second)), len(_connection_updates(third))) == (
        1,
        0,
        1,
    )
    assert after_second == start
    assert last_used(connection) == start + timedelta(seconds=61)
    assert len(github.requests) == 3


# --- the hot path's query budget ---------------------------------------------------------------


# The audit row's INSERT: on PostgreSQL one statement that claims the call's tool_call_id in a CTE first
# (the audit table is partitioned there; tools_app/audit.py).
AUDIT_INSERT = (
    "WITH tools_app_toolcallclaim" if db_connection.vendor == "postgresql" else "INSERT tools_app_toolinvocation"
)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # the grant and the connection row come from the governance cache (a refresh or a revoke
        # bumps the generation): the audit row is the call's one statement
        ({}, [AUDIT_INSERT]),
        # a client id claims its row first and finishes it after
        ({"tool_call_id": "w1"}, [AUDIT_INSERT, "UPDATE tools_app_toolinvocation"]),
    ],
)
def test_a_warm_exec_with_a_connection_reads_nothing_but_writes_its_audit_row(
    github, call_tool, connection, grant, monkeypatch, *, body, expected
):
    # given caches warm, last_used_at written by a first call, and no staleness re-read due during the test
    monkeypatch.setattr(governance, "MAX_STALENESS_S", 3600.0)
    github.route("GET", "/user", json=USER)
    governance_cache.clear()
    assert call_tool(connection, grant, tool_call_id="w0").status_code == 200

    # when
    with CaptureQueriesContext(db_connection) as queries:
        response = call_tool(connection, grant, **body)

    # then: no grant or connection read, no write of last_used_at within the minute, and with Redis no
    # generation read (without it, the key lookup and the runner each read the generation)
    generation_reads = [] if settings.REDIS_URL else ["SELECT policies_app_governancestate"] * 2
    assert response.status_code == 200
    assert response.json()["value"] == USER
    assert [_statement(query["sql"]) for query in queries.captured_queries] == generation_reads + expected


def _statement(sql: str) -> str:
    """`SELECT ... FROM "t" ...` → `SELECT t`: the kind of statement and its table."""
    verb = sql.split(None, 1)[0]
    while verb == "SELECT" and (nested := re.sub(r"\([^()]*\)", "", sql)) != sql:  # the EXISTS of the
        sql = nested  # generation read names a rule table before its own FROM
    table = re.search(r'(?:FROM|INTO|UPDATE) "(\w+)"', sql)
    return f"{verb} {table.group(1) if table else '?'}"
