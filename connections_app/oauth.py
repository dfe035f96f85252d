"""OAuth 2 with Authlib: providers, the authorization-code flow with PKCE, token requests.

The flow's one-time state lives in the user's session, keyed by the random
`state` and bound to the tenant it was started for; popping it on the callback
makes it single-use. Token endpoint answers are classified here once, so the
callback and the refresher speak the same three outcomes: tokens, a terminal
refusal (`invalid_grant` and other OAuth errors) or a transient failure
(timeout, network error, 5xx) that may be retried.

Authlib 1.9 speaks httpx2 (the fork the MCP SDK depends on, pinned in requirements.txt), so
the exceptions caught here are httpx2's (the one HTTP client library Toolgate runs on).

Authlib's clients log request bodies (PKCE verifier, codes, tokens) at DEBUG:
settings keep the `authlib` logger at WARNING.
"""

from __future__ import annotations

import functools
import secrets
import ssl
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx2
from authlib.common.security import generate_token
from authlib.integrations.base_client.errors import OAuthError
from authlib.integrations.httpx_client import OAuth2Client
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction

from changes_app.services import change_snapshot
from connections_app.credentials import credentials_validate
from connections_app.models import Connection, ConnectionEvent, OAuthProvider
from connections_app.services import connection_change_record, connection_event_record, seal_credentials_into
from core.crypto import KeyRing, open_sealed, seal
from core.errors import AppError, field_errors_of
from policies_app.models import Tenant
from policies_app.tracing import trace_context_injected

STATE_TTL = timedelta(minutes=10)
SESSION_KEY = "toolgate_oauth_flows"
MAX_PENDING_FLOWS = 5  # per session: older ones are dropped


class TokenRequestFailed(Exception):
    """The token endpoint refused (terminal) or could not be reached (transient).

    `error` is the OAuth error code (`invalid_grant`, ...) or `timeout`,
    `network`, `server_error`; never a token or a provider's free text.
    """

    def __init__(self, error: str, *, transient: bool) -> None:
        super().__init__(f"token endpoint: {error}")
        self.error = error
        self.transient = transient


# --- providers (operators) -------------------------------------------------------------


@transaction.atomic
def oauth_provider_upsert(
    *,
    name: str,
    authorize_url: str,
    token_url: str,
    client_id: str,
    client_secret: str,
    scopes: Iterable[str] = (),
    use_pkce: bool = True,
    display_name: str = "",
) -> tuple[OAuthProvider, bool]:
    """Create or update a provider by name; the client secret is sealed, bound to the name."""
    provider = OAuthProvider.objects.select_for_update().filter(name=name).first()
    created = provider is None
    provider = provider or OAuthProvider(name=name)
    provider.authorize_url = authorize_url
    provider.token_url = token_url
    provider.client_id = client_id
    provider.default_scopes = sorted({scope.strip() for scope in scopes if scope.strip()})
    provider.use_pkce = use_pkce
    provider.display_name = display_name or provider.display_name
    oauth_provider_set_secret(provider=provider, client_secret=client_secret)
    try:
        provider.full_clean()
    except ValidationError as error:  # said field by field: "token_url: Enter a valid URL."
        fields = "; ".join(f"{field}: {' '.join(messages)}" for field, messages in error.message_dict.items())
        raise AppError(fields, field_errors=field_errors_of(error)) from None
    provider.save()
    return provider, created


def oauth_provider_set_secret(*, provider: OAuthProvider, client_secret: str) -> None:
    """Seal a new client secret into the (unsaved or saved) row; the caller saves."""
    if not client_secret:
        raise AppError("the client secret is empty", field_errors=[("client_secret", "required")])
    sealed = seal(client_secret.encode(), binding=provider.binding(), ring=KeyRing.from_settings())
    provider.encrypted_client_secret = sealed.blob
    provider.encryption_key_id = sealed.key_id


def oauth_client(provider: OAuthProvider, *, redirect_uri: str | None = None, timeout_s: float = 10.0) -> OAuth2Client:
    """An Authlib client for this provider; closes with `with`. Raises CredentialError if the secret won't open."""
    secret = open_sealed(provider.encrypted_client_secret, binding=provider.binding(), ring=KeyRing.from_settings())
    client = OAuth2Client(
        client_id=provider.client_id,
        client_secret=secret.decode(),
        scope=" ".join(provider.default_scopes) or None,
        redirect_uri=redirect_uri,
        code_challenge_method="S256" if provider.use_pkce else None,
        timeout=httpx2.Timeout(timeout_s),
        follow_redirects=False,
        verify=_tls_context(),
    )
    client.event_hooks["request"].append(trace_context_injected)  # only the capability's client is instrumented
    client.register_compliance_hook("access_token_response", _refuse_server_errors)
    client.register_compliance_hook("refresh_token_response", _refuse_server_errors)
    return client


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """httpx2's default certificate verification, built once per process and shared by every client.

    Each token call gets a fresh client, and building its TLS context (loading the CA bundle) costs
    ~60 ms of CPU, ten times the rest of a refresh: 1,000 refreshes due together took a minute of CPU.
    """
    return httpx2.create_ssl_context()


def _refuse_server_errors(response: httpx2.Response) -> httpx2.Response:
    if response.status_code >= 500:
        raise TokenRequestFailed("server_error", transient=True)
    return response


def token_request(call: Any) -> dict[str, Any]:
    """Run one Authlib token call, classifying every failure into TokenRequestFailed."""
    try:
        token = call()
    except TokenRequestFailed:
        raise
    except OAuthError as exc:
        raise TokenRequestFailed(_oauth_error_code(exc.error), transient=False) from None
    except httpx2.TimeoutException:
        raise TokenRequestFailed("timeout", transient=True) from None
    except httpx2.HTTPError:
        raise TokenRequestFailed("network", transient=True) from None
    except ValueError:  # a body that is not a token response
        raise TokenRequestFailed("invalid_response", transient=False) from None
    if not isinstance(token, Mapping) or not isinstance(token.get("access_token"), str):
        raise TokenRequestFailed("invalid_response", transient=False)
    return dict(token)


def _oauth_error_code(error: object) -> str:
    text = str(error or "oauth_error")
    return text if text.replace("_", "").isalnum() and len(text) <= 40 else "oauth_error"


def token_expiry(token: Mapping[str, Any], *, now: datetime) -> datetime | None:
    """When the access token expires, from `expires_in` (seconds) if the provider said."""
    expires_in = token.get("expires_in")
    if isinstance(expires_in, int | float) and not isinstance(expires_in, bool) and expires_in > 0:
        return now + timedelta(seconds=int(expires_in))
    return None


def token_credentials(token: Mapping[str, Any], *, previous_refresh_token: str | None = None) -> dict[str, Any]:
    """The oauth2 credential blob for a token answer; keeps the old refresh token when none came back."""
    credentials = {
        "access_token": token["access_token"],
        "token_type": str(token.get("token_type") or "Bearer")[:32],
    }
    refresh_token = token.get("refresh_token") or previous_refresh_token
    if refresh_token:
        credentials["refresh_token"] = refresh_token
    return credentials_validate("oauth2", credentials)


# --- the authorization-code flow (tenant users) -------------------------------------------


@dataclass(frozen=True, slots=True)
class PendingFlow:
    """What the callback needs, kept in the session under the state (no secret of ours: the
    PKCE verifier is worthless without the code, which only the provider's redirect carries)."""

    provider: str
    tenant_id: int
    code_verifier: str
    redirect_uri: str
    started_at: float
    reconnect: str = ""  # id of a connection this flow re-authorises
    owner_id: int | None = None  # a personal connection of this user (the one who started the flow)
    connect_ask: str = ""  # a call's connect page started it: declare the connection for that call's client

    def expired(self, now: float) -> bool:
        return now - self.started_at > STATE_TTL.total_seconds()


def oauth_flow_start(
    *,
    session: Any,
    provider: OAuthProvider,
    tenant: Tenant,
    redirect_uri: str,
    reconnect: str = "",
    owner_id: int | None = None,
    connect_ask: str = "",
) -> str:
    """The provider's authorization URL; remembers the flow in the session under a fresh state."""
    state = generate_token(32)
    verifier = secrets.token_urlsafe(64)
    with oauth_client(provider, redirect_uri=redirect_uri) as client:
        url, _ = client.create_authorization_url(
            provider.authorize_url, state=state, code_verifier=verifier if provider.use_pkce else None
        )
    flows = dict(session.get(SESSION_KEY) or {})
    flows[state] = {
        "provider": provider.name,
        "tenant_id": tenant.pk,
        "code_verifier": verifier if provider.use_pkce else "",
        "redirect_uri": redirect_uri,
        "started_at": time.time(),
        "reconnect": reconnect,
        "owner_id": owner_id,
        "connect_ask": connect_ask,
    }
    session[SESSION_KEY] = dict(sorted(flows.items(), key=lambda item: item[1]["started_at"])[-MAX_PENDING_FLOWS:])
    return url


def oauth_flow_pop(*, session: Any, state: str) -> PendingFlow | None:
    """The flow for this state, removed from the session (single use); None if unknown or expired."""
    flows = dict(session.get(SESSION_KEY) or {})
    raw = flows.pop(state, None) if state else None
    session[SESSION_KEY] = flows
    if not isinstance(raw, dict):
        return None
    flow = PendingFlow(**raw)
    return None if flow.expired(time.time()) else flow


@transaction.atomic
def oauth_connection_store(
    *,
    tenant: Tenant,
    provider: OAuthProvider,
    token: Mapping[str, Any],
    now: datetime,
    refresh_window: timedelta,
    created_by: AbstractBaseUser | None,
    label: str = "",
    owner: AbstractBaseUser | None = None,
) -> Connection:
    """A new oauth2 connection from a token answer, encrypted, with its refresh scheduled.

    `owner` makes it a personal connection: usable only by calls on that person's behalf.
    """
    expires_at = token_expiry(token, now=now)
    scope = token.get("scope")
    scopes = scope.split() if isinstance(scope, str) and scope else list(provider.default_scopes)
    connection = Connection(
        tenant=tenant,
        provider=provider.name,
        credential_type=Connection.CredentialType.OAUTH2,
        label=label or str(provider),
        scopes=sorted(set(scopes))[:50],
        expires_at=expires_at,
        created_by=created_by,
        owner=owner,
        next_refresh_at=(expires_at - refresh_window) if expires_at and token.get("refresh_token") else None,
    )
    seal_credentials_into(connection, token_credentials(token))
    connection.full_clean()
    connection.save()
    event = connection_event_record(
        connection, ConnectionEvent.Kind.CREATED, actor=created_by, detail="connected via OAuth"
    )
    connection_change_record(connection, "connection.create", before=None, event=event)
    return connection


@transaction.atomic
def oauth_connection_reconnect(
    *,
    connection: Connection,
    token: Mapping[str, Any],
    now: datetime,
    refresh_window: timedelta,
    actor: AbstractBaseUser | None,
) -> Connection:
    """New tokens for a connection that needs re-authorisation (same id: its grants keep working)."""
    row = Connection.objects.select_for_update().get(pk=connection.pk)
    if row.revoked_at is not None:
        raise AppError("the connection has been revoked; connect again instead")
    before = change_snapshot(row)
    expires_at = token_expiry(token, now=now)
    seal_credentials_into(row, token_credentials(token))
    scope = token.get("scope")
    if isinstance(scope, str) and scope:
        row.scopes = sorted(set(scope.split()))[:50]
    row.expires_at = expires_at
    row.next_refresh_at = (expires_at - refresh_window) if expires_at and token.get("refresh_token") else None
    row.status = Connection.Status.ACTIVE
    row.refresh_failures = 0
    row.last_refresh_error = ""
    row.save()
    event = connection_event_record(row, ConnectionEvent.Kind.REFRESHED, actor=actor, detail="re-authorised via OAuth")
    connection_change_record(row, "connection.reauthorise", before=before, event=event)
    return row


def oauth_code_exchange(*, provider: OAuthProvider, flow: PendingFlow, code: str) -> dict[str, Any]:
    """Exchange an authorization code (with the flow's PKCE verifier and exact redirect URI) for tokens."""
    with oauth_client(provider, redirect_uri=flow.redirect_uri) as client:
        return token_request(
            lambda: client.fetch_token(
                provider.token_url,
                grant_type="authorization_code",
                code=code,
                redirect_uri=flow.redirect_uri,
                **({"code_verifier": flow.code_verifier} if flow.code_verifier else {}),
            )
        )
