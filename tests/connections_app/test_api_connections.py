"""/api/v1/connections: create, list, read and revoke a tenant's connections over REST (scope connections:manage).

Credentials go in and never come out: every response is searched for a canary
secret, and the stored row is opened to prove it holds exactly what was sent.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from connections_app.credentials import (
    APP_CREDENTIAL_CHARACTERS_MESSAGE,
    KEY_CHARACTERS_MESSAGE,
    USERNAME_CHARACTERS_MESSAGE,
)
from connections_app.models import Connection, ConnectionEvent
from connections_app.services import connection_credentials_open, connection_revoke
from policies_app.models import ServiceAccount
from tests.factories import ConnectionFactory, MembershipFactory, TenantFactory, UserFactory, service_account_with_key
from tests.support.api import api_client
from tests.support.web import member_client

pytestmark = pytest.mark.django_db

URL = "/api/v1/connections"
CANARY = "ghp_canary5f0e9d2b7a41c3"
CANARY_PASSWORD = "pw-canary-83c1a6e4d97b"
CONNECTION_FIELDS = {
    "id",
    "provider",
    "credential_type",
    "label",
    "scopes",
    "status",
    "expires_at",
    "created_at",
    "last_used_at",
    "revoked_at",
}
VALID = {"provider": "github", "credential_type": "api_key", "credentials": {"api_key": CANARY}}


def iso(moment: datetime | None) -> str | None:
    """A datetime as the API writes it (DRF's ISO 8601, UTC as `Z`)."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def as_api(connection: Connection) -> dict:
    """What the API must answer for this row, field by field."""
    return {
        "id": str(connection.pk),
        "provider": connection.provider,
        "credential_type": connection.credential_type,
        "label": connection.label,
        "scopes": connection.scopes,
        "status": connection.status,
        "expires_at": iso(connection.expires_at),
        "created_at": iso(connection.created_at),
        "last_used_at": iso(connection.last_used_at),
        "revoked_at": iso(connection.revoked_at),
    }


def snapshot(connection: Connection) -> tuple:
    connection.refresh_from_db()
    return (connection.status, connection.revoked_at, connection.label, bytes(connection.encrypted_credentials))


@pytest.fixture
def acme():
    return TenantFactory(slug="acme")


@pytest.fixture
def manager(acme) -> APIClient:
    """A client holding acme's connections:manage key."""
    _account, key = service_account_with_key(acme, name="ops", scopes=("connections:manage",))
    return api_client(key)


@pytest.fixture
def foreign_connection() -> Connection:
    """A connection of another tenant, globex."""
    return ConnectionFactory(tenant=TenantFactory(slug="globex"), label="globex main")


def envelope_of(response, status: int) -> dict:
    assert response.status_code == status
    assert response["Content-Type"] == "application/json"
    return response.json()


# --- create ---------------------------------------------------------------------------------


def test_create_answers_201_with_the_connection_and_never_the_secret(acme, manager):
    # when
    response = manager.post(
        URL, {**VALID, "scopes": ["repo", "read:org"], "label": "ci bot", "expires_at": None}, format="json"
    )

    # then
    body = envelope_of(response, 201)
    row = Connection.objects.get()
    assert set(body) == CONNECTION_FIELDS
    assert body == as_api(row)
    assert {name: body[name] for name in CONNECTION_FIELDS - {"id", "created_at"}} == {
        "provider": "github",
        "credential_type": "api_key",
        "label": "ci bot",
        "scopes": ["read:org", "repo"],
        "status": "active",
        "expires_at": None,
        "last_used_at": None,
        "revoked_at": None,
    }
    assert row.tenant == acme
    assert CANARY not in response.content.decode()


def test_created_connection_decrypts_to_the_given_credentials_and_the_column_holds_no_plaintext(manager):
    response = manager.post(URL, VALID, format="json")

    row = Connection.objects.get(pk=response.json()["id"])
    assert connection_credentials_open(row) == {"api_key": CANARY}
    stored = bytes(row.encrypted_credentials)
    assert CANARY.encode() not in stored
    assert CANARY[-12:].encode() not in stored
    assert list(ConnectionEvent.objects.filter(connection_id=row.pk).values_list("kind", flat=True)) == ["created"]


def test_a_connection_stored_over_the_api_names_the_service_account_that_stored_it(acme, manager):
    response = manager.post(URL, {**VALID, "label": "ci bot"}, format="json")

    row = Connection.objects.get(pk=response.json()["id"])
    ops = ServiceAccount.objects.get(tenant=acme, name="ops")
    assert (row.created_by, row.created_by_service_account) == (None, ops)
    assert ConnectionEvent.objects.get(connection_id=row.pk).service_account_id == ops.pk
    page, _user = member_client(acme)
    listed = page.get("/connections/").content.decode()
    detail = page.get(f"/connections/{row.pk}/").content.decode()
    assert "<td>service account ops</td>" in listed
    assert "by service account ops" in detail


def test_create_stores_an_app_password(manager):
    credentials = {"username": "octo-bot", "password": CANARY_PASSWORD}

    response = manager.post(
        URL, {"provider": "github", "credential_type": "app_password", "credentials": credentials}, format="json"
    )

    body = envelope_of(response, 201)
    assert (body["credential_type"], body["label"], body["scopes"]) == ("app_password", "", [])
    row = Connection.objects.get(pk=body["id"])
    assert connection_credentials_open(row) == credentials
    assert CANARY_PASSWORD not in response.content.decode()
    assert CANARY_PASSWORD.encode() not in bytes(row.encrypted_credentials)


def test_create_keeps_a_future_expiry(manager):
    expires_at = (timezone.now() + timedelta(days=30)).replace(microsecond=0)

    response = manager.post(URL, {**VALID, "expires_at": expires_at.isoformat()}, format="json")

    body = envelope_of(response, 201)
    assert body["expires_at"] == iso(expires_at)
    assert Connection.objects.get().expires_at == expires_at


def test_injection_looking_label_is_stored_as_plain_data(manager):
    label = "x'); DROP TABLE connections_app_connection;-- <script>alert(1)</script>"

    response = manager.post(URL, {**VALID, "label": label}, format="json")

    assert envelope_of(response, 201)["label"] == label
    assert list(Connection.objects.values_list("label", flat=True)) == [label]


# --- invalid input ---------------------------------------------------------------------------


def invalid(errors: list[tuple[str, str]]) -> dict:
    return {
        "error_code": "validation",
        "safe_message": "the request is invalid",
        "errors": [{"path": path, "message": message} for path, message in errors],
    }


INVALID_BODIES = [
    pytest.param(
        {"provider": "github", "credential_type": "api_key"},
        [("credentials", "required")],
        id="no-credentials",
    ),
    pytest.param(
        {**VALID, "credentials": CANARY},
        [("credentials", "must be an object (a JSON dictionary)")],
        id="credentials-not-an-object",
    ),
    pytest.param(
        {**VALID, "credentials": {"api_key": [CANARY]}},
        [("credentials.api_key", "must be a string, not a list")],
        id="secret-of-the-wrong-type",
    ),
    pytest.param(
        {**VALID, "credentials": {"api_key": f"{CANARY}\r\nX-Injected: 1"}},
        [("credentials.api_key", KEY_CHARACTERS_MESSAGE)],
        id="header-injection-in-the-secret",
    ),
    pytest.param(
        {**VALID, "credentials": {"api_key": CANARY + "éx"}},
        [("credentials.api_key", KEY_CHARACTERS_MESSAGE)],
        id="non-ascii-key",
    ),
    pytest.param(
        {**VALID, "credentials": {"api_key": CANARY + " x"}},
        [("credentials.api_key", KEY_CHARACTERS_MESSAGE)],
        id="space-in-a-key",
    ),
    pytest.param(
        {
            **VALID,
            "credential_type": "app_password",
            "credentials": {"username": "octo:bot", "password": CANARY + "\u00e9"},
        },
        [
            ("credentials.username", USERNAME_CHARACTERS_MESSAGE),
            ("credentials.password", APP_CREDENTIAL_CHARACTERS_MESSAGE),
        ],
        id="non-ascii-password-and-colon-in-username",
    ),
    pytest.param(
        {**VALID, "credentials": {"apikey": CANARY}},
        [
            ("credentials.api_key", "required"),
            ("credentials.apikey", "unknown field (did you mean 'api_key'?); api_key credentials take: api_key"),
        ],
        id="mistyped-credential-field",
    ),
    pytest.param(
        {**VALID, "credentials": {"api_key": "k", CANARY: "v"}},
        [("credentials.(unknown field)", "unknown field; api_key credentials take: api_key")],
        id="secret-as-an-unknown-key",
    ),
    pytest.param(
        {**VALID, "credentials": {"api_key": CANARY + "x" * 4096}},
        [("credentials.api_key", "must be at most 4096 characters")],
        id="oversized-secret",
    ),
    pytest.param(
        {**VALID, "credential_type": "app_password"},
        [
            ("credentials.username", "required"),
            ("credentials.password", "required"),
            ("credentials.(unknown field)", "unknown field; app_password credentials take: username, password"),
        ],
        id="shape-of-another-type",
    ),
    pytest.param(
        {**VALID, "credential_type": "oauth2"},
        [("credential_type", "must be one of: api_key, app_password")],
        id="oauth2-by-hand",
    ),
    pytest.param(
        {**VALID, "credential_type": CANARY},
        [("credential_type", "must be one of: api_key, app_password")],
        id="unknown-credential-type",
    ),
    pytest.param(
        {**VALID, "provider": "github'; DROP TABLE connections_app_connection;--"},
        [("provider", "unknown provider; one of: github")],
        id="injection-looking-provider",
    ),
    pytest.param(
        {**VALID, "provider": "g" * 65},
        [("provider", "must be at most 64 characters")],
        id="oversized-provider",
    ),
    pytest.param(
        {**VALID, "provider": ["github"], "label": True},
        [("provider", "must be a string"), ("label", "must be a string")],
        id="wrong-types",
    ),
    pytest.param(
        {**VALID, "scopes": [f"s{i}" for i in range(51)]},
        [("scopes", "must have at most 50 items")],
        id="too-many-scopes",
    ),
    pytest.param(
        {**VALID, "scopes": ["s" * 201, ""]},
        [
            ("scopes.0", "must be at most 200 characters"),
            ("scopes.1", "must not be empty"),
        ],
        id="scope-strings",
    ),
    pytest.param(
        {**VALID, "scopes": "repo"},
        [("scopes", "must be a list")],
        id="scopes-not-a-list",
    ),
    pytest.param(
        {**VALID, "label": "l" * 101},
        [("label", "must be at most 100 characters")],
        id="oversized-label",
    ),
    pytest.param(
        {**VALID, "expires_at": "2001-01-01T00:00:00Z"},
        [("expires_at", "must be in the future")],
        id="expired",
    ),
    pytest.param(
        {**VALID, "expires_at": CANARY},
        [("expires_at", "must be an ISO 8601 date-time")],
        id="not-a-date",
    ),
    pytest.param(
        {**VALID, "expires_at": "0001-01-01T00:00:00+01:00"},
        [("expires_at", "Datetime value out of range.")],
        id="date-out-of-range",
    ),
    pytest.param(
        {**VALID, "owner_tenant": "globex", "id": "4f6c2a9e-8d1b-4c3e-9a57-0b2d6e8f1a34"},
        [
            (
                "(unknown field)",
                "unknown field; the fields are: provider, credential_type, credentials, scopes, expires_at, label",
            )
        ],
        id="unknown-fields",
    ),
]


@pytest.mark.parametrize(("body", "errors"), INVALID_BODIES)
def test_invalid_input_answers_422_naming_the_field_never_the_value(manager, body, errors):
    response = manager.post(URL, body, format="json")

    assert envelope_of(response, 422) == invalid(errors)
    assert CANARY not in response.content.decode()
    assert Connection.objects.count() == 0
    assert ConnectionEvent.objects.count() == 0


RAW_BODIES = [
    pytest.param(b"", 400, "request body is empty", id="empty"),
    pytest.param(b"[]", 400, "request body must be a JSON object", id="array"),
    pytest.param(b'{"provider": "github",', 400, "request body is not valid JSON", id="truncated"),
    pytest.param(
        (
            '{"provider": "github", "credential_type": "api_key", '
            f'"credentials": {{"api_key": "k", "api_key": "{CANARY}"}}}}'
        ).encode(),
        400,
        "duplicate key in a JSON object",
        id="duplicate-key",
    ),
    pytest.param(
        b'{"provider": "github", "credential_type": "api_key", "credentials": '
        + b'{"a":' * 5_000
        + b"1"
        + b"}" * 5_001,
        400,
        "JSON nests deeper than 32 levels",
        id="deeply-nested",
    ),
    pytest.param(
        b'{"provider": "github", "credential_type": "api_key", "credentials": {"api_key": "k\\u0000"}}',
        400,
        "JSON strings must not contain NUL characters or unpaired surrogates",
        id="nul-in-the-secret",
    ),
    pytest.param(
        json.dumps({**VALID, "label": "x" * (65 * 1024)}).encode(),
        413,
        "request body exceeds 65536 bytes",
        id="oversized-body",
    ),
]


@pytest.mark.parametrize(("raw", "status", "message"), RAW_BODIES)
def test_malformed_body_answers_the_envelope_and_stores_nothing(manager, raw, status, message):
    response = manager.generic("POST", URL, raw, content_type="application/json")

    body = envelope_of(response, status)
    assert body == {"error_code": "validation" if status == 413 else "invalid_json", "safe_message": message}
    assert CANARY not in response.content.decode()
    assert Connection.objects.count() == 0


# --- list ------------------------------------------------------------------------------------


def test_list_answers_the_tenants_connections_newest_first(acme, manager, foreign_connection):
    # given three connections of acme, one revoked, besides globex's
    older = ConnectionFactory(tenant=acme, label="older")
    middle = ConnectionFactory(tenant=acme, label="middle", credentials={"api_key": CANARY})
    newest = ConnectionFactory(tenant=acme, label="newest")
    connection_revoke(connection=middle)

    # when
    response = manager.get(URL)

    # then
    body = envelope_of(response, 200)
    assert (body["count"], body["next"], body["previous"]) == (3, None, None)
    assert body["results"] == [as_api(newest), as_api(middle), as_api(older)]
    assert body["results"][1]["status"] == "revoked"
    assert str(foreign_connection.pk) not in response.content.decode()
    assert CANARY not in response.content.decode()


def test_list_is_paginated(acme, manager):
    rows = [ConnectionFactory(tenant=acme) for _ in range(3)]

    first = envelope_of(manager.get(URL, {"limit": 2}), 200)
    second = envelope_of(manager.get(URL, {"limit": 2, "offset": 2}), 200)

    assert [row["id"] for row in first["results"]] == [str(rows[2].pk), str(rows[1].pk)]
    assert first["next"] == "http://testserver/api/v1/connections?limit=2&offset=2"
    assert [row["id"] for row in second["results"]] == [str(rows[0].pk)]
    assert (second["count"], second["next"]) == (3, None)


def test_list_of_a_tenant_without_connections_is_empty(manager, foreign_connection):
    assert envelope_of(manager.get(URL), 200) == {"count": 0, "next": None, "previous": None, "results": []}


def test_list_query_count_does_not_grow_with_rows(acme, manager, django_assert_max_num_queries):
    for _ in range(20):
        ConnectionFactory(tenant=acme)
    manager.get(URL)  # the first call of a key loads it and records its use

    with django_assert_max_num_queries(4):
        response = manager.get(URL)

    assert len(response.json()["results"]) == 20


# --- detail ----------------------------------------------------------------------------------


def test_detail_answers_the_connection(acme, manager):
    connection = ConnectionFactory(tenant=acme, credentials={"api_key": CANARY}, scopes=["repo"])

    response = manager.get(f"{URL}/{connection.pk}")

    assert envelope_of(response, 200) == as_api(connection)
    assert CANARY not in response.content.decode()


NOT_FOUND = {"error_code": "not_found", "safe_message": "no such connection in this tenant"}


def test_an_api_key_past_its_expiry_says_expired_and_an_oauth_token_stays_active(acme, manager):
    past = timezone.now() - timedelta(minutes=1)
    api_key = ConnectionFactory(tenant=acme)
    oauth = ConnectionFactory(tenant=acme)
    Connection.objects.filter(pk=api_key.pk).update(expires_at=past)
    Connection.objects.filter(pk=oauth.pk).update(expires_at=past, credential_type="oauth2")  # refreshed on use

    statuses = {row["id"]: row["status"] for row in manager.get(URL).json()["results"]}

    assert statuses == {str(api_key.pk): "expired", str(oauth.pk): "active"}


@pytest.mark.parametrize(
    "reference",
    ["foreign", "00000000-0000-0000-0000-000000000000", "not-a-uuid", "1%20OR%201=1", "%E2%80%AE", "%00"],
)
def test_another_tenants_unknown_or_malformed_id_answers_the_same_404(manager, foreign_connection, reference):
    connection_id = str(foreign_connection.pk) if reference == "foreign" else reference
    before = snapshot(foreign_connection)

    detail = manager.get(f"{URL}/{connection_id}")
    revoke = manager.post(f"{URL}/{connection_id}/revoke")

    assert envelope_of(detail, 404) == NOT_FOUND
    assert envelope_of(revoke, 404) == NOT_FOUND
    assert snapshot(foreign_connection) == before
    assert ConnectionEvent.objects.filter(kind=ConnectionEvent.Kind.REVOKED).count() == 0


# --- revoke ----------------------------------------------------------------------------------


def test_revoke_answers_the_revoked_connection_and_a_second_revoke_changes_nothing(acme, manager):
    connection = ConnectionFactory(tenant=acme, credentials={"api_key": CANARY})

    first = manager.post(f"{URL}/{connection.pk}/revoke")
    connection.refresh_from_db()
    second = manager.post(f"{URL}/{connection.pk}/revoke")

    body = envelope_of(first, 200)
    assert (body["status"], connection.status) == ("revoked", "revoked")
    assert body["revoked_at"] is not None
    assert body == as_api(connection)
    assert envelope_of(second, 200) == body
    assert Connection.objects.get(pk=connection.pk).revoked_at == connection.revoked_at
    assert ConnectionEvent.objects.filter(connection_id=connection.pk, kind="revoked").count() == 1
    assert CANARY not in first.content.decode() + second.content.decode()


def test_revoke_ignores_a_body(acme, manager):
    connection = ConnectionFactory(tenant=acme)

    response = manager.post(f"{URL}/{connection.pk}/revoke", {"status": "active", "revoked_at": None}, format="json")

    assert envelope_of(response, 200)["status"] == "revoked"


# --- authentication and scope ------------------------------------------------------------------


def endpoint_calls(connection_id: str) -> list[tuple[str, str, dict | None]]:
    return [
        ("get", URL, None),
        ("post", URL, VALID),
        ("get", f"{URL}/{connection_id}", None),
        ("post", f"{URL}/{connection_id}/revoke", None),
    ]


def call(client: APIClient, method: str, path: str, body: dict | None):
    return getattr(client, method)(path, body, format="json") if body else getattr(client, method)(path)


def test_a_tools_exec_key_is_refused_with_403_everywhere(acme):
    connection = ConnectionFactory(tenant=acme)
    _account, key = service_account_with_key(acme, name="agent", scopes=("tools:exec",))
    before = snapshot(connection)

    responses = [call(api_client(key), *request) for request in endpoint_calls(str(connection.pk))]

    for response in responses:
        assert envelope_of(response, 403) == {
            "error_code": "forbidden",
            "safe_message": "the API key lacks the connections:manage scope",
        }
    assert snapshot(connection) == before
    assert Connection.objects.count() == 1


def test_no_key_or_a_wrong_key_answers_401_everywhere(acme):
    connection = ConnectionFactory(tenant=acme)
    wrong = APIClient()
    wrong.credentials(HTTP_AUTHORIZATION="Bearer tg_nope_nope")

    for client in (APIClient(), wrong):
        for request in endpoint_calls(str(connection.pk)):
            response = call(client, *request)
            assert envelope_of(response, 401)["error_code"] == "unauthenticated"
            assert response["WWW-Authenticate"] == "Bearer"
    assert Connection.objects.count() == 1
    assert Connection.objects.get().status == "active"


# --- personal connections belong to their person ------------------------------------------------------


def test_a_key_neither_lists_reads_nor_revokes_a_persons_personal_connection(acme, manager):
    # given alice's personal connection beside the tenant's shared one
    alice = MembershipFactory(tenant=acme, user=UserFactory(username="alice"), role="member").user
    personal = ConnectionFactory(tenant=acme, owner=alice, label="alice's github")
    shared = ConnectionFactory(tenant=acme, label="team github")

    listed = manager.get("/api/v1/connections")
    read = manager.get(f"/api/v1/connections/{personal.pk}")
    revoked = manager.post(f"/api/v1/connections/{personal.pk}/revoke")

    assert [row["id"] for row in envelope_of(listed, 200)["results"]] == [str(shared.pk)]
    assert envelope_of(read, 404)["safe_message"] == "no such connection in this tenant"
    assert envelope_of(revoked, 404)["safe_message"] == "no such connection in this tenant"
    personal.refresh_from_db()
    assert (personal.revoked_at, personal.status) == (None, Connection.Status.ACTIVE)
    assert "alice" not in listed.content.decode()
