"""The tenant UI's delegations: a person lets a service account act on their behalf.

Two ways to hand a service the person's subject token:

- the person creates a delegation here and copies the token (shown once);
- the service starts a consent redirect (`GET /delegations/consent?client_id=...`):
  the person logs in and approves, Toolgate redirects back to a redirect URI
  registered for that service account with a one-time code and the service's
  `state`, and the service exchanges the code (with its API key and its PKCE
  verifier) at `POST /api/v1/delegations/token`.

A redirect URI that is not registered is never redirected to: the person gets
an error page. The consent request the page showed is kept in the session
under its `state`; an approval naming any other state is refused, so a page
cannot be made to approve a request the person never saw.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode, urlsplit
from uuid import UUID

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods

from connections_app.choices import CONNECTION_FIELD, connection_groups
from connections_app.models import Connection
from connections_app.selectors import connections_declarable
from connections_app.services import (
    consent_approve_declaring,
    delegation_connections_set,
    delegation_create_declaring,
)
from core.errors import AppError, add_app_error_to_form
from policies_app.models import TenantMembership
from policies_app.selectors import (
    delegation_get,
    delegation_list,
    service_account_for_consent,
    service_account_get,
    service_account_list,
)
from policies_app.services import (
    delegation_revoke,
    service_account_set_redirect_uris,
)
from portal.forms import DelegationForm, RedirectUrisForm
from portal.revoking import RevokeWords, revoke_confirm
from portal.tenancy import memberships_of, tenant_member_required
from signin.services import RevokeReason, signin_grant_get, signin_grant_list, signin_grant_revoke
from tools_app.selectors import tool_ids_known

CONSENT_SESSION_KEY = "toolgate_consent"
MAX_PENDING_CONSENTS = 5
STATE_RE = re.compile(r"^[\x21-\x7e]{8,256}$")  # printable ASCII, no spaces
CHALLENGE_RE = re.compile(r"^[A-Za-z0-9_-]{43}$")  # base64url(sha256) without padding
TOOL_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_CONSENT_SECONDS = 365 * 24 * 3600
UNKNOWN_REQUEST = "This consent request is unknown or was already answered; start again from the service."


def _is_owner(request: HttpRequest) -> bool:
    return request.tenant_role == TenantMembership.Role.OWNER


# --- delegations -----------------------------------------------------------------------------


@tenant_member_required
@require_GET
def delegations(request: HttpRequest) -> HttpResponse:
    """Your delegations (an owner sees everyone's in the tenant, to revoke any)."""
    owner = _is_owner(request)
    rows = delegation_list(tenant_id=request.tenant.pk, user_id=None if owner else request.user.pk)
    signed_in = list(signin_grant_list(tenant_id=request.tenant.pk, user_id=None if owner else request.user.pk))
    for grant in signed_in:
        grant.redirect_host = urlsplit(grant.redirect_uri).netloc  # type: ignore[attr-defined]
    return render(
        request,
        "tenant/delegation_list.html",
        {
            "section": "delegations",
            "delegations": rows,
            "signed_in": signed_in,
            "show_person": owner,
            "now": timezone.now(),
        },
    )


@tenant_member_required
@require_http_methods(["GET", "POST"])
def signin_grant_revoke_confirm(request: HttpRequest, grant_id: UUID) -> HttpResponse:
    """Sign an MCP client out: its tokens stop working at once (owners may sign out anyone's)."""
    grant = signin_grant_get(
        tenant_id=request.tenant.pk, grant_id=grant_id, user_id=None if _is_owner(request) else request.user.pk
    )
    if grant is None:
        raise Http404("no such signed-in client")
    return revoke_confirm(
        request,
        grant,
        revoke=lambda: signin_grant_revoke(grant=grant, revoked_by=request.user, reason=RevokeReason.PERSON),
        words=RevokeWords(
            section="delegations",
            kind="signed-in client",
            name=grant.client.display_name,
            consequence=(
                "Its access and refresh tokens stop working on its next request; to use Toolgate again the "
                "client must sign in again. Your delegation to the service account stays."
            ),
            revoked=f"“{grant.client.display_name}” is signed out.",
            already="That client was already signed out.",
            back_to=reverse("web:delegation-list"),
        ),
        details=lambda: [
            ("Person", grant.delegation.user.get_username()),
            ("Returns to", urlsplit(grant.redirect_uri).netloc),
            ("Acts as", grant.delegation.service_account.name),
        ],
    )


@tenant_member_required
@never_cache
@require_http_methods(["GET", "POST"])
def delegation_new(request: HttpRequest) -> HttpResponse:
    """Delegate to a service account; the subject token goes into this response and nowhere else.

    The form offers the person's connections per provider (those some live
    account is granted); the ticked ones must be granted to the account chosen.
    """
    form = DelegationForm(
        request.POST or None,
        service_accounts=service_account_list(tenant_id=request.tenant.pk, include_revoked=False),
        tool_ids=tool_ids_known(),
    )
    offered = connections_declarable(tenant_id=request.tenant.pk, user_id=request.user.pk, service_account_id=None)
    picked = _picked(request, offered)
    if request.method == "POST" and form.is_valid():
        account = form.cleaned_data["service_account"]
        usable = {
            str(connection.pk)
            for connection in connections_declarable(
                tenant_id=request.tenant.pk, user_id=request.user.pk, service_account_id=account.pk
            )
        }
        if set(picked) - usable:
            form.add_error(None, f"A ticked connection is not granted to {account.name}: untick it, or grant it first.")
        else:
            try:
                delegation, token = delegation_create_declaring(
                    tenant=request.tenant,
                    user=request.user,
                    service_account=account,
                    tools=form.cleaned_data["tools"],
                    expires_at=form.cleaned_data["expires_at"],
                    connection_ids=picked,
                )
            except AppError as error:
                add_app_error_to_form(form, error)
            else:
                return render(
                    request,
                    "tenant/delegation_created.html",
                    {"section": "delegations", "delegation": delegation, "token": token},
                    status=201,
                )
    return render(
        request,
        "tenant/delegation_form.html",
        {
            "section": "delegations",
            "form": form,
            "connection_field": CONNECTION_FIELD,
            "connection_groups": connection_groups(offered, set(picked)),
        },
    )


def _picked(request: HttpRequest, offered: list[Connection]) -> list[str]:
    """The ticked connections among those offered (anything else a form sends is ignored)."""
    if request.method != "POST":
        return []
    return sorted(set(request.POST.getlist(CONNECTION_FIELD)) & {str(connection.pk) for connection in offered})


@tenant_member_required
@require_http_methods(["GET", "POST"])
def delegation_revoke_confirm(request: HttpRequest, delegation_id: UUID) -> HttpResponse:
    delegation = delegation_get(
        tenant_id=request.tenant.pk,
        delegation_id=delegation_id,
        user_id=None if _is_owner(request) else request.user.pk,
    )
    if delegation is None:
        raise Http404("no such delegation")
    return revoke_confirm(
        request,
        delegation,
        revoke=lambda: delegation_revoke(delegation=delegation, revoked_by=request.user),
        words=RevokeWords(
            section="delegations",
            kind="delegation",
            name=f"to {delegation.service_account.name}",
            consequence=(
                "Its subject token stops working on the next call: the service can no longer act for "
                f"{delegation.user.get_username()}. This cannot be undone."
            ),
            revoked=f"Delegation to “{delegation.service_account.name}” revoked.",
            back_to=reverse("web:delegation-list"),
        ),
        details=lambda: [
            ("Person", delegation.user.get_username()),
            ("Service account", delegation.service_account.name),
            ("Tools", ", ".join(delegation.tools) or "every tool its policy allows"),
        ],
    )


@tenant_member_required
@require_http_methods(["GET", "POST"])
def delegation_connections(request: HttpRequest, delegation_id: UUID) -> HttpResponse:
    """The person picks which of their connections the account may use when a call names none.

    Only the person themselves: it is their consent (an owner revokes a
    delegation, but does not choose for someone else). Another person's or an
    unknown delegation is a 404 alike.
    """
    delegation = delegation_get(tenant_id=request.tenant.pk, delegation_id=delegation_id, user_id=request.user.pk)
    if delegation is None or delegation.revoked_at is not None:
        raise Http404("no such delegation")
    offered = connections_declarable(
        tenant_id=request.tenant.pk, user_id=request.user.pk, service_account_id=delegation.service_account_id
    )
    offered_ids = {str(connection.pk) for connection in offered}
    error = ""
    if request.method == "POST":
        picked = sorted(set(request.POST.getlist(CONNECTION_FIELD)) & offered_ids)
        try:
            delegation_connections_set(delegation=delegation, connection_ids=picked)
        except AppError as refused:
            error = refused.safe_message
        else:
            messages.success(request, f"Connections of your delegation to “{delegation.service_account.name}” saved.")
            return redirect("web:delegation-list")
    return render(
        request,
        "tenant/delegation_connections.html",
        {
            "section": "delegations",
            "delegation": delegation,
            "connection_field": CONNECTION_FIELD,
            "connection_groups": connection_groups(offered, set(delegation.connection_ids)),
            "error": error,
        },
        status=400 if error else 200,
    )


@tenant_member_required
@require_http_methods(["GET", "POST"])
def service_account_redirect_uris(request: HttpRequest, account_id: UUID) -> HttpResponse:
    """Owners register where a service account's consent redirects may return to."""
    account = service_account_get(tenant_id=request.tenant.pk, account_id=account_id)
    if account is None or account.revoked_at is not None:
        raise Http404("no such service account")
    if not _is_owner(request):
        return render(request, "tenant/owner_only.html", {"section": "service-accounts"}, status=403)
    form = RedirectUrisForm(request.POST or None, initial={"redirect_uris": "\n".join(account.consent_redirect_uris)})
    if request.method == "POST" and form.is_valid():
        try:
            service_account_set_redirect_uris(account=account, uris=form.cleaned_data["redirect_uris"])
        except AppError as error:
            add_app_error_to_form(form, error, field="redirect_uris")
        else:
            messages.success(request, f"Consent redirect URIs of “{account.name}” saved.")
            return redirect("web:service-account-list")
    return render(
        request,
        "tenant/redirect_uris_form.html",
        {"section": "service-accounts", "form": form, "account": account},
    )


# --- the consent redirect --------------------------------------------------------------------


def _consent_error(request: HttpRequest, message: str, status: int = 400) -> HttpResponse:
    """Refused before anything is decided: an error page, never a redirect to an unchecked URI."""
    return render(request, "tenant/consent_error.html", {"message": message}, status=status)


def _requested_tools(raw: str) -> list[str] | None:
    tools = raw.split()
    return tools if len(tools) <= 200 and all(TOOL_ID_RE.match(tool) for tool in tools) else None


def _requested_expiry(raw: str) -> int | bool | None:
    """Seconds the delegation should last (None: no expiry); False when malformed."""
    if not raw:
        return None
    if not raw.isdigit() or not 60 <= int(raw) <= MAX_CONSENT_SECONDS:
        return False
    return int(raw)


@login_required
@never_cache
@require_http_methods(["GET", "POST"])
def consent(request: HttpRequest) -> HttpResponse:
    """GET shows a service's request to act for the logged-in person; POST answers it."""
    if request.method == "POST":
        return _consent_answer(request)
    query = request.GET
    account = service_account_for_consent(service_account_id=query.get("client_id", ""))
    if account is None:
        return _consent_error(request, "No such service account, or it was revoked.")
    redirect_uri = query.get("redirect_uri", "")
    if redirect_uri not in account.consent_redirect_uris:
        return _consent_error(request, "This redirect URI is not registered for the service account.")
    state = query.get("state", "")
    challenge = query.get("code_challenge", "")
    tools = _requested_tools(query.get("scope", ""))
    expires_in = _requested_expiry(query.get("expires_in", ""))
    if (
        not STATE_RE.match(state)
        or query.get("code_challenge_method") != "S256"
        or not CHALLENGE_RE.match(challenge)
        or tools is None
        or expires_in is False
        or query.get("response_type", "code") != "code"
    ):
        return _consent_error(
            request,
            "The request is malformed: it needs response_type=code, a state of 8-256 printable characters, "
            "a PKCE code_challenge with code_challenge_method=S256, and optionally scope (tool ids) and "
            "expires_in (seconds).",
        )
    if account.tenant_id not in {membership.tenant_id for membership in memberships_of(request.user)}:
        return _consent_error(request, "No such service account, or it was revoked.", status=404)
    pending: dict[str, Any] = request.session.get(CONSENT_SESSION_KEY, {})
    pending = dict(list(pending.items())[-(MAX_PENDING_CONSENTS - 1) :])
    pending[state] = {
        "client_id": str(account.pk),
        "redirect_uri": redirect_uri,
        "code_challenge": challenge,
        "tools": tools,
        "expires_in": expires_in,
    }
    request.session[CONSENT_SESSION_KEY] = pending
    parts = urlsplit(redirect_uri)
    offered = connections_declarable(
        tenant_id=account.tenant_id, user_id=request.user.pk, service_account_id=account.pk
    )
    response = render(
        request,
        "tenant/consent.html",
        {
            "connection_field": CONNECTION_FIELD,
            "connection_groups": connection_groups(offered, {str(connection.pk) for connection in offered}),
            "account": account,
            "tools": tools,
            "expires_in_days": None if expires_in is None else expires_in / 86400,
            "state": state,
            "redirect_host": parts.netloc,
        },
    )
    # The answer redirects to the service: CSP's form-action covers a form's redirects too, so
    # this page (and only this page) also allows the registered redirect URI's origin.
    response._csp_update = {"form-action": [f"{parts.scheme}://{parts.netloc}"]}  # type: ignore[attr-defined]
    return response


def _consent_answer(request: HttpRequest) -> HttpResponse:
    """The person's answer: the state must name a request this session was shown (and is used up)."""
    pending: dict[str, Any] = request.session.get(CONSENT_SESSION_KEY, {})
    asked = pending.pop(request.POST.get("state", ""), None)
    request.session[CONSENT_SESSION_KEY] = pending
    if asked is None:
        return _consent_error(
            request, "This consent request is unknown or was already answered; start again from the service."
        )
    state = request.POST["state"]
    account = service_account_for_consent(service_account_id=asked["client_id"])
    if account is None or asked["redirect_uri"] not in account.consent_redirect_uris:
        return _consent_error(request, "The service account was revoked or changed its redirect URIs meanwhile.")
    if request.POST.get("decision") != "approve":
        return _back(asked["redirect_uri"], {"error": "access_denied", "state": state})
    expires_at = None if asked["expires_in"] is None else timezone.now() + timedelta(seconds=asked["expires_in"])
    offered = connections_declarable(
        tenant_id=account.tenant_id, user_id=request.user.pk, service_account_id=account.pk
    )
    try:
        code = consent_approve_declaring(
            user=request.user,
            service_account=account,
            redirect_uri=asked["redirect_uri"],
            code_challenge=asked["code_challenge"],
            tools=asked["tools"],
            expires_at=expires_at,
            connection_ids=_picked(request, offered),
        )
    except AppError as error:
        return _consent_error(request, error.safe_message)
    return _back(asked["redirect_uri"], {"code": code, "state": state})


def _back(redirect_uri: str, params: dict[str, str]) -> HttpResponseRedirect:
    """The registered redirect URI with the answer added to its query (OAuth 2 style)."""
    separator = "&" if "?" in redirect_uri else "?"
    response = HttpResponseRedirect(f"{redirect_uri}{separator}{urlencode(params)}")
    response["Referrer-Policy"] = "no-referrer"
    return response
