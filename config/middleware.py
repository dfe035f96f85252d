"""Middleware of the whole site (settings.MIDDLEWARE)."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest

from changes_app.context import ChangeSource, actor_for_user, source_bind, source_reset
from changes_app.kinds import Origin
from config.api import API_PREFIX

ADMIN_PREFIX = "/admin/"


def refuse_nul_in_urls(get_response: Callable[[HttpRequest], HttpResponse]) -> Callable[[HttpRequest], HttpResponse]:
    """A URL holding a NUL character answers 400 before any view runs.

    PostgreSQL refuses NUL in a query parameter with an error, so a view that
    looks up `/admin/tools_app/tool/%00/change/` or filters on `?tool_id=%00`
    answered 500 with a traceback in the log. No id, name or filter of
    Toolgate can hold one. The API checks its own input and answers with its
    envelope (config/api.py), so /api/ paths pass through.
    """

    def middleware(request: HttpRequest) -> HttpResponse:
        if not request.path.startswith(API_PREFIX) and _has_nul(request):
            return HttpResponseBadRequest(
                "URLs must not contain NUL characters (%00).", content_type="text/plain; charset=utf-8"
            )
        return get_response(request)

    return middleware


def _has_nul(request: HttpRequest) -> bool:
    if "\x00" in request.path_info:
        return True
    return any("\x00" in key or any("\x00" in value for value in values) for key, values in request.GET.lists())


def change_source(get_response: Callable[[HttpRequest], HttpResponse]) -> Callable[[HttpRequest], HttpResponse]:
    """Bind the interface and the writer of this request for the change log (changes_app).

    The origin follows the URL (admin, REST API, else the tenant UI). The actor
    is read only when a service records a change: an API caller is known only
    after DRF has authenticated the key, which happens inside the view.
    """

    def middleware(request: HttpRequest) -> HttpResponse:
        if request.path.startswith(ADMIN_PREFIX):
            origin = Origin.ADMIN
        elif request.path.startswith(API_PREFIX):
            origin = Origin.REST
        else:
            origin = Origin.TENANT_UI
        token = source_bind(ChangeSource(origin=origin, actor=lambda: actor_for_user(getattr(request, "user", None))))
        try:
            return get_response(request)
        finally:
            source_reset(token)

    return middleware
