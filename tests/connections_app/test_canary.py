"""Canary: unique secrets stored through the API and the UI never show up anywhere they could leak.

One run stores an API key over REST and another through the web form, uses
them for a real call to a loopback GitHub, lists and revokes them, and then
searches for the secrets in: every log record (captured at DEBUG), every HTTP
response, the admin pages, the UI pages, the audit rows, the Celery task
arguments a refresh sweep sends, and every row of every table read raw from the
database (bytes included), where only the AES-GCM envelope may hold them.
"""

from __future__ import annotations

import io
import logging
import logging.config
import secrets
from datetime import timedelta
from urllib.parse import urlencode

import pytest
from django.db import connection as db_connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from config import logs
from connections_app.models import Connection, OAuthProvider
from connections_app.oauth import oauth_connection_store, oauth_provider_upsert
from connections_app.scheduling import refresh_sweep_once
from tests.factories import (
    GrantFactory,
    MembershipFactory,
    TenantFactory,
    ToolPolicyFactory,
    UserFactory,
    service_account_with_key,
)
from tests.support.api import api_client, enable_tools
from tests.support.signin import (
    TIME,
    WAIT,
    authorize_query,
    code_from,
    consent,
    exchange,
    mcp,
    pkce,
    refresh,
    registered_client_id,
    web,
)

pytestmark = pytest.mark.django_db

USER = {"login": "octocat", "id": 1, "name": "Octo", "html_url": "https://github.com/octocat"}


def canary(kind: str) -> str:
    return f"canary-{kind}-{secrets.token_hex(12)}"


def everything_in_the_database() -> str:
    """Every row of every table, read raw (bytes as latin-1 so no byte is hidden)."""
    dump = []
    with db_connection.cursor() as cursor:
        for table in db_connection.introspection.table_names(cursor):
            cursor.execute(f'SELECT * FROM "{table}"')  # noqa: S608 - table names come from introspection
            for row in cursor.fetchall():
                for value in row:
                    if isinstance(value, bytes | memoryview):
                        dump.append(bytes(value).decode("latin-1"))
                    else:
                        dump.append(str(value))
    return "\n".join(dump)


def test_canary_secrets_never_leak(  # noqa: PLR0917 - pytest fixtures
    github, tenant, caller, caplog, admin_client, django_capture_on_commit_callbacks, request
):
    caplog.set_level(logging.DEBUG)
    # The structured lines as they are written, with every field bound per request and per call.
    rendered = io.StringIO()
    structured = logging.StreamHandler(rendered)
    structured.setFormatter(logging.config.DictConfigurator({}).configure_formatter(logs.formatter("json")))
    logging.getLogger().addHandler(structured)
    request.addfinalizer(lambda: logging.getLogger().removeHandler(structured))
    api_secret, ui_secret, access_token, refresh_token = (
        canary("api"),
        canary("ui"),
        canary("access"),
        canary("refresh"),
    )
    every_secret = (api_secret, ui_secret, access_token, refresh_token)
    github.route("GET", "/user", json=USER)
    seen: list[str] = []

    # --- stored over REST, then used, listed and revoked
    _manager, manage_key = service_account_with_key(tenant, name="manager", scopes=("connections:manage",))
    rest = api_client(manage_key)
    created = rest.post(
        "/api/v1/connections",
        {"provider": "github", "credential_type": "api_key", "credentials": {"api_key": api_secret}},
        format="json",
    )
    assert created.status_code == 201
    connection_id = created.json()["id"]
    grant = GrantFactory(service_account=caller[0], connections=[Connection.objects.get(pk=connection_id)])
    executed = api_client(caller[1]).post(
        "/api/v1/tools/exec",
        {"tool_id": "github__get_user", "args": {}, "connection_id": connection_id, "grant_id": str(grant.pk)},
        format="json",
    )
    assert executed.status_code == 200
    assert github.requests[-1].headers["authorization"] == f"Bearer {api_secret}"  # the secret did work
    invalid = rest.post(
        "/api/v1/connections",
        {"provider": "github", "credential_type": "api_key", "credentials": {"api_key": api_secret, "x": 1}},
        format="json",
    )
    assert invalid.status_code == 422
    for response in (
        created,
        executed,
        invalid,
        rest.get("/api/v1/connections"),
        rest.get(f"/api/v1/connections/{connection_id}"),
        api_client(caller[1]).get("/api/v1/invocations"),
        rest.post(f"/api/v1/connections/{connection_id}/revoke"),
    ):
        seen.append(response.content.decode())

    # --- stored through the web UI
    browser = Client()
    browser.force_login(MembershipFactory(tenant=tenant, user=UserFactory(username="alice")).user)
    added = browser.post(
        "/connections/new/?type=api_key",
        {"provider": "github", "label": "ui key", "api_key": ui_secret, "scopes": "", "expires_at": ""},
    )
    assert added.status_code == 302, added.content.decode()[:500]
    ui_connection = Connection.objects.get(label="ui key")
    refused = browser.post("/connections/new/?type=api_key", {"provider": "nope", "label": "x", "api_key": ui_secret})
    assert refused.status_code == 200  # re-rendered with errors
    seen.append(refused.content.decode())
    for url in (
        "/connections/",
        f"/connections/{ui_connection.pk}/",
        f"/connections/{connection_id}/",
        "/grants/",
        "/service-accounts/",
        "/activity/",
    ):
        page = browser.get(url)
        assert page.status_code in (200, 404)
        seen.append(page.content.decode())

    # --- an OAuth connection's tokens and what a refresh sweep hands to Celery
    oauth_provider_upsert(
        name="github",
        authorize_url="https://provider.invalid/authorize",
        token_url="https://provider.invalid/token",
        client_id="client",
        client_secret=canary("client-secret"),
    )
    oauth = oauth_connection_store(
        tenant=tenant,
        provider=OAuthProvider.objects.get(name="github"),
        token={"access_token": access_token, "refresh_token": refresh_token, "expires_in": 60},
        now=timezone.now(),
        refresh_window=timedelta(minutes=10),
        created_by=None,
    )
    sent: list[tuple[str, float]] = []
    with django_capture_on_commit_callbacks(execute=True):
        refresh_sweep_once(enqueue=sent.extend)
    assert [connection_id for connection_id, _ in sent] == [str(oauth.pk)]
    seen.append(repr(sent))

    # --- operators' pages
    for url in (
        reverse("admin:connections_app_connection_changelist"),
        reverse("admin:connections_app_connection_change", args=[connection_id]),
        reverse("admin:connections_app_connection_change", args=[oauth.pk]),
        reverse("admin:connections_app_connectionevent_changelist"),
        reverse("admin:tools_app_toolinvocation_changelist"),
    ):
        page = admin_client.get(url)
        assert page.status_code == 200, url
        seen.append(page.content.decode())

    # then
    places = {
        "responses and pages": "\n".join(seen),
        "logs": caplog.text + repr([(record.msg, record.args) for record in caplog.records]),
        "structured log lines": rendered.getvalue(),
        "database": everything_in_the_database(),
    }
    assert any(record.levelno == logging.DEBUG for record in caplog.records)  # DEBUG capture is live
    # the structured lines are live too, with the request's and the call's ids bound
    assert f'"tool_call_id": "{executed.json()["tool_call_id"]}"' in rendered.getvalue()
    assert '"tool_id": "github__get_user"' in rendered.getvalue()
    leaks = [(place, secret[:14]) for place, text in places.items() for secret in every_secret if secret in text]
    assert leaks == []


def secret_part(value: str) -> str:
    """A token's secret without its public `tga_<prefix>_` / `tgr_<prefix>_` (prefixes are stored on purpose)."""
    return value.split("_", 2)[2] if value.startswith(("tga_", "tgr_")) else value


def test_sign_in_codes_verifiers_and_tokens_never_leak(caplog, admin_client, request, settings):
    """MCP sign-in : codes, PKCE verifiers, access and refresh tokens appear only in the
    responses that hand them to the client, never in logs, pages, audit rows, the change log or any table."""
    settings.ALLOWED_HOSTS = ["localhost", "testserver"]
    # Authlib's grants log "Issue token %r" at DEBUG: its loggers must stay above it (config/settings.py).
    assert logging.getLogger("authlib.oauth2.rfc6749.grants.authorization_code").getEffectiveLevel() > logging.DEBUG
    caplog.set_level(logging.DEBUG)
    rendered = io.StringIO()
    structured = logging.StreamHandler(rendered)
    structured.setFormatter(logging.config.DictConfigurator({}).configure_formatter(logs.formatter("json")))
    logging.getLogger().addHandler(structured)
    request.addfinalizer(lambda: logging.getLogger().removeHandler(structured))
    tenant = TenantFactory(slug="acme")
    ada = MembershipFactory(tenant=tenant, user=UserFactory(username="ada")).user
    enable_tools(TIME, WAIT)
    ToolPolicyFactory(tenant=tenant, allowed_tools=[TIME, WAIT])
    service_account_with_key(tenant, name="assistant")
    seen: list[str] = []

    # --- sign in, call, refresh (twice: the second is reuse), revoke
    client_id = registered_client_id()
    browser = web()
    browser.force_login(ada)
    verifier, challenge = pkce()
    seen.append(browser.get(f"/oauth/authorize?{urlencode(authorize_query(client_id, challenge))}").content.decode())
    code = code_from(consent(browser, client_id, challenge))
    first = exchange(client_id, code, verifier).json()
    wrong = exchange(client_id, code, verifier)  # a reused code: refused, and the grant it started is revoked
    seen.append(wrong.content.decode())
    verifier2, challenge2 = pkce()
    code2 = code_from(consent(browser, client_id, challenge2))
    bad_verifier = exchange(client_id, code2, verifier2[::-1])
    seen.append(bad_verifier.content.decode())
    verifier3, challenge3 = pkce()
    code3 = code_from(consent(browser, client_id, challenge3))
    second = exchange(client_id, code3, verifier3).json()
    call = mcp(second["access_token"], "tools/call", {"name": TIME, "arguments": {}})
    assert call.json()["result"]["isError"] is False
    seen.append(call.content.decode())
    rotated = refresh(client_id, second["refresh_token"]).json()
    reused = refresh(client_id, second["refresh_token"])
    seen.append(reused.content.decode())
    seen.append(
        web().post("/oauth/revoke", {"token": rotated["access_token"], "client_id": client_id}).content.decode()
    )
    seen.append(mcp(rotated["access_token"], "tools/list").content.decode())

    # --- the pages people and operators read
    for url in ("/delegations/", "/activity/"):
        seen.append(browser.get(url).content.decode())
    for url in (
        reverse("admin:signin_signinclient_changelist"),
        reverse("admin:policies_app_delegation_changelist"),
        reverse("admin:tools_app_toolinvocation_changelist"),
        reverse("admin:changes_app_change_changelist"),
    ):
        page = admin_client.get(url)
        assert page.status_code == 200, url
        seen.append(page.content.decode())

    # then
    secrets_handed_out = {
        "code": code,
        "reused code's verifier": verifier,
        "wrong verifier": verifier2[::-1],
        "verifier": verifier3,
        "access token": second["access_token"],
        "refresh token": second["refresh_token"],
        "rotated access token": rotated["access_token"],
        "rotated refresh token": rotated["refresh_token"],
        "first access token": first["access_token"],
        "first refresh token": first["refresh_token"],
    }
    places = {
        "responses and pages": "\n".join(seen),
        "logs": caplog.text + repr([(record.msg, record.args) for record in caplog.records]),
        "structured log lines": rendered.getvalue(),
        "database": everything_in_the_database(),
    }
    assert any(record.levelno == logging.DEBUG for record in caplog.records)
    leaks = [
        (place, name)
        for place, text in places.items()
        for name, value in secrets_handed_out.items()
        if value in text or secret_part(value) in text
    ]
    assert leaks == []
