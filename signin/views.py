"""The endpoints of MCP sign-in (docs/api.md): discovery documents, authorize (login + consent), token,
registration and revocation.

Thin interfaces over signin/server.py (Authlib) and
signin/services.py. The token, registration and revocation endpoints answer
RFC 6749 §5.2 bodies (`{"error", "error_description"}`), never the REST
envelope. The consent page is a plain HTML form (it works without JavaScript).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from authlib.oauth2 import OAuth2Error
from axes.helpers import get_client_ip_address
from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from connections_app.choices import CONNECTION_FIELD, connection_groups
from connections_app.models import Connection
from connections_app.selectors import connections_declarable
from core.errors import AppError
from policies_app.governance import governance_cache
from policies_app.models import ServiceAccount
from policies_app.selectors import policy_effective_for
from runner.types import ConsequenceLevel, ToolEffect
from signin.documents import (
    DocumentsBusy,
    DocumentUnavailable,
    is_metadata_document_url,
    metadata_document_load,
)
from signin.server import (
    Consented,
    Target,
    authorization_server,
    mcp_resource,
    requested_target,
    site_base,
    toolset_resource,
)
from signin.services import (
    SIGNIN_SCOPE,
    SigninChoice,
    person_is_in_a_tenant,
    signin_choices,
    signin_consent_declaring,
)
from tools_app.models import Toolset
from tools_app.selectors import enabled_tool_ids, tools_by_id
from tools_app.toolsets import NAME_RE as TOOLSET_NAME_RE
from tools_app.toolsets import toolset_find, toolset_scope

logger = logging.getLogger(__name__)

REGISTRATIONS_PER_HOUR = 30  # per client address: registration is open, so it is bounded
ACCOUNT_FIELD = "tg_account"
TOOL_FIELD = "tg_tool"
DECISION_FIELD = "tg_decision"
TICK_ALL = frozenset({"tick-all", "untick-all"})
# How the consent page marks a tool's effect: a person reads what the client could do with it.
EFFECT_MARKS = {
    ToolEffect.READ_ONLY.value: ("reads", "effect-read"),
    ToolEffect.STATE_CHANGE.value: ("changes data", "effect-change"),
    ToolEffect.EXTERNAL_SIDE_EFFECT.value: ("acts outside Toolgate", "effect-external"),
}


def public_cors(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """CORS for the endpoints a browser-based MCP client (the MCP Inspector) calls from its own page.

    They take no cookies and no ambient credential (public clients, tokens in
    the body), so any Origin may read them; a preflight is answered here.
    `/authorize` is a page, and `/mcp` keeps its own Origin rule.
    """

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method == "OPTIONS":
            response = HttpResponse(status=204)
            response["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS"
            response["Access-Control-Allow-Headers"] = "Content-Type, Authorization, MCP-Protocol-Version"
            response["Access-Control-Max-Age"] = "600"
        else:
            response = view(request, *args, **kwargs)
        response["Access-Control-Allow-Origin"] = "*"
        return response

    return wrapped


def _endpoint(request: HttpRequest, name: str) -> str:
    return f"{site_base(request)}{reverse(name)}"


# --- discovery ------------------------------------------------------------------------------------


@public_cors
@require_GET
def protected_resource_metadata(request: HttpRequest) -> JsonResponse:
    """RFC 9728 for `/mcp`."""
    return _resource_metadata(request, mcp_resource(request), "Toolgate MCP")


@public_cors
@require_GET
def toolset_resource_metadata(request: HttpRequest, toolset: str) -> JsonResponse:
    """RFC 9728 for `/mcp/t/<toolset>`, the document its 401 names: a client then signs in for that toolset.

    Answered for every well-formed name, known or not: the document is public
    and has no tenant, so it must not tell anyone which toolsets exist (the
    consent page checks the name against the person's tenant).
    """
    if not TOOLSET_NAME_RE.fullmatch(toolset):
        return _oauth_error(
            404,
            "invalid_target",
            "No such protected resource: a toolset name is lower-case letters, digits, '-' and '_' (at most 64).",
        )
    return _resource_metadata(request, toolset_resource(request, toolset), f"Toolgate MCP, toolset {toolset}")


def _resource_metadata(request: HttpRequest, resource: str, name: str) -> JsonResponse:
    return JsonResponse(
        {
            "resource": resource,
            "authorization_servers": [site_base(request)],
            "scopes_supported": [SIGNIN_SCOPE],
            "bearer_methods_supported": ["header"],
            "resource_name": name,
        }
    )


@public_cors
@require_GET
def authorization_server_metadata(request: HttpRequest) -> JsonResponse:
    """RFC 8414."""
    return JsonResponse(
        {
            "issuer": site_base(request),
            "authorization_endpoint": _endpoint(request, "signin-authorize"),
            "token_endpoint": _endpoint(request, "signin-token"),
            "registration_endpoint": _endpoint(request, "signin-register"),
            "revocation_endpoint": _endpoint(request, "signin-revoke"),
            "scopes_supported": [SIGNIN_SCOPE],
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none"],
            "revocation_endpoint_auth_methods_supported": ["none"],
            "client_id_metadata_document_supported": True,
        }
    )


# --- token, registration, revocation -------------------------------------------------------------------


@csrf_exempt
@public_cors
@require_POST
def token(request: HttpRequest) -> HttpResponse:
    """The token endpoint: authorization_code (PKCE) and refresh_token grants."""
    with transaction.atomic():  # a spent code or a reuse's revocation commits with the answer, whatever it is
        return authorization_server().create_token_response(request)


@csrf_exempt
@public_cors
@require_POST
def revoke(request: HttpRequest) -> HttpResponse:
    """RFC 7009: 200 whether or not the token was known."""
    with transaction.atomic():
        return authorization_server().create_endpoint_response("revocation", request)


@csrf_exempt
@public_cors
@require_POST
def register(request: HttpRequest) -> HttpResponse:
    """RFC 7591 dynamic registration, REGISTRATIONS_PER_HOUR per client address."""
    address = get_client_ip_address(request)  # the project's proxy-aware address (AXES_CLIENT_IP_CALLABLE)
    if not _registration_allowed(address):
        response = _oauth_error(429, "invalid_request", "Too many registrations from this address; retry later.")
        response["Retry-After"] = "3600"
        return response
    request.client_ip = address  # type: ignore[attr-defined]  # read by Registration.save_client
    try:
        return authorization_server().create_endpoint_response("client_registration", request)
    except ValueError:  # the body is not JSON (Authlib's JSON request reads it lazily)
        return _oauth_error(400, "invalid_client_metadata", "The body must be a JSON object of client metadata.")


def _registration_allowed(address: str | None) -> bool:
    key = f"toolgate:signin-register:{address or 'unknown'}:{int(timezone.now().timestamp()) // 3600}"
    if cache.add(key, 1, timeout=3600):
        return True
    try:
        return cache.incr(key) <= REGISTRATIONS_PER_HOUR
    except ValueError:  # the window's key expired between add and incr: a new window starts
        cache.add(key, 1, timeout=3600)
        return True


def _oauth_error(status: int, error: str, description: str) -> JsonResponse:
    response = JsonResponse({"error": error, "error_description": description}, status=status)
    response["Cache-Control"] = "no-store"
    return response


# --- authorize: login and consent ----------------------------------------------------------------------------


def _refusal(request: HttpRequest, title: str, message: str, status: int = 400) -> HttpResponse:
    """An error page: nothing was granted and nobody is redirected anywhere."""
    return render(request, "tenant/signin_error.html", {"title": title, "message": message}, status=status)


@login_required
@never_cache
@require_http_methods(["GET", "POST"])
def authorize(request: HttpRequest) -> HttpResponse:
    """GET shows the consent page for a valid request; POST (same query) answers it with Allow or Deny."""
    server = authorization_server()
    refused = _load_document_client(request)
    if refused is not None:
        return refused
    try:
        grant = server.get_consent_grant(request, end_user=request.user)
    except OAuth2Error as error:
        if error.redirect_uri:  # set by Authlib only once the redirect URI was checked against the client
            return server.handle_error_response(request, error)
        return _refusal(request, "This sign-in request cannot be answered", error.get_error_description())
    asked = _consent_asked(request, grant)
    if isinstance(asked, HttpResponse):
        return asked
    if request.method == "POST" and request.POST.get(DECISION_FIELD) in TICK_ALL:
        # "Untick all" / "Tick all" without script: the same page again, every box set one way, nothing granted.
        ticked = set(asked.allowed) if request.POST[DECISION_FIELD] == "tick-all" else set()
        return _consent_page(request, asked, ticked=ticked)
    if request.method != "POST":
        return _consent_page(request, asked)
    if request.POST.get(DECISION_FIELD) != "allow":
        response = server.create_authorization_response(request, grant_user=None, grant=grant)
    else:
        picked = sorted(set(request.POST.getlist(TOOL_FIELD)) & set(asked.allowed))
        if (asked.allowed or asked.toolset is not None) and not picked:
            error = "Choose at least one tool." if asked.allowed else "No tool of this toolset can be delegated."
            return _consent_page(request, asked, error=error)
        # All of them: whatever the policy allows; for a toolset, its tools (named, so it never widens).
        tools = [] if picked == asked.allowed and asked.toolset is None else picked
        try:
            delegation = signin_consent_declaring(
                user=request.user,
                service_account=asked.chosen,
                tools=tools,
                connection_ids=_picked_connections(request, asked),
            )
        except AppError as error:
            return _refusal(request, "This sign-in request cannot be answered", error.safe_message)
        consented = Consented(user=request.user, delegation=delegation)
        response = server.create_authorization_response(request, grant_user=consented, grant=grant)
    response["Referrer-Policy"] = "no-referrer"
    return response


def _picked_connections(request: HttpRequest, asked: _Asked) -> list[str]:
    """The ticked connections among those offered (anything else a form sends is ignored)."""
    offered = {str(connection.pk) for connection in asked.connections}
    return sorted(set(request.POST.getlist(CONNECTION_FIELD)) & offered)


@dataclass(frozen=True, slots=True)
class _Asked:
    """What the consent page asks the person: for this grant, acting as `chosen` (one of `choices`), which of
    `allowed` to delegate; `toolset` is the one the client connected to (None: the whole catalog)."""

    grant: Any
    choices: list[SigninChoice]
    chosen: ServiceAccount
    allowed: list[str]
    toolset: Toolset | None
    connections: list[Connection]  # what the person may let `chosen` use when a call names none


def _consent_asked(request: HttpRequest, grant: Any) -> _Asked | HttpResponse:
    """The page's question, read again on every showing and on the answer; a refusal page when there is none.

    For a toolset, only the person's tenants that have a toolset of that name
    are offered, and the tools are the toolset's: the tenant is picked on this
    page, so the name is checked here against the tenant picked, never before.
    """
    if not person_is_in_a_tenant(user=request.user):
        return _refusal(
            request,
            "You are not in any tenant",
            "Your account is not a member of any tenant, so there is nothing a client could do for you. "
            "Ask a tenant owner to add you, then sign in again from your MCP client.",
            status=403,
        )
    governance_cache.refresh()  # policies and toolsets below are read from the cache: as fresh as a call's
    choices = signin_choices(user=request.user)
    if not choices:
        return _refusal(
            request,
            "No service account can act for you",
            "None of your tenants has a service account with the tools:exec scope for a client to act as. "
            "Ask a tenant owner to create one, then sign in again from your MCP client.",
            status=403,
        )
    target = requested_target(grant.request)  # well-formed: Authlib's hook checked it
    if target.toolset is not None:
        choices = [
            choice for choice in choices if toolset_scope(tenant_id=choice.tenant.pk, name=target.toolset) is not None
        ]
        if not choices:
            return _refusal(
                request,
                "This client asked for a toolset you cannot use",
                f"The client connected to the toolset “{target.toolset}”, and none of your tenants has a toolset "
                "of that name. Check the server URL set in your MCP client: <server>/mcp for every tool, or "
                "<server>/mcp/t/<name> with the name of one of your tenant's toolsets.",
            )
    chosen = _chosen_account(request, [account for choice in choices for account in choice.accounts])
    if chosen is None:
        return _refusal(
            request, "This sign-in request cannot be answered", "Choose one of the service accounts listed."
        )
    toolset = None if target.toolset is None else toolset_find(tenant_id=chosen.tenant_id, name=target.toolset)
    if target.toolset is not None and toolset is None:  # deleted since its scope was read
        return _refusal(request, "This sign-in request cannot be answered", "That toolset was just deleted.")
    declarable = connections_declarable(
        tenant_id=chosen.tenant_id, user_id=request.user.pk, service_account_id=chosen.pk
    )
    return _Asked(
        grant=grant,
        choices=choices,
        chosen=chosen,
        allowed=_allowed_tools(chosen, target),
        toolset=toolset,
        connections=declarable,
    )


def _load_document_client(request: HttpRequest) -> HttpResponse | None:
    """Fetch (or refresh) a metadata-document client before Authlib looks it up; a page saying why it cannot."""
    client_id = request.GET.get("client_id") or ""
    if not is_metadata_document_url(client_id):
        return None
    try:
        metadata_document_load(client_id=client_id, source=get_client_ip_address(request))
    except DocumentsBusy as busy:
        response = _refusal(request, "Too many sign-ins at once", f"{busy}.", status=503)
        response["Retry-After"] = "5"
        return response
    except DocumentUnavailable as refused:
        return _refusal(
            request,
            "This client cannot sign in",
            f"Its Client ID Metadata Document could not be used: {refused}. "
            "Ask the client's publisher to fix the document, or register the client instead.",
        )
    return None


def _chosen_account(request: HttpRequest, accounts: list[ServiceAccount]) -> ServiceAccount | None:
    wanted = (request.POST if request.method == "POST" else request.GET).get(ACCOUNT_FIELD)
    if wanted is None:
        return accounts[0]
    return next((account for account in accounts if str(account.pk) == wanted), None)


def _allowed_tools(account: ServiceAccount, target: Target) -> list[str]:
    """What the account's policy allows now (and is switched on), within the toolset asked for: what the
    person may narrow."""
    policy = policy_effective_for(tenant_id=account.tenant_id, service_account_id=str(account.pk))
    if policy is None:
        return []
    scope = None if target.toolset is None else toolset_scope(tenant_id=account.tenant_id, name=target.toolset)
    return sorted(
        tool_id for tool_id in enabled_tool_ids() if policy.allows(tool_id) and (scope is None or tool_id in scope)
    )


@dataclass(frozen=True, slots=True)
class _ToolChoice:
    tool_id: str
    checked: bool
    title: str
    description: str
    effect_label: str
    effect_class: str
    high_risk: bool


@dataclass(frozen=True, slots=True)
class _ToolGroup:
    label: str
    tools: list[_ToolChoice]


def _tool_groups(allowed: list[str], picked: set[str]) -> list[_ToolGroup]:
    """The allowed tools by where they come from (one MCP server, or Toolgate's own tools), described.

    A person choosing among fifty tools reads them as a few servers, each
    tool with what it does and whether it only reads or also acts.
    """
    rows = tools_by_id(tool_ids=allowed)
    groups: dict[str, list[_ToolChoice]] = {}
    for tool_id in allowed:
        row = rows.get(tool_id)
        effect = row.effect if row is not None else ToolEffect.EXTERNAL_SIDE_EFFECT.value
        label, css = EFFECT_MARKS.get(effect, EFFECT_MARKS[ToolEffect.EXTERNAL_SIDE_EFFECT.value])
        groups.setdefault(_group_label(tool_id), []).append(
            _ToolChoice(
                tool_id=tool_id,
                checked=tool_id in picked,
                title=row.title if row is not None else "",
                description=(row.description if row is not None else "").strip(),
                effect_label=label,
                effect_class=css,
                high_risk=row is not None and row.consequence_level == ConsequenceLevel.HIGH.value,
            )
        )
    return [_ToolGroup(label=label, tools=tools) for label, tools in sorted(groups.items())]


def _group_label(tool_id: str) -> str:
    parts = tool_id.split("__")
    if parts[0] == "mcp" and len(parts) >= 3:
        return f"MCP server {parts[1]}"
    return f"Toolgate: {parts[0]}" if len(parts) >= 2 else "Toolgate"


def _consent_page(
    request: HttpRequest, asked: _Asked, *, error: str = "", ticked: set[str] | None = None
) -> HttpResponse:
    grant, allowed, choices = asked.grant, asked.allowed, asked.choices
    parts = urlsplit(grant.request.payload.redirect_uri)
    client = grant.request.client.row
    if ticked is not None:
        picked = ticked
    else:
        picked = set(request.POST.getlist(TOOL_FIELD)) if request.method == "POST" else set(allowed)
    if request.method == "POST":
        connections_picked = set(_picked_connections(request, asked))
    else:  # offered ticked, like the tools: the person unticks what this client must not use
        connections_picked = {str(connection.pk) for connection in asked.connections}
    response = render(
        request,
        "tenant/signin_consent.html",
        {
            "client": client,
            "redirect_host": parts.netloc,
            "choices": choices,
            "several": sum(len(choice.accounts) for choice in choices) > 1,
            "chosen": asked.chosen,
            "toolset": asked.toolset,
            "tools": [(tool, tool in picked) for tool in allowed],
            "groups": _tool_groups(allowed, picked),
            "tool_count": len(allowed),
            "error": error,
            "action": request.get_full_path(),
            "query": [(name, value) for name in request.GET for value in request.GET.getlist(name)],
            "account_field": ACCOUNT_FIELD,
            "tool_field": TOOL_FIELD,
            "decision_field": DECISION_FIELD,
            "connection_field": CONNECTION_FIELD,
            "connection_groups": connection_groups(asked.connections, connections_picked),
        },
        status=400 if error else 200,
    )
    # The answer redirects to the client: CSP's form-action covers a form's redirects too.
    response._csp_update = {"form-action": [f"{parts.scheme}://{parts.netloc}"]}  # type: ignore[attr-defined]
    return response
