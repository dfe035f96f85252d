"""/api/v1/grants: let a tenant's service accounts use its connections over REST (scope connections:manage).

A grant may only name the caller's tenant's live service accounts and active
connections; other tenants' rows are answered exactly like rows that do not
exist, and a refused request leaves no grant behind.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from connections_app.models import Connection, ExecutionGrant
from connections_app.services import connection_revoke, grant_create, grant_revoke
from core.errors import AppError
from policies_app.models import ServiceAccount
from policies_app.services import service_account_revoke
from tests.factories import (
    ConnectionFactory,
    GrantFactory,
    MembershipFactory,
    TenantFactory,
    UserFactory,
    service_account_with_key,
)
from tests.support.api import api_client

pytestmark = pytest.mark.django_db

URL = "/api/v1/grants"
CANARY = "canary-3e7b0d94a1c6"
GRANT_FIELDS = {"id", "service_account", "connection_ids", "expires_at", "created_at", "revoked_at"}
NO_SUCH_CONNECTION = "no such connection in this tenant"
NO_SUCH_ACCOUNT = "no such active service account in this tenant"


def iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def as_api(grant: ExecutionGrant) -> dict:
    """What the API must answer for this grant, field by field."""
    grant.refresh_from_db()
    return {
        "id": str(grant.pk),
        "service_account": {"id": str(grant.service_account_id), "name": grant.service_account.name},
        "connection_ids": sorted(str(pk) for pk in grant.connections.values_list("pk", flat=True)),
        "expires_at": iso(grant.expires_at),
        "created_at": iso(grant.created_at),
        "revoked_at": iso(grant.revoked_at),
    }


def invalid(errors: list[tuple[str, str]]) -> dict:
    return {
        "error_code": "validation",
        "safe_message": "the request is invalid",
        "errors": [{"path": path, "message": message} for path, message in errors],
    }


def envelope_of(response, status: int) -> dict:
    assert response.status_code == status
    assert response["Content-Type"] == "application/json"
    return response.json()


@pytest.fixture
def acme():
    return TenantFactory(slug="acme")


@pytest.fixture
def manager(acme) -> APIClient:
    """A client holding acme's connections:manage key."""
    _account, key = service_account_with_key(acme, name="ops", scopes=("connections:manage",))
    return api_client(key)


@pytest.fixture
def agent(acme) -> ServiceAccount:
    account, _key = service_account_with_key(acme, name="agent")
    return account


@pytest.fixture
def connections(acme) -> list[Connection]:
    return [ConnectionFactory(tenant=acme, label="first"), ConnectionFactory(tenant=acme, label="second")]


@pytest.fixture
def globex():
    """Another tenant with a service account named like acme's, and a connection."""
    tenant = TenantFactory(slug="globex")
    account, _key = service_account_with_key(tenant, name="globex-agent")
    return tenant, account, ConnectionFactory(tenant=tenant)


# --- create ---------------------------------------------------------------------------------


def test_create_by_name_answers_201_with_the_grant(acme, manager, agent, connections):
    ids = [str(connection.pk) for connection in connections]

    response = manager.post(URL, {"service_account": "agent", "connection_ids": ids, "expires_at": None}, format="json")

    body = envelope_of(response, 201)
    grant = ExecutionGrant.objects.get()
    assert set(body) == GRANT_FIELDS
    assert body == as_api(grant)
    assert body["service_account"] == {"id": str(agent.pk), "name": "agent"}
    assert body["connection_ids"] == sorted(ids)
    assert (body["expires_at"], body["revoked_at"]) == (None, None)
    assert (grant.tenant, grant.service_account) == (acme, agent)
    assert set(grant.connections.all()) == set(connections)


def test_create_by_id_keeps_a_future_expiry(manager, agent, connections):
    expires_at = (timezone.now() + timedelta(hours=2)).replace(microsecond=0)

    response = manager.post(
        URL,
        {"service_account": str(agent.pk), "connection_ids": [str(connections[1].pk)], "expires_at": expires_at},
        format="json",
    )

    body = envelope_of(response, 201)
    assert (body["service_account"]["name"], body["connection_ids"]) == ("agent", [str(connections[1].pk)])
    assert body["expires_at"] == iso(expires_at)
    assert ExecutionGrant.objects.get().expires_at == expires_at


def test_repeated_connection_ids_make_one_grant_of_each_connection(manager, agent, connections):
    pk = connections[0].pk

    response = manager.post(
        URL, {"service_account": "agent", "connection_ids": [str(pk), str(pk).upper(), pk.hex]}, format="json"
    )

    assert envelope_of(response, 201)["connection_ids"] == [str(pk)]
    assert list(ExecutionGrant.objects.get().connections.all()) == [connections[0]]


# --- refused references ---------------------------------------------------------------------


def test_another_tenants_connection_is_refused_like_one_that_does_not_exist(manager, agent, connections, globex):
    _tenant, _account, foreign = globex
    own = str(connections[0].pk)

    foreign_answer = manager.post(
        URL, {"service_account": "agent", "connection_ids": [own, str(foreign.pk)]}, format="json"
    )
    unknown_answer = manager.post(
        URL, {"service_account": "agent", "connection_ids": [own, str(uuid.uuid4())]}, format="json"
    )

    assert envelope_of(foreign_answer, 422) == invalid([("connection_ids.1", NO_SUCH_CONNECTION)])
    assert envelope_of(unknown_answer, 422) == envelope_of(foreign_answer, 422)
    assert ExecutionGrant.objects.count() == 0


@pytest.mark.parametrize("reference", ["foreign-name", "foreign-id", "unknown-name", "unknown-id", "revoked"])
def test_a_service_account_not_live_in_this_tenant_is_refused_alike(manager, agent, connections, globex, reference):
    _tenant, foreign, _connection = globex
    retired, _key = service_account_with_key(agent.tenant, name="retired")
    service_account_revoke(account=retired)
    service_account = {
        "foreign-name": foreign.name,
        "foreign-id": str(foreign.pk),
        "unknown-name": "nobody",
        "unknown-id": str(uuid.uuid4()),
        "revoked": "retired",
    }[reference]

    response = manager.post(
        URL, {"service_account": service_account, "connection_ids": [str(connections[0].pk)]}, format="json"
    )

    assert envelope_of(response, 422) == invalid([("service_account", NO_SUCH_ACCOUNT)])
    assert ExecutionGrant.objects.count() == 0


def test_every_refused_reference_is_named_at_once(manager, globex):
    _tenant, foreign, connection = globex

    response = manager.post(
        URL,
        {"service_account": str(foreign.pk), "connection_ids": [str(uuid.uuid4()), str(connection.pk)]},
        format="json",
    )

    assert envelope_of(response, 422) == invalid(
        [
            ("service_account", NO_SUCH_ACCOUNT),
            ("connection_ids.0", NO_SUCH_CONNECTION),
            ("connection_ids.1", NO_SUCH_CONNECTION),
        ]
    )
    assert ExecutionGrant.objects.count() == 0


def test_a_revoked_connection_cannot_be_granted(manager, agent, connections):
    connection_revoke(connection=connections[1])

    response = manager.post(
        URL, {"service_account": "agent", "connection_ids": [str(c.pk) for c in connections]}, format="json"
    )

    assert envelope_of(response, 422) == invalid([("connection_ids.1", "the connection is revoked")])
    assert ExecutionGrant.objects.count() == 0


def test_an_expiry_in_the_past_is_refused_by_the_service(manager, agent, connections):
    response = manager.post(
        URL,
        {"service_account": "agent", "connection_ids": [str(connections[0].pk)], "expires_at": "2001-01-01T00:00:00Z"},
        format="json",
    )

    assert envelope_of(response, 422) == invalid([("", "expires_at is in the past")])
    assert ExecutionGrant.objects.count() == 0


def test_a_second_grant_of_the_same_connections_is_refused_naming_the_first(manager, agent, connections):
    ids = [str(c.pk) for c in connections]
    first = envelope_of(manager.post(URL, {"service_account": "agent", "connection_ids": ids}, format="json"), 201)

    again = manager.post(URL, {"service_account": "agent", "connection_ids": ids[::-1]}, format="json")

    assert envelope_of(again, 422) == invalid(
        [
            (
                "",
                f"agent already has an active grant of exactly these connections (grant {first['id']}); "
                "use that grant, or revoke it first to replace it",
            )
        ]
    )
    assert ExecutionGrant.objects.count() == 1


def test_other_sets_and_replacements_of_revoked_or_expired_grants_are_accepted(manager, agent, connections):
    first, second = (str(c.pk) for c in connections)
    revoked = GrantFactory(service_account=agent, tenant=agent.tenant, connections=connections)
    grant_revoke(grant=revoked)
    expired = GrantFactory(service_account=agent, tenant=agent.tenant, connections=[connections[0]])
    ExecutionGrant.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(minutes=1))

    statuses = [
        manager.post(URL, {"service_account": "agent", "connection_ids": ids}, format="json").status_code
        for ids in ([first, second], [first], [second])
    ]

    assert statuses == [201, 201, 201]
    assert ExecutionGrant.objects.filter(revoked_at__isnull=True).count() == 4


# --- invalid input ---------------------------------------------------------------------------

SOME_ID = "4f6c2a9e-8d1b-4c3e-9a57-0b2d6e8f1a34"

INVALID_BODIES = [
    pytest.param(
        {},
        [("service_account", "required"), ("connection_ids", "required")],
        id="empty-object",
    ),
    pytest.param(
        {"service_account": "agent", "connection_ids": []},
        [("connection_ids", "must have at least 1 item")],
        id="no-connections",
    ),
    pytest.param(
        {"service_account": "agent", "connection_ids": [str(uuid.UUID(int=i)) for i in range(101)]},
        [("connection_ids", "must have at most 100 items")],
        id="too-many-connections",
    ),
    pytest.param(
        {"service_account": "agent", "connection_ids": [1, CANARY, None, {"id": SOME_ID}, SOME_ID]},
        [
            ("connection_ids.0", "must be a UUID"),
            ("connection_ids.1", "must be a UUID"),
            ("connection_ids.2", "must not be null"),
            ("connection_ids.3", "must be a UUID"),
        ],
        id="ids-of-the-wrong-type",
    ),
    pytest.param(
        {"service_account": "agent", "connection_ids": SOME_ID},
        [("connection_ids", "must be a list")],
        id="ids-not-a-list",
    ),
    pytest.param(
        {"service_account": "a" * 101, "connection_ids": [SOME_ID]},
        [("service_account", "must be at most 100 characters")],
        id="oversized-account",
    ),
    pytest.param(
        {"service_account": ["agent"], "connection_ids": [SOME_ID], "expires_at": CANARY},
        [("service_account", "must be a string"), ("expires_at", "must be an ISO 8601 date-time")],
        id="wrong-types",
    ),
    pytest.param(
        {"service_account": "agent' OR '1'='1", "connection_ids": [f"{SOME_ID}' OR '1'='1"]},
        [("connection_ids.0", "must be a UUID")],
        id="injection-looking",
    ),
    pytest.param(
        {"service_account": "agent' OR '1'='1", "connection_ids": [SOME_ID]},
        [("service_account", NO_SUCH_ACCOUNT), ("connection_ids.0", NO_SUCH_CONNECTION)],
        id="injection-looking-account",
    ),
    pytest.param(
        {"service_account": "agent", "connection_ids": [SOME_ID], "tenant": "globex"},
        [("(unknown field)", "unknown field; the fields are: service_account, connection_ids, expires_at")],
        id="unknown-field",
    ),
]


@pytest.mark.parametrize(("body", "errors"), INVALID_BODIES)
def test_invalid_input_answers_422_and_creates_no_grant(manager, agent, body, errors):
    response = manager.post(URL, body, format="json")

    assert envelope_of(response, 422) == invalid(errors)
    assert CANARY not in response.content.decode()
    assert ExecutionGrant.objects.count() == 0


RAW_BODIES = [
    pytest.param(b"", 400, "request body is empty", id="empty"),
    pytest.param(b'"agent"', 400, "request body must be a JSON object", id="string"),
    pytest.param(
        f'{{"service_account": "agent", "service_account": "ops", "connection_ids": ["{SOME_ID}"]}}'.encode(),
        400,
        "duplicate key in a JSON object",
        id="duplicate-key",
    ),
    pytest.param(
        b'{"service_account": "agent", "connection_ids": ' + b"[" * 5_000 + b"]" * 5_000 + b"}",
        400,
        "JSON nests deeper than 32 levels",
        id="deeply-nested",
    ),
    pytest.param(
        json.dumps({"service_account": "agent", "connection_ids": [SOME_ID] * 2_000}).encode(),
        413,
        "request body exceeds 65536 bytes",
        id="oversized-body",
    ),
]


@pytest.mark.parametrize(("raw", "status", "message"), RAW_BODIES)
def test_malformed_body_answers_the_envelope_and_creates_no_grant(manager, agent, raw, status, message):
    response = manager.generic("POST", URL, raw, content_type="application/json")

    body = envelope_of(response, status)
    assert body == {"error_code": "validation" if status == 413 else "invalid_json", "safe_message": message}
    assert ExecutionGrant.objects.count() == 0


# --- list and detail -------------------------------------------------------------------------


def test_list_answers_the_tenants_grants_newest_first(acme, manager, agent, connections, globex):
    # given two grants of acme, one revoked, and one of globex
    _tenant, foreign_account, foreign_connection = globex
    older = GrantFactory(service_account=agent, connections=connections)
    newer = GrantFactory(service_account=agent, connections=[connections[1]])
    grant_revoke(grant=older)
    foreign = GrantFactory(service_account=foreign_account, connections=[foreign_connection])

    response = manager.get(URL)

    body = envelope_of(response, 200)
    assert (body["count"], body["next"], body["previous"]) == (2, None, None)
    assert body["results"] == [as_api(newer), as_api(older)]
    assert body["results"][1]["revoked_at"] is not None
    assert str(foreign.pk) not in response.content.decode()


def test_list_is_paginated(manager, agent, connections):
    grants = [GrantFactory(service_account=agent, connections=connections) for _ in range(3)]

    first = envelope_of(manager.get(URL, {"limit": 2}), 200)
    second = envelope_of(manager.get(URL, {"limit": 2, "offset": 2}), 200)

    assert [row["id"] for row in first["results"]] == [str(grants[2].pk), str(grants[1].pk)]
    assert first["next"] == "http://testserver/api/v1/grants?limit=2&offset=2"
    assert [row["id"] for row in second["results"]] == [str(grants[0].pk)]
    assert (second["count"], second["next"]) == (3, None)


def test_list_query_count_does_not_grow_with_rows(acme, manager, connections, django_assert_max_num_queries):
    for index in range(10):
        account, _key = service_account_with_key(acme, name=f"agent-{index}")
        GrantFactory(service_account=account, connections=connections)
    manager.get(URL)  # the first call of a key loads it and records its use

    with django_assert_max_num_queries(4):
        response = manager.get(URL)

    assert len(response.json()["results"]) == 10
    assert all(len(row["connection_ids"]) == 2 for row in response.json()["results"])


def test_detail_answers_the_grant(manager, agent, connections):
    grant = GrantFactory(service_account=agent, connections=connections)

    response = manager.get(f"{URL}/{grant.pk}")

    assert envelope_of(response, 200) == as_api(grant)


NOT_FOUND = {"error_code": "not_found", "safe_message": "no such grant in this tenant"}


@pytest.mark.parametrize(
    "reference", ["foreign", "00000000-0000-0000-0000-000000000000", "nope", "1%27%20OR%20%271", "%00"]
)
def test_another_tenants_unknown_or_malformed_id_answers_the_same_404(manager, globex, reference):
    _tenant, foreign_account, foreign_connection = globex
    foreign = GrantFactory(service_account=foreign_account, connections=[foreign_connection])
    grant_id = str(foreign.pk) if reference == "foreign" else reference

    detail = manager.get(f"{URL}/{grant_id}")
    revoke = manager.post(f"{URL}/{grant_id}/revoke")

    assert envelope_of(detail, 404) == NOT_FOUND
    assert envelope_of(revoke, 404) == NOT_FOUND
    foreign.refresh_from_db()
    assert (foreign.revoked_at, foreign.revoked_by) == (None, None)


# --- revoke ----------------------------------------------------------------------------------


def test_revoke_answers_the_revoked_grant_and_a_second_revoke_changes_nothing(manager, agent, connections):
    grant = GrantFactory(service_account=agent, connections=connections)

    first = manager.post(f"{URL}/{grant.pk}/revoke")
    revoked_at = ExecutionGrant.objects.get(pk=grant.pk).revoked_at
    second = manager.post(f"{URL}/{grant.pk}/revoke")

    body = envelope_of(first, 200)
    assert revoked_at is not None
    assert body == as_api(grant)
    assert body["revoked_at"] == iso(revoked_at)
    assert envelope_of(second, 200) == body
    assert ExecutionGrant.objects.get(pk=grant.pk).revoked_at == revoked_at


# --- authentication and scope ------------------------------------------------------------------


def test_a_tools_exec_key_is_refused_with_403_everywhere(acme, agent, connections):
    grant = GrantFactory(service_account=agent, connections=connections)
    _account, key = service_account_with_key(acme, name="runner", scopes=("tools:exec",))
    client = api_client(key)

    responses = [
        client.get(URL),
        client.post(URL, {"service_account": "agent", "connection_ids": [str(connections[0].pk)]}, format="json"),
        client.get(f"{URL}/{grant.pk}"),
        client.post(f"{URL}/{grant.pk}/revoke"),
    ]

    for response in responses:
        assert envelope_of(response, 403) == {
            "error_code": "forbidden",
            "safe_message": "the API key lacks the connections:manage scope",
        }
    assert ExecutionGrant.objects.count() == 1
    assert ExecutionGrant.objects.get().revoked_at is None


def test_no_key_answers_401_everywhere(agent, connections):
    grant = GrantFactory(service_account=agent, connections=connections)
    client = APIClient()

    responses = [
        client.get(URL),
        client.post(URL, {"service_account": "agent", "connection_ids": [str(connections[0].pk)]}, format="json"),
        client.get(f"{URL}/{grant.pk}"),
        client.post(f"{URL}/{grant.pk}/revoke"),
    ]

    for response in responses:
        assert envelope_of(response, 401) == {
            "error_code": "unauthenticated",
            "safe_message": "no API key: send `Authorization: Bearer <api key>`",
        }
    assert ExecutionGrant.objects.count() == 1
    assert ExecutionGrant.objects.get().revoked_at is None


# --- personal connections belong to their person ------------------------------------------------------


def test_a_key_cannot_grant_a_persons_personal_connection(acme, manager, agent):
    # given alice's personal connection beside a shared one
    alice = MembershipFactory(tenant=acme, user=UserFactory(username="alice"), role="member").user
    personal = ConnectionFactory(tenant=acme, owner=alice, label="alice's github")
    shared = ConnectionFactory(tenant=acme, label="team github")

    response = manager.post(
        URL, {"service_account": "agent", "connection_ids": [str(shared.pk), str(personal.pk)]}, format="json"
    )

    assert envelope_of(response, 422) == invalid([("connection_ids.1", NO_SUCH_CONNECTION)])
    assert not ExecutionGrant.objects.exists()


def test_the_grant_service_refuses_a_personal_connection_to_a_key_whatever_the_view(acme, agent):
    ops, _key = service_account_with_key(acme, name="ops", scopes=("connections:manage",))
    personal = ConnectionFactory(tenant=acme, owner=MembershipFactory(tenant=acme, role="member").user, label="mine")

    with pytest.raises(AppError, match="a personal connection is granted by its person in the tenant portal"):
        grant_create(tenant=acme, service_account=agent, connections=[personal], created_by_service_account_id=ops.pk)

    assert not ExecutionGrant.objects.exists()
