"""The single sign-on pages: start a login, the provider's callback, break glass, and sign out.

Thin: each view parses the request, calls one service and answers a redirect
or a page. A refused login answers 403 with the service's safe message and a
link back to the sign-in page it came from.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth import login, logout
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from identity_app import services
from identity_app.backends import SSO_BACKEND
from identity_app.models import IdentityProvider
from identity_app.oidc import LoginRefused, LogoutTokenRefused, provider_metadata

logger = logging.getLogger(__name__)

SESSION_PROVIDER_KEY = "toolgate_sso_provider"
LOGIN_PAGES = {"admin": "/admin/login/", "portal": settings.LOGIN_URL}
LANDING = {"admin": "/admin/", "portal": settings.LOGIN_REDIRECT_URL}


def _safe_next(request: HttpRequest, candidate: str, audience: str) -> str:
    allowed = url_has_allowed_host_and_scheme(
        candidate, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return candidate if candidate and allowed else LANDING[audience]


def _bound_the_session(request: HttpRequest) -> None:
    """An absolute expiry: a number of seconds would restart at every save of the session (a sliding window)."""
    request.session.set_expiry(timezone.now() + timedelta(seconds=settings.TOOLGATE_SSO_SESSION_SECONDS))


def _refused(request: HttpRequest, refused: LoginRefused, audience: str) -> HttpResponse:
    return render(
        request,
        "identity/refused.html",
        {"message": refused.safe_message, "login_url": LOGIN_PAGES.get(audience, settings.LOGIN_URL)},
        status=403,
    )


@never_cache
@require_GET
def start(request: HttpRequest, slug: str) -> HttpResponse:
    audience = request.GET.get("for", "portal")
    if audience not in services.AUDIENCES:
        audience = "portal"
    provider = IdentityProvider.objects.filter(slug=slug, is_enabled=True).first()
    if provider is None:
        raise Http404("no such identity provider")
    try:
        url = services.login_start(
            session=request.session,
            provider=provider,
            audience=audience,
            redirect_uri=request.build_absolute_uri(reverse("identity:callback")),
            next_url=_safe_next(request, request.GET.get("next", ""), audience),
        )
    except LoginRefused as refused:
        return _refused(request, refused, audience)
    return redirect(url)


@never_cache
@require_GET
def callback(request: HttpRequest) -> HttpResponse:
    state = request.GET.get("state", "")
    audience = str((request.session.get(services.PENDING_KEY) or {}).get(state, {}).get("audience", "portal"))
    try:
        outcome = services.login_complete(
            session=request.session,
            state=state,
            code=request.GET.get("code", ""),
            error=request.GET.get("error", ""),
        )
    except LoginRefused as refused:
        return _refused(request, refused, audience)
    login(request, outcome.user, backend=SSO_BACKEND)
    _bound_the_session(request)
    request.session[SESSION_PROVIDER_KEY] = outcome.provider.slug
    request.session.save()  # its key is what the provider's back-channel logout will find it by
    services.sso_session_record(
        outcome=outcome, session_key=request.session.session_key, expires_at=request.session.get_expiry_date()
    )
    return redirect(_safe_next(request, outcome.next_url, outcome.audience))


@never_cache
@require_http_methods(["GET", "POST"])
def break_glass(request: HttpRequest, token: str) -> HttpResponse:
    """GET shows a button (link previews must not spend the token); POST signs the superuser in."""
    if request.method == "GET":
        return render(request, "identity/break_glass.html", {})
    try:
        user = services.break_glass_redeem(token=token)
    except LoginRefused as refused:
        return _refused(request, refused, "admin")
    login(request, user, backend=SSO_BACKEND)
    _bound_the_session(request)
    return redirect("/admin/")


@require_POST
def sign_out(request: HttpRequest) -> HttpResponse:
    """Sign out here, then at the provider when it offers RP-initiated logout (front channel)."""
    slug = request.session.get(SESSION_PROVIDER_KEY)
    services.sso_session_forget(session_key=request.session.session_key)
    logout(request)
    provider = IdentityProvider.objects.filter(slug=slug).first() if slug else None
    if provider is not None:
        try:
            end_session = provider_metadata(provider.issuer).end_session_endpoint
        except LoginRefused:
            end_session = ""
        if end_session:
            query = urlencode(
                {
                    "client_id": provider.client_id,
                    "post_logout_redirect_uri": request.build_absolute_uri(settings.LOGIN_URL),
                }
            )
            return redirect(f"{end_session}?{query}")
    return redirect(settings.LOGIN_URL)


def _logout_error(status: int, error: str, description: str) -> JsonResponse:
    response = JsonResponse({"error": error, "error_description": description}, status=status)
    response["Cache-Control"] = "no-store"
    return response


@csrf_exempt  # called by the provider's server, not a browser: the signed logout token is the proof
@require_POST
def backchannel_logout(request: HttpRequest, slug: str) -> HttpResponse:
    """OpenID Connect Back-Channel Logout: the provider posts `logout_token`; 200 once its sessions are ended.

    A token that does not hold answers 400 with an OAuth-style `error` and a
    description saying why (Back-Channel Logout 1.0, 2.8), never a 500.
    """
    provider = IdentityProvider.objects.filter(slug=slug).first()
    if provider is None:
        return _logout_error(404, "invalid_request", "no such identity provider")
    if request.content_type != "application/x-www-form-urlencoded":
        return _logout_error(400, "invalid_request", "the body must be application/x-www-form-urlencoded")
    tokens = request.POST.getlist("logout_token")
    if len(tokens) != 1:
        return _logout_error(400, "invalid_request", "send exactly one logout_token")
    try:
        services.backchannel_logout(provider=provider, logout_token=tokens[0], session_store=type(request.session))
    except LogoutTokenRefused as refused:
        logger.warning("back-channel logout from %s refused: %s", provider.slug, refused.safe_message)
        return _logout_error(400, "invalid_request", refused.safe_message)
    response = HttpResponse(status=200)
    response["Cache-Control"] = "no-store"
    return response
