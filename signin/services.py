"""MCP clients that sign in (OAuth 2.1, docs/api.md): the rows behind Toolgate's authorization server.

The protocol itself (parameter checks, PKCE, error bodies) is Authlib's, wired
in server.py; this module owns what those hooks store and read:
clients, one-time codes, token pairs and the grant (token family) they belong
to. Codes and tokens exist in clear only in the response that carries them;
rows keep a lookup prefix and a sha256 digest.

A signed-in client acts as a service account on behalf of a person: its
tokens are tied to that person's delegation, so every subject rule of the
runner applies, and revoking the delegation, the grant or the client ends
its tokens on the next request (the token check reads the rows every time).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from changes_app.services import change_record, change_snapshot
from connections_app.services import delegation_connections_set
from core.errors import AppError
from core.ids import uuid_or_none
from policies_app.governance import governance_cache
from policies_app.keys import (
    access_token_prefix,
    key_digest,
    key_matches,
    refresh_token_prefix,
)
from policies_app.models import Delegation, ServiceAccount, Tenant, TenantMembership
from policies_app.selectors import Caller
from policies_app.services import delegation_create, redirect_uri_problem, revoke_once
from signin.models import SigninClient, SigninCode, SigninGrant, SigninToken

ACCESS_TOKEN_TTL = timedelta(hours=1)  # the contract's upper bound
REFRESH_TOKEN_TTL = timedelta(days=30)
CODE_TTL = timedelta(minutes=2)
METADATA_DOCUMENT_TTL = timedelta(hours=1)
MAX_CLIENT_REDIRECT_URIS = 10
MAX_CLIENT_NAME = 200
SIGNIN_SCOPE = "mcp"
LAST_USED_RESOLUTION = timedelta(minutes=1)
CLIENT_ID_RE = re.compile(r"[\x21-\x7e]{1,500}")
URI_CHARS_RE = re.compile(r"[\x21-\x7e]{1,500}")


class RevokeReason:
    """Why a grant ended (kept on the row and in the change log)."""

    PERSON = "revoked_by_person"
    CLIENT = "client_revoked"
    REVOCATION_ENDPOINT = "rfc7009_revocation"
    REFRESH_REUSE = "refresh_token_reused"
    CODE_REUSE = "code_reused"


# --- clients -------------------------------------------------------------------------------


def signin_redirect_uri_problem(uri: object) -> str | None:
    """Why `uri` cannot be a sign-in redirect URI: `https://…`, or `http://127.0.0.1:<port>/…` / `localhost:<port>`."""
    if not isinstance(uri, str):
        return "redirect URIs are strings"
    if not URI_CHARS_RE.fullmatch(uri):
        return "a redirect URI is printable ASCII (percent-encode anything else)"
    problem = redirect_uri_problem(uri)
    if problem is not None:
        return problem
    if uri.startswith("http://"):
        host_port = uri[len("http://") :].split("/", 1)[0]
        host, _, port = host_port.rpartition(":")
        if host not in ("127.0.0.1", "localhost", "[::1]") or not port.isdigit():
            return "an http redirect URI must be loopback with a port: http://127.0.0.1:<port>/… or http://localhost:<port>/…"
    return None


def _clean_client_fields(*, client_name: object, client_uri: object, redirect_uris: object) -> dict[str, Any]:
    """The client's own metadata, checked (AppError names the first problem)."""
    if not isinstance(redirect_uris, list) or not redirect_uris:
        raise AppError("redirect_uris: at least one redirect URI is required")
    if len(redirect_uris) > MAX_CLIENT_REDIRECT_URIS:
        raise AppError(f"redirect_uris: at most {MAX_CLIENT_REDIRECT_URIS}")
    for uri in redirect_uris:
        problem = signin_redirect_uri_problem(uri)
        if problem is not None:
            raise AppError(f"redirect_uris: {problem}")
    name = client_name if isinstance(client_name, str) else ""
    uri = client_uri if isinstance(client_uri, str) and URI_CHARS_RE.fullmatch(client_uri) else ""
    if client_name is not None and not isinstance(client_name, str):
        raise AppError("client_name: a string")
    # Untrusted display text: no control characters, bounded.
    name = "".join(ch for ch in name if ch.isprintable())[:MAX_CLIENT_NAME]
    return {"client_name": name, "client_uri": uri, "redirect_uris": list(dict.fromkeys(redirect_uris))}


@transaction.atomic
def signin_client_register(
    *, client_id: str, client_name: object, client_uri: object, redirect_uris: object, registered_from: str | None
) -> SigninClient:
    """RFC 7591 dynamic registration of a public client; the client_id is random and carries no secret."""
    fields = _clean_client_fields(client_name=client_name, client_uri=client_uri, redirect_uris=redirect_uris)
    client = SigninClient.objects.create(
        client_id=client_id,
        kind=SigninClient.Kind.REGISTERED,
        registered_from=registered_from,
        **fields,
    )
    change_record(action="signin_client.register", obj=client, after=change_snapshot(client))
    return client


@transaction.atomic
def signin_client_from_document(*, client_id: str, document: dict[str, Any], fetched_from: str) -> SigninClient:
    """Create or refresh the row of a client known by its Client ID Metadata Document (already fetched).

    `fetched_from` is the checked address the document came from, kept as the
    row's `registered_from`: a client whose document lived on a private address
    stops being usable when private networks are no longer allowed.
    """
    if document.get("client_id") != client_id:
        raise AppError("the metadata document's client_id is not its own URL")
    fields = _clean_client_fields(
        client_name=document.get("client_name"),
        client_uri=document.get("client_uri"),
        redirect_uris=document.get("redirect_uris"),
    )
    fields["registered_from"] = fetched_from.split("%", 1)[0]
    client, created = SigninClient.objects.select_for_update().get_or_create(
        client_id=client_id,
        defaults={"kind": SigninClient.Kind.METADATA_DOCUMENT, "metadata_fetched_at": timezone.now(), **fields},
    )
    if created:
        change_record(action="signin_client.register", obj=client, after=change_snapshot(client))
        return client
    before = change_snapshot(client)
    for name, value in fields.items():
        setattr(client, name, value)
    client.metadata_fetched_at = timezone.now()
    client.save(update_fields=[*fields, "metadata_fetched_at"])
    change_record(action="signin_client.update", obj=client, before=before, after=change_snapshot(client))
    return client


def client_id_well_formed(client_id: object) -> bool:
    """A client_id worth looking up: 1-500 printable ASCII characters (anything else matches no client)."""
    return isinstance(client_id, str) and CLIENT_ID_RE.fullmatch(client_id) is not None


def signin_client_get(*, client_id: str) -> SigninClient | None:
    """A live client by its client_id (None for unknown and revoked alike)."""
    if not client_id_well_formed(client_id):
        return None
    return SigninClient.objects.filter(client_id=client_id, revoked_at__isnull=True).first()


def signin_client_any(*, client_id: str) -> SigninClient | None:
    """A client by its client_id, revoked ones included (a revoked document client must stay revoked)."""
    return SigninClient.objects.filter(client_id=client_id).first() if client_id_well_formed(client_id) else None


def signin_client_is_stale(client: SigninClient) -> bool:
    fetched = client.metadata_fetched_at
    return client.kind == SigninClient.Kind.METADATA_DOCUMENT and (
        fetched is None or timezone.now() - fetched >= METADATA_DOCUMENT_TTL
    )


@transaction.atomic
def signin_client_revoke(*, client: SigninClient, revoked_by: AbstractBaseUser | None = None) -> bool:
    """Revoke a client and every grant it holds (operators, admin). False when it already was revoked."""
    if not revoke_once(row=client, action="signin_client.revoke", revoked_by=revoked_by):
        return False
    for grant in SigninGrant.objects.filter(client=client, revoked_at__isnull=True):
        signin_grant_revoke(grant=grant, revoked_by=revoked_by, reason=RevokeReason.CLIENT)
    return True


# --- consent and codes -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SigninChoice:
    """A tenant where the person may sign a client in, and the accounts it could act as."""

    tenant: Tenant
    accounts: list[ServiceAccount]


def person_is_in_a_tenant(*, user: AbstractBaseUser) -> bool:
    return TenantMembership.objects.filter(user=user).exists()


def signin_choices(*, user: AbstractBaseUser) -> list[SigninChoice]:
    """The person's tenants that have a live service account with `tools:exec`, with those accounts, by name."""
    tenant_ids = TenantMembership.objects.filter(user=user).values_list("tenant_id", flat=True)
    accounts = (
        ServiceAccount.objects.filter(tenant_id__in=tenant_ids, revoked_at__isnull=True)
        .select_related("tenant")
        .order_by("tenant__slug", "name")
    )
    by_tenant: dict[int, SigninChoice] = {}
    for account in accounts:
        if ServiceAccount.Scope.TOOLS_EXEC.value not in account.scopes:
            continue
        choice = by_tenant.setdefault(account.tenant_id, SigninChoice(tenant=account.tenant, accounts=[]))
        choice.accounts.append(account)
    return list(by_tenant.values())


@transaction.atomic
def signin_consent(*, user: AbstractBaseUser, service_account: ServiceAccount, tools: list[str]) -> Delegation:
    """The person allowed a client: their live delegation to this account with these tools, reused or made.

    A live delegation with the same tool subset is reused (its other clients
    and subject token keep working); a different subset makes a new one, which
    replaces the older (delegation_create's one-live-per-account rule).
    """
    wanted = sorted(set(tools))
    live = (
        Delegation.objects.select_for_update()
        .filter(user=user, service_account=service_account, revoked_at__isnull=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))
        .first()
    )
    if live is not None and sorted(live.tools) == wanted:
        return live
    delegation, _ = delegation_create(
        tenant=service_account.tenant,
        user=user,
        service_account=service_account,
        tools=wanted,
        origin=Delegation.Origin.CONSENT,
        issue_token=False,
    )
    return delegation


@transaction.atomic
def signin_consent_declaring(
    *, user: AbstractBaseUser, service_account: ServiceAccount, tools: list[str], connection_ids: Iterable[object]
) -> Delegation:
    """The sign-in consent's answer: the person's delegation (reused or made) and the connections it may use."""
    delegation = signin_consent(user=user, service_account=service_account, tools=tools)
    return delegation_connections_set(delegation=delegation, connection_ids=connection_ids)


def signin_code_create(
    *,
    code: str,
    client: SigninClient,
    delegation: Delegation,
    redirect_uri: str,
    code_challenge: str,
    resource: str,
    scope: str,
) -> SigninCode:
    return SigninCode.objects.create(
        code_digest=key_digest(code),
        client=client,
        delegation=delegation,
        redirect_uri=redirect_uri,
        code_challenge=code_challenge,
        resource=resource,
        scope=scope,
        expires_at=timezone.now() + CODE_TTL,
    )


def signin_code_take(*, code: str, client: SigninClient) -> SigninCode | None:
    """The code's row for its one exchange, marked used (right or wrong verifier); None when it cannot be used.

    A code presented again revokes the grant its first exchange started (the
    code leaked). Runs in the token request's transaction.
    """
    row = (
        SigninCode.objects.select_for_update(of=("self",))
        .select_related("delegation", "grant")
        .filter(code_digest=key_digest(code), client=client)
        .first()
    )
    if row is None:
        return None
    if row.used_at is not None:
        if row.grant is not None:
            signin_grant_revoke(grant=row.grant, revoked_by=None, reason=RevokeReason.CODE_REUSE)
        return None
    row.used_at = timezone.now()
    row.save(update_fields=["used_at"])
    if row.expires_at <= row.used_at or row.delegation.revoked_at is not None:
        return None
    return row


# --- tokens ------------------------------------------------------------------------------------


def signin_tokens_issue(*, code: SigninCode, access: str, refresh: str, scope: str) -> SigninToken:
    """The first pair of a new grant (family), from an exchanged code."""
    grant = SigninGrant.objects.create(
        client=code.client,
        delegation=code.delegation,
        tenant_id=code.delegation.tenant_id,
        redirect_uri=code.redirect_uri,
        resource=code.resource,
    )
    code.grant = grant
    code.save(update_fields=["grant"])
    change_record(action="signin_grant.create", obj=grant, after=change_snapshot(grant))
    return _pair(grant=grant, access=access, refresh=refresh, scope=scope)


def _pair(*, grant: SigninGrant, access: str, refresh: str, scope: str) -> SigninToken:
    """Store a pair the server generated (`tga_…`, `tgr_…`): prefixes and digests, never the tokens."""
    access_prefix, refresh_prefix = access_token_prefix(access), refresh_token_prefix(refresh)
    if access_prefix is None or refresh_prefix is None:
        raise ValueError("not a token pair of this server")
    now = timezone.now()
    return SigninToken.objects.create(
        grant=grant,
        access_prefix=access_prefix,
        access_digest=key_digest(access),
        refresh_prefix=refresh_prefix,
        refresh_digest=key_digest(refresh),
        scope=scope,
        access_expires_at=now + ACCESS_TOKEN_TTL,
        refresh_expires_at=now + REFRESH_TOKEN_TTL,
    )


def signin_refresh_take(*, refresh_token: str, client: SigninClient) -> SigninToken | None:
    """The pair whose refresh token this is, locked for rotation; None when it cannot be used.

    A refresh token already exchanged (rotated) is reuse: the whole grant is
    revoked, so whoever holds the newer tokens loses them too. Runs in the
    token request's transaction.
    """
    prefix = refresh_token_prefix(refresh_token)
    if prefix is None:
        return None
    row = (
        SigninToken.objects.select_for_update(of=("self",))
        .select_related("grant__client", "grant__delegation")
        .filter(refresh_prefix=prefix)
        .first()
    )
    if row is None or not key_matches(refresh_token, row.refresh_digest) or row.grant.client_id != client.pk:
        return None
    grant = row.grant
    if row.rotated_at is not None:
        if grant.revoked_at is None:
            signin_grant_revoke(grant=grant, revoked_by=None, reason=RevokeReason.REFRESH_REUSE)
        return None
    now = timezone.now()
    if row.revoked_at is not None or row.refresh_expires_at <= now or not _grant_usable(grant, now):
        return None
    return row


def signin_tokens_rotate(*, old: SigninToken, access: str, refresh: str, scope: str) -> SigninToken:
    """The next pair of the family; the old refresh token is spent and its access token ends."""
    now = timezone.now()
    SigninToken.objects.filter(pk=old.pk).update(rotated_at=now, revoked_at=now)
    return _pair(grant=old.grant, access=access, refresh=refresh, scope=scope)


def signin_token_find(*, token: str) -> SigninToken | None:
    """The pair holding this access or refresh token (for RFC 7009 revocation); None when none does."""
    for prefix, field, digest_of in (
        (access_token_prefix(token), "access_prefix", "access_digest"),
        (refresh_token_prefix(token), "refresh_prefix", "refresh_digest"),
    ):
        if prefix is None:
            continue
        row = SigninToken.objects.select_related("grant__client").filter(**{field: prefix}).first()
        if row is not None and key_matches(token, getattr(row, digest_of)):
            return row
    return None


@transaction.atomic
def signin_token_revoke(*, token: SigninToken) -> None:
    """RFC 7009: revoking either token of a pair ends the grant it belongs to (the client signed out)."""
    grant = SigninGrant.objects.get(pk=token.grant_id)
    signin_grant_revoke(grant=grant, revoked_by=None, reason=RevokeReason.REVOCATION_ENDPOINT)


@transaction.atomic
def signin_grant_revoke(*, grant: SigninGrant, revoked_by: AbstractBaseUser | None, reason: str) -> bool:
    """End a signed-in client's access at once: the grant and every token pair of it. False if it already was."""
    now = timezone.now()
    revoked = revoke_once(
        row=grant,
        action=f"signin_grant.revoke.{reason}",
        revoked_by=revoked_by,
        also={"revoke_reason": reason},
        now=now,
    )
    SigninToken.objects.filter(grant_id=grant.pk, revoked_at__isnull=True).update(revoked_at=now)
    return revoked


def _grant_usable(grant: SigninGrant, now: datetime) -> bool:
    delegation = grant.delegation
    return (
        grant.revoked_at is None
        and grant.client.revoked_at is None
        and delegation.revoked_at is None
        and (delegation.expires_at is None or delegation.expires_at > now)
    )


# --- the resource server: an access token on /mcp -----------------------------------------------


@dataclass(frozen=True, slots=True)
class SignedIn:
    """An access token's caller: its service account on behalf of its person, and the grant it came from."""

    caller: Caller
    grant_id: str
    grant_last_used_at: datetime | None


def caller_for_access_token(*, token: str, resources: Collection[str]) -> SignedIn | None:
    """The caller behind a live access token issued for one of `resources`; None alike for every other token.

    One query (token, grant, client, delegation, account, tenant, membership),
    read every time: a revocation anywhere along that chain, or the person
    leaving the tenant, ends the token on its next use.
    The caller holds `tools:exec` at most, whatever else its account may do.
    """
    prefix = access_token_prefix(token)
    if prefix is None:
        return None
    governance_cache.refresh()  # as caller_for_key does: the request's first governance read
    member = TenantMembership.objects.filter(
        tenant_id=OuterRef("grant__delegation__tenant_id"), user_id=OuterRef("grant__delegation__user_id")
    )
    row = (
        SigninToken.objects.select_related("grant__client", "grant__delegation__service_account__tenant")
        .annotate(person_is_member=Exists(member))
        .filter(access_prefix=prefix)
        .first()
    )
    if row is None or not key_matches(token, row.access_digest):
        return None
    now = timezone.now()
    grant = row.grant
    account = grant.delegation.service_account
    if (
        row.revoked_at is not None
        or row.access_expires_at <= now
        or grant.resource not in resources
        or not _grant_usable(grant, now)
        or account.revoked_at is not None
        or not row.person_is_member  # type: ignore[attr-defined]  # the annotation above
    ):
        return None
    caller = Caller(
        service_account_id=str(account.pk),
        tenant_id=account.tenant_id,
        tenant_slug=account.tenant.slug,
        name=account.name,
        scopes=frozenset(account.scopes) & {ServiceAccount.Scope.TOOLS_EXEC.value},
        last_used_at=account.last_used_at,
        delegation_id=str(grant.delegation_id),
    )
    return SignedIn(caller=caller, grant_id=str(grant.pk), grant_last_used_at=grant.last_used_at)


def signin_grant_note_use(*, grant_id: str, last_used_at: datetime | None) -> None:
    """Record a signed-in client's use at most once a minute (the delegations page shows it)."""
    now = timezone.now()
    if last_used_at is not None and now - last_used_at < LAST_USED_RESOLUTION:
        return
    SigninGrant.objects.filter(pk=grant_id).filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
    ).update(last_used_at=now)


# --- the people's view -----------------------------------------------------------------------------


def signin_grant_list(*, tenant_id: int, user_id: int | None = None) -> QuerySet[SigninGrant]:
    """A tenant's signed-in clients that can still call, newest first; `user_id` narrows them to one person's own."""
    rows = SigninGrant.objects.filter(
        tenant_id=tenant_id,
        revoked_at__isnull=True,
        client__revoked_at__isnull=True,
        delegation__revoked_at__isnull=True,  # a revoked delegation ended its clients' access too
    ).select_related("client", "delegation__user", "delegation__service_account")
    if user_id is not None:
        rows = rows.filter(delegation__user_id=user_id)
    return rows.order_by("-created_at")


def signin_grant_get(*, tenant_id: int, grant_id: object, user_id: int | None = None) -> SigninGrant | None:
    """One live signed-in client of the tenant (and of the person, when given); None for others' alike."""
    pk = uuid_or_none(grant_id)
    if pk is None:
        return None
    return signin_grant_list(tenant_id=tenant_id, user_id=user_id).filter(pk=pk).first()
