"""Single sign-on logins: starting one, finishing one, and the roles a login grants.

A login is started for one provider and one audience (admin or the portal);
the state, nonce and PKCE verifier wait in the session under the state, and the
callback pops them, so a state works once. The callback checks the ID token
(identity_app.oidc), finds the user by (provider, subject), and sets their roles
to exactly what the role mappings grant for the groups the token carries now.
Every login, every refusal and every role change is written to the change log
in the transaction that makes it.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, Group
from django.core import signing
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from changes_app.context import Actor, actor_for_user, change_source, current_source
from changes_app.kinds import ActorKind, Origin
from changes_app.services import ObjectRef, change_record, change_snapshot
from core.crypto import CredentialError, KeyRing, open_sealed, reseal, seal
from core.errors import AppError
from core.key_rotation import RewrapOutcome
from identity_app import oidc
from identity_app.models import (
    OPERATOR_GROUP_NAMES,
    ExternalIdentity,
    IdentityProvider,
    RoleMapping,
    SingleSignOnSession,
)
from identity_app.oidc import LOGOUT_TOKEN_MAX_AGE_S, LoginRefused, LogoutTokenRefused
from identity_app.permission_sets import operator_groups_ensure
from policies_app.models import TenantMembership

PENDING_KEY = "toolgate_sso_pending"
PENDING_TTL_S = 600
MAX_PENDING = 5
AUDIENCES = ("admin", "portal")
BREAK_GLASS_SALT = "toolgate.identity.break-glass"
BREAK_GLASS_TTL_S = 900


# --- providers -----------------------------------------------------------------------------


def provider_secret_set(*, provider: IdentityProvider, client_secret: str) -> None:
    """Seal the client secret onto the row (saved by the caller); an empty secret is refused."""
    if not client_secret:
        raise AppError("the client secret is empty", field_errors=[("client_secret", "required")])
    sealed = seal(client_secret.encode(), binding=provider.binding(), ring=KeyRing.from_settings())
    provider.encrypted_client_secret = sealed.blob
    provider.encryption_key_id = sealed.key_id


@transaction.atomic
def provider_save(*, provider: IdentityProvider, client_secret: str | None) -> IdentityProvider:
    """Create or update a provider (a new secret when one is given) and remember it in the change log."""
    before = None
    if provider.pk is not None:
        before = change_snapshot(IdentityProvider.objects.get(pk=provider.pk))
    if client_secret:
        provider_secret_set(provider=provider, client_secret=client_secret)
    elif provider.pk is None:
        raise AppError("a new provider needs its client secret", field_errors=[("client_secret", "required")])
    provider.full_clean(exclude=["encrypted_client_secret", "encryption_key_id"])
    provider.save()
    change_record(action="sso.provider.save", obj=provider, before=before, after=change_snapshot(provider))
    oidc.caches_clear()  # the issuer may have changed: discover again
    return provider


def provider_client_secret(provider: IdentityProvider) -> str:
    return open_sealed(
        provider.encrypted_client_secret, binding=provider.binding(), ring=KeyRing.from_settings()
    ).decode()


def provider_secret_rewrap(*, provider: IdentityProvider, ring: KeyRing) -> RewrapOutcome:
    """Re-encrypt a provider's client secret under the ring's primary key, compare-and-swap on the envelope."""
    old_blob = bytes(provider.encrypted_client_secret)
    try:
        sealed = reseal(old_blob, binding=provider.binding(), ring=ring)
    except CredentialError as exc:
        return RewrapOutcome(False, str(exc), error=exc)
    updated = IdentityProvider.objects.filter(pk=provider.pk, encrypted_client_secret=old_blob).update(
        encrypted_client_secret=sealed.blob, encryption_key_id=sealed.key_id
    )
    return RewrapOutcome(True) if updated else RewrapOutcome(False, "changed concurrently")


@transaction.atomic
def role_mapping_save(*, mapping: RoleMapping) -> RoleMapping:
    before = change_snapshot(RoleMapping.objects.get(pk=mapping.pk)) if mapping.pk else None
    mapping.full_clean()
    mapping.save()
    change_record(action="sso.role_mapping.save", obj=mapping, before=before, after=change_snapshot(mapping))
    return mapping


@transaction.atomic
def role_mapping_delete(*, mapping: RoleMapping) -> None:
    change_record(action="sso.role_mapping.delete", obj=mapping, before=change_snapshot(mapping), after=None)
    mapping.delete()


# --- starting a login ----------------------------------------------------------------------


def login_start(*, session: Any, provider: IdentityProvider, audience: str, redirect_uri: str, next_url: str) -> str:
    """The provider's authorization URL; what the callback needs waits in the session under the state."""
    if audience not in AUDIENCES:
        raise LoginRefused("unknown sign-in page")
    if audience == "admin" and provider.tenant_id is not None:
        raise LoginRefused("a tenant's own provider does not sign in to admin")
    metadata = oidc.provider_metadata(provider.issuer)
    request = oidc.authorization_request(
        metadata=metadata, client_id=provider.client_id, scopes=list(provider.scopes), redirect_uri=redirect_uri
    )
    now = time.time()
    pending = {
        state: flow
        for state, flow in dict(session.get(PENDING_KEY) or {}).items()
        if now - float(flow.get("created", 0)) < PENDING_TTL_S
    }
    pending[request.state] = {
        "provider": provider.pk,
        "nonce": request.nonce,
        "verifier": request.code_verifier,
        "audience": audience,
        "next": next_url,
        "redirect_uri": redirect_uri,
        "created": now,
    }
    # A person who opens several sign-in tabs keeps the newest few; the oldest states stop working.
    session[PENDING_KEY] = dict(sorted(pending.items(), key=lambda item: item[1]["created"])[-MAX_PENDING:])
    return request.url


# --- finishing a login ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoginOutcome:
    user: AbstractBaseUser
    provider: IdentityProvider
    audience: str
    next_url: str
    id_token: str
    subject: str
    sid: str  # the provider's session id, when its ID token names one (back-channel logout uses it)


def _origin(audience: str) -> str:
    return Origin.ADMIN if audience == "admin" else Origin.TENANT_UI


def login_refusal_record(
    *, reason: str, provider: IdentityProvider | None, audience: str, subject: str = "", username: str = ""
) -> None:
    """Remember a refused login (its own transaction: nothing else is written when a login is refused)."""
    with transaction.atomic(), change_source(_origin(audience), current_source()[1]):
        change_record(
            action="sso.login_refused",
            obj=_login_ref(provider, subject, username),
            before=None,
            after={
                "provider": provider.slug if provider else "",
                "subject": subject,
                "username": username,
                "audience": audience,
                "reason": reason,
            },
        )


def _login_ref(provider: IdentityProvider | None, subject: str, username: str) -> ObjectRef:
    slug = provider.slug if provider else "?"
    return ObjectRef(
        type="identity_app.login",
        id=f"{slug}:{subject}"[:100] if subject else slug,
        label=f"{username or subject or 'unknown user'} via {slug}",
        tenant_id=provider.tenant_id if provider else None,
    )


def login_complete(*, session: Any, state: str, code: str, error: str = "") -> LoginOutcome:
    """Check the callback and the ID token, then provision the user and their roles; LoginRefused if not.

    The pending login is popped before anything else, so a state is used once
    whatever happens next. A refusal is recorded in the change log and raised.
    """
    pending = dict(session.get(PENDING_KEY) or {})
    flow = pending.pop(state, None) if state else None
    session[PENDING_KEY] = pending
    if flow is None:
        login_refusal_record(reason="unknown or already used state", provider=None, audience="portal")
        raise LoginRefused("this sign-in link has expired or was already used; start again")
    audience = str(flow["audience"])
    provider = IdentityProvider.objects.filter(pk=flow["provider"], is_enabled=True).first()
    if provider is None:
        login_refusal_record(reason="provider removed or disabled", provider=None, audience=audience)
        raise LoginRefused("this identity provider is no longer enabled")
    try:
        if time.time() - float(flow["created"]) >= PENDING_TTL_S:
            raise LoginRefused("the sign-in took too long; start again")
        if error:
            raise LoginRefused(f"the identity provider refused the sign-in ({error[:60]})")
        if not code:
            raise LoginRefused("the identity provider sent no code")
        metadata = oidc.provider_metadata(provider.issuer)
        try:
            secret = provider_client_secret(provider)
        except CredentialError:
            raise LoginRefused("the provider's client secret does not open; an operator must set it again") from None
        token = oidc.code_exchange(
            metadata=metadata,
            client_id=provider.client_id,
            client_secret=secret,
            redirect_uri=str(flow["redirect_uri"]),
            code=code,
            code_verifier=str(flow["verifier"]),
        )
        claims = oidc.id_token_claims(
            str(token["id_token"]),
            metadata=metadata,
            client_id=provider.client_id,
            nonce=str(flow["nonce"]),
            access_token=token.get("access_token"),
        )
        if _claims_missing(provider, claims):
            userinfo = oidc.userinfo_claims(metadata=metadata, access_token=str(token.get("access_token") or ""))
            claims = oidc.claims_with_userinfo(claims, userinfo)
    except LoginRefused as refused:
        login_refusal_record(reason=refused.safe_message, provider=provider, audience=audience)
        raise
    user = identity_login(provider=provider, claims=claims, audience=audience)
    return LoginOutcome(
        user=user,
        provider=provider,
        audience=audience,
        next_url=str(flow["next"]),
        id_token=str(token["id_token"]),
        subject=_claim_text(claims, "sub"),
        sid=_claim_text(claims, "sid")[:255],
    )


def _claims_missing(provider: IdentityProvider, claims: Mapping[str, Any]) -> bool:
    """Whether the ID token lacks a claim the provider is configured to read (then UserInfo is asked).

    Many providers put profile, email and groups claims in the UserInfo
    response only (Entra ID and Google keep the ID token small, Keycloak per
    mapper), so a login reads them from there rather than seeing no groups.
    """
    wanted = (provider.username_claim, provider.email_claim, provider.groups_claim)
    return any(name and name not in claims for name in wanted)


def _claim_text(claims: Mapping[str, Any], name: str) -> str:
    value = claims.get(name) if name else None
    return value.strip() if isinstance(value, str) else ""


def claim_groups(claims: Mapping[str, Any], name: str) -> list[str]:
    """The groups a token carries: a list of strings, or one space- or comma-separated string."""
    value = claims.get(name) if name else None
    if isinstance(value, str):
        value = value.replace(",", " ").split()
    if not isinstance(value, list):
        return []
    return sorted({item for item in value if isinstance(item, str) and item})


def identity_login(*, provider: IdentityProvider, claims: Mapping[str, Any], audience: str) -> AbstractBaseUser:
    """Find or create the user for these verified claims and set their roles; LoginRefused if they may not in."""
    subject = _claim_text(claims, "sub")
    username = _claim_text(claims, provider.username_claim) or subject
    email = _claim_text(claims, provider.email_claim)
    groups = claim_groups(claims, provider.groups_claim)
    try:
        with transaction.atomic():
            user = _user_for(provider=provider, subject=subject, username=username, email=email, claims=claims)
    except LoginRefused as refused:
        login_refusal_record(
            reason=refused.safe_message, provider=provider, audience=audience, subject=subject, username=username
        )
        raise
    # The roles are set (and committed) before access is judged: a group removed at the provider
    # takes its role away at this login even when what is left does not let the person in.
    with transaction.atomic(), change_source(_origin(audience), actor_for_user(user)):
        roles_apply(user=user, provider=provider, groups=groups)
        refusal = _access_refusal(user, audience)
        if refusal is None:
            ExternalIdentity.objects.filter(provider=provider, subject=subject).update(last_login_at=timezone.now())
            change_record(
                action="sso.login",
                obj=_login_ref(provider, subject, username),
                before=None,
                after={
                    "provider": provider.slug,
                    "subject": subject,
                    "username": user.get_username(),
                    "audience": audience,
                    "groups": groups,
                },
            )
    if refusal is not None:
        login_refusal_record(reason=refusal, provider=provider, audience=audience, subject=subject, username=username)
        raise LoginRefused(refusal)
    return user


def _access_refusal(user: Any, audience: str) -> str | None:
    """Why these roles do not open the page the login is for, or None when they do."""
    if audience == "admin" and not user.is_staff:
        return "your groups do not give you access to admin"
    if audience == "portal" and not TenantMembership.objects.filter(user=user).exists():
        return "your groups give you no tenant"
    return None


def _user_for(
    *, provider: IdentityProvider, subject: str, username: str, email: str, claims: Mapping[str, Any]
) -> AbstractBaseUser:
    """The user this (provider, subject) is; a new one on a first login, never someone else's account.

    A local user with the same name is refused unless the provider allows
    linking by verified email and the token says the email is verified.
    """
    if not subject:
        raise LoginRefused("the ID token has no subject")
    linked = ExternalIdentity.objects.select_related("user").filter(provider=provider, subject=subject).first()
    user_model = get_user_model()
    if linked is not None:
        user = linked.user
        if not user.is_active:
            raise LoginRefused("this account is disabled")
        if email and user.email != email:
            user.email = email
            user.save(update_fields=["email"])
        return user
    existing = user_model.objects.filter(username=username).first()
    if existing is not None:
        verified = claims.get("email_verified") is True
        same_email = bool(email) and existing.email.lower() == email.lower()
        if not (provider.link_by_verified_email and verified and same_email):
            raise LoginRefused("a user with this name already exists and is not linked to this provider")
        if not existing.is_active:
            raise LoginRefused("this account is disabled")
        if provider.tenant_id is not None and _reaches_beyond(existing, provider.tenant_id):
            # A tenant runs its own provider and can assert any verified email: it must not take over an
            # operator, or a person who belongs to another tenant.
            raise LoginRefused("a tenant's provider cannot take over this account")
        user = existing
    else:
        user = user_model(username=username[:150], email=email)
        user.set_unusable_password()  # signs in through the provider only
        user.save()
    ExternalIdentity.objects.create(provider=provider, subject=subject, user=user)
    return user


def _reaches_beyond(user: Any, tenant_id: int) -> bool:
    """Whether the user has access a tenant's own provider must not be able to claim."""
    return (
        user.is_staff
        or user.is_superuser
        or TenantMembership.objects.filter(user=user).exclude(tenant_id=tenant_id).exists()
        or ExternalIdentity.objects.filter(user=user).exists()
    )


def mappings_for(*, provider: IdentityProvider, groups: Iterable[str]) -> list[RoleMapping]:
    """The rules these groups match: a tenant's provider only its own rules for its own tenant."""
    rules = RoleMapping.objects.filter(group__in=list(groups)).select_related("tenant")
    if provider.tenant_id is None:
        return list(rules.filter(provider__isnull=True) | rules.filter(provider=provider))
    return [
        rule
        for rule in rules.filter(provider=provider, tenant_id=provider.tenant_id)
        if not (rule.operator_role or rule.is_staff)
    ]


def _operator_groups() -> dict[str, Group]:
    found = {group.name: group for group in Group.objects.filter(name__in=OPERATOR_GROUP_NAMES.values())}
    if len(found) < len(OPERATOR_GROUP_NAMES):
        return operator_groups_ensure()
    return {role: found[name] for role, name in OPERATOR_GROUP_NAMES.items()}


def _roles_of(user: Any, *, tenant_ids: list[int] | None) -> dict[str, Any]:
    memberships = TenantMembership.objects.filter(user=user).select_related("tenant")
    if tenant_ids is not None:
        memberships = memberships.filter(tenant_id__in=tenant_ids)
    return {
        "is_staff": user.is_staff,
        "is_superuser": user.is_superuser,
        "operator_groups": sorted(
            user.groups.filter(name__in=OPERATOR_GROUP_NAMES.values()).values_list("name", flat=True)
        ),
        "tenant_roles": {m.tenant.slug: m.role for m in sorted(memberships, key=lambda m: m.tenant.slug)},
    }


def roles_apply(*, user: Any, provider: IdentityProvider, groups: Iterable[str]) -> None:
    """Set the user's roles to what the mappings grant now, and log the difference as one role change.

    A provider without a tenant decides operator roles, staff and every tenant
    membership; a tenant's own provider decides only the membership of its tenant.
    """
    rules = mappings_for(provider=provider, groups=groups)
    scope = None if provider.tenant_id is None else [provider.tenant_id]
    before = _roles_of(user, tenant_ids=scope)
    owner = TenantMembership.Role.OWNER
    wanted_tenants: dict[int, str] = {}
    for rule in rules:
        if rule.tenant_id is not None:
            current = wanted_tenants.get(rule.tenant_id)
            wanted_tenants[rule.tenant_id] = owner if owner in (current, rule.tenant_role) else rule.tenant_role
    if provider.tenant_id is None:
        operator_roles = {rule.operator_role for rule in rules if rule.operator_role}
        user.is_superuser = "superuser" in operator_roles
        user.is_staff = bool(operator_roles) or any(rule.is_staff for rule in rules)
        user.save(update_fields=["is_staff", "is_superuser"])
        groups_by_role = _operator_groups()
        managed = list(groups_by_role.values())
        user.groups.remove(*managed)
        user.groups.add(*(groups_by_role[role] for role in operator_roles if role in groups_by_role))
    memberships = TenantMembership.objects.filter(user=user)
    if scope is not None:
        memberships = memberships.filter(tenant_id__in=scope)
    memberships.exclude(tenant_id__in=list(wanted_tenants)).delete()
    for tenant_id, role in wanted_tenants.items():
        TenantMembership.objects.update_or_create(user=user, tenant_id=tenant_id, defaults={"role": role})
    after = _roles_of(user, tenant_ids=scope)
    change_record(
        action="sso.roles",
        obj=ObjectRef(type="identity_app.roles", id=str(user.pk), label=user.get_username()),
        before=before,
        after=after,
    )


# --- sessions and back-channel logout ------------------------------------------------------


def sso_session_record(*, outcome: LoginOutcome, session_key: str, expires_at: Any) -> None:
    """Remember which Django session this login opened, so the provider's logout can find it.

    Rows of sessions that have expired meanwhile go at the same time: the
    table holds about one row per open single sign-on session.
    """
    SingleSignOnSession.objects.filter(expires_at__lt=timezone.now()).delete()
    SingleSignOnSession.objects.update_or_create(
        session_key=session_key,
        defaults={
            "provider": outcome.provider,
            "subject": outcome.subject,
            "sid": outcome.sid,
            "user": outcome.user,
            "expires_at": expires_at,
        },
    )


def sso_session_forget(*, session_key: str | None) -> None:
    """The person signed out here: their session's row goes with it."""
    if session_key:
        SingleSignOnSession.objects.filter(session_key=session_key).delete()


def _logout_jti_key(issuer: str, jti: str) -> str:
    return "toolgate:sso:logout-jti:" + hashlib.sha256(f"{issuer}\n{jti}".encode()).hexdigest()


@transaction.atomic
def backchannel_logout(*, provider: IdentityProvider, logout_token: str, session_store: type) -> int:
    """End the Django sessions a provider's logout token names; how many. LogoutTokenRefused if it does not hold.

    The token is checked first (identity_app.oidc.logout_token_claims), then its
    `jti` is spent in the shared cache, so the same token is refused the second
    time, by any process. A token with `sid` ends that provider session's
    Django sessions (of its `sub` too, when it names one); a token with only
    `sub` ends every session that person opened through this provider.
    `session_store` is the deployment's SessionStore class (the request's), so
    any server-side session engine works. Ending nothing is not an error: the
    session may have expired or been signed out already.
    """
    try:
        metadata = oidc.provider_metadata(provider.issuer)
    except LoginRefused as refused:
        raise LogoutTokenRefused(refused.safe_message) from None
    claims = oidc.logout_token_claims(logout_token, metadata=metadata, client_id=provider.client_id)
    replay_window_s = LOGOUT_TOKEN_MAX_AGE_S + 2 * oidc.CLOCK_LEEWAY_S
    if not cache.add(_logout_jti_key(provider.issuer, str(claims["jti"])), 1, timeout=replay_window_s):
        raise LogoutTokenRefused("this logout token was already used")
    sid, subject = str(claims.get("sid") or ""), str(claims.get("sub") or "")
    rows = SingleSignOnSession.objects.filter(provider=provider).select_related("user")
    if sid:
        rows = rows.filter(sid=sid)
    if subject:
        rows = rows.filter(subject=subject)
    ended = list(rows.select_for_update(of=("self",)))
    store = session_store()
    for row in ended:
        store.delete(row.session_key)
    SingleSignOnSession.objects.filter(pk__in=[row.pk for row in ended]).delete()
    username = ended[0].user.get_username() if ended else ""
    actor = Actor(kind=ActorKind.USER, id="", label=f"identity provider {provider.slug} (back-channel logout)")
    with change_source(current_source()[0], actor):
        change_record(
            action="sso.logout",
            obj=ObjectRef(
                type="identity_app.logout",
                id=f"{provider.slug}:{sid or subject}"[:100],
                label=f"{username or subject or 'unknown user'} via {provider.slug}",
                tenant_id=provider.tenant_id,
            ),
            before=None,
            after={
                "provider": provider.slug,
                "subject": subject,
                "sid": sid,
                "username": username,
                "sessions_ended": len(ended),
                "via": "back-channel",
            },
        )
    return len(ended)


# --- break glass -----------------------------------------------------------------------------


@transaction.atomic
def break_glass_issue(*, username: str) -> str:
    """A superuser (created if needed) and a one-time sign-in token for them, valid for 15 minutes.

    With local passwords switched off this is the way in when the provider is
    down or misconfigured; it needs a shell on the server, and it is logged.
    """
    user_model = get_user_model()
    user, created = user_model.objects.get_or_create(username=username, defaults={"is_staff": True})
    if created:
        user.set_unusable_password()
    user.is_staff = user.is_superuser = user.is_active = True
    user.save()
    token = signing.dumps({"user": user.pk, "nonce": secrets.token_urlsafe(16)}, salt=BREAK_GLASS_SALT)
    change_record(
        action="sso.break_glass_issued",
        obj=ObjectRef(type="identity_app.login", id=f"break-glass:{user.pk}", label=f"{username} (break glass)"),
        before=None,
        after={"provider": "break-glass", "username": username, "audience": "admin", "reason": "token issued"},
    )
    return token


@transaction.atomic
def break_glass_redeem(*, token: str) -> AbstractBaseUser:
    """The superuser a break-glass token names, once: a second use, an old or forged token is refused."""
    try:
        payload = signing.loads(token, salt=BREAK_GLASS_SALT, max_age=BREAK_GLASS_TTL_S)
    except signing.BadSignature:
        raise LoginRefused("this break-glass link is invalid or expired") from None
    digest = hashlib.sha256(token.encode()).hexdigest()
    if not cache.add(f"toolgate:break-glass:{digest}", 1, timeout=BREAK_GLASS_TTL_S + 60):
        raise LoginRefused("this break-glass link was already used")
    user = get_user_model().objects.filter(pk=payload.get("user"), is_active=True, is_superuser=True).first()
    if user is None:
        raise LoginRefused("this break-glass link names no active superuser")
    with change_source(Origin.ADMIN, actor_for_user(user)):
        change_record(
            action="sso.login",
            obj=ObjectRef(type="identity_app.login", id=f"break-glass:{user.pk}", label=f"{user} (break glass)"),
            before=None,
            after={"provider": "break-glass", "username": user.get_username(), "audience": "admin"},
        )
    return user
