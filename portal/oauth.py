"""The OAuth authorization-code flow in the tenant UI: start, and the provider's callback.

Every way a callback can be wrong (consent denied, state missing, forged,
reused or expired, another tenant's flow, a token endpoint error) ends on a
friendly 400 page with nothing stored, and never reaches the token endpoint
unless the state matched a live flow of this session and tenant.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from connections_app.models import OAuthProvider
from connections_app.oauth import (
    TokenRequestFailed,
    oauth_code_exchange,
    oauth_connection_reconnect,
    oauth_connection_store,
    oauth_flow_pop,
    oauth_flow_start,
)
from connections_app.selectors import connection_get
from core.crypto import CredentialError
from core.errors import AppError
from portal.calls import connected_for_call
from portal.tenancy import tenant_member_required, visible_to

MESSAGES = {
    "access_denied": "You declined access at the provider, so nothing was connected.",
    "state": "This sign-in link has expired or was already used. Start again from the connections page.",
    "provider": "The provider refused to hand over the tokens, so nothing was connected. Try again later.",
    "unreadable": "This provider is not configured correctly. An operator has to fix it.",
    "revoked": "That connection has been revoked. Connect a new account instead.",
}


def _oauth_error(request: HttpRequest, reason: str) -> HttpResponse:
    return render(request, "tenant/oauth_error.html", {"message": MESSAGES[reason]}, status=400)


def _refresh_window() -> timedelta:
    return timedelta(seconds=settings.TOOLGATE_REFRESH_WINDOW_SECONDS)


@never_cache
@tenant_member_required
@require_GET
def oauth_start(request: HttpRequest, provider: str) -> HttpResponse:
    """Redirect to the provider with a one-time state and a PKCE S256 challenge."""
    row = OAuthProvider.objects.filter(name=provider).first()
    if row is None:
        raise Http404
    reconnect = request.GET.get("reconnect", "")
    if reconnect:
        connection = connection_get(
            tenant=request.tenant, connection_id=reconnect, visible_to_user_id=visible_to(request)
        )
        if connection is None or connection.provider != row.name:
            raise Http404
    try:
        url = oauth_flow_start(
            session=request.session,
            provider=row,
            tenant=request.tenant,
            redirect_uri=request.build_absolute_uri(reverse("web:oauth-callback")),
            reconnect=reconnect,
            owner_id=request.user.pk if request.GET.get("personal") == "1" and not reconnect else None,
        )
    except CredentialError:
        return _oauth_error(request, "unreadable")
    return redirect(url)


@never_cache
@tenant_member_required
@require_GET
def oauth_callback(request: HttpRequest) -> HttpResponse:
    """Exchange the code for tokens and store them encrypted; anything unexpected is a 400 page."""
    flow = oauth_flow_pop(session=request.session, state=request.GET.get("state", ""))
    if flow is None or flow.tenant_id != request.tenant.pk or flow.owner_id not in (None, request.user.pk):
        return _oauth_error(request, "state")
    if request.GET.get("error") or not request.GET.get("code"):
        return _oauth_error(request, "access_denied")
    provider = OAuthProvider.objects.filter(name=flow.provider).first()
    if provider is None:
        return _oauth_error(request, "state")
    try:
        token = oauth_code_exchange(provider=provider, flow=flow, code=request.GET["code"])
    except TokenRequestFailed:
        return _oauth_error(request, "provider")
    except CredentialError:
        return _oauth_error(request, "unreadable")
    now = timezone.now()
    if flow.reconnect:
        connection = connection_get(
            tenant=request.tenant, connection_id=flow.reconnect, visible_to_user_id=visible_to(request)
        )
        if connection is None:
            return _oauth_error(request, "state")
        try:
            oauth_connection_reconnect(
                connection=connection, token=token, now=now, refresh_window=_refresh_window(), actor=request.user
            )
        except AppError:
            return _oauth_error(request, "revoked")
        messages.success(request, f"{connection} is connected again.")
    else:
        connection = oauth_connection_store(
            tenant=request.tenant,
            provider=provider,
            token=token,
            now=now,
            refresh_window=_refresh_window(),
            created_by=request.user,
            owner=request.user if flow.owner_id is not None else None,
        )
        if flow.connect_ask:  # started on a call's connect page: declare it for that call's client
            return connected_for_call(request, ask_id=flow.connect_ask, connection=connection)
        messages.success(request, f"Connected {connection}.")
    return redirect("web:connection-list")
