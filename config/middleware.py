"""Middleware of the whole site (settings.MIDDLEWARE)."""

from __future__ import annotations

import copy
import http
import threading
from collections.abc import Callable, Sequence
from typing import Any

from csp.constants import HEADER, HEADER_REPORT_ONLY
from csp.middleware import CheckableLazyObject, CSPMiddleware
from csp.utils import build_policy
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.handlers.base import BaseHandler
from django.core.handlers.exception import convert_exception_to_response
from django.db import DEFAULT_DB_ALIAS, connections
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.http.response import HttpResponseBase
from django.utils.module_loading import import_string

from changes_app.context import ChangeSource, actor_for_user, source_bind, source_reset
from changes_app.kinds import Origin
from core.api.handlers import API_PREFIX, outage_answer_of
from core.outages import OUTAGE_ERRORS

ADMIN_PREFIX = "/admin/"
# Hooks Django's handler collects from MIDDLEWARE's instances; a list built here has no handler to collect them.
_HANDLER_HOOKS = ("process_view", "process_template_response", "process_exception")

Handler = Callable[[HttpRequest], HttpResponseBase]


def api_middleware(get_response: Handler) -> Handler:
    """Send the JSON API's paths through settings.API_MIDDLEWARE instead of the rest of settings.MIDDLEWARE.

    Sessions, CSRF, Django's user, messages, static files and django-axes have
    nothing to do on an endpoint that reads a Bearer key and answers JSON, yet
    they were a fifth of an exec call's CPU. Paths under
    settings.API_MIDDLEWARE_PATHS leave the site's list here (after the request
    log) and go through the API's own list, which ends at the same URL
    resolution and views; every other path goes on through the site's list.
    The answers and headers are the same either way
    (tests/config/test_middleware.py compares them).
    """
    api = middleware_chain(settings.API_MIDDLEWARE)
    prefixes = tuple(settings.API_MIDDLEWARE_PATHS)

    def middleware(request: HttpRequest) -> HttpResponseBase:
        if request.path_info.startswith(prefixes):
            return api(request)
        return get_response(request)

    return middleware


def answer_after_durable_writes(get_response: Handler) -> Handler:
    """The answer leaves only once the writes sent ahead while building it are committed.

    The audit row is sent ahead of the answer (config/postgresql's
    `write_ahead`): PostgreSQL inserts and commits it while the view renders
    the answer and the middleware below this one runs. Here, before the answer
    goes back up to the web server, its result is read; a write that failed
    (the database went away meanwhile) turns the answer into 503
    `unavailable_dependency`, as it would have been had the write been awaited
    in place (a view with an envelope of its own, the MCP endpoint's JSON-RPC,
    sets its own answer: core.api.handlers' `answer_outages_with`). First in
    settings.API_MIDDLEWARE, so all of that list overlaps the write; SQLite
    has nothing to send ahead.
    """

    def middleware(request: HttpRequest) -> HttpResponseBase:
        awaited_at_exit = getattr(connections[DEFAULT_DB_ALIAS], "writes_awaited_at_exit", None)
        if awaited_at_exit is None:
            return get_response(request)
        try:
            with awaited_at_exit():
                return get_response(request)
        except OUTAGE_ERRORS as exc:
            return outage_answer_of(request)(exc)

    return middleware


def middleware_chain(paths: Sequence[str]) -> Handler:
    """A middleware list built as Django's handler builds MIDDLEWARE, ending at Django's URL resolution and view.

    Only middleware whose work is in `__call__`, `process_request` and
    `process_response` can be listed: view, template-response and exception
    hooks are collected by Django's handler from MIDDLEWARE alone.
    """
    resolver = BaseHandler()
    resolver._view_middleware = []
    resolver._template_response_middleware = []
    resolver._exception_middleware = []
    handler: Handler = convert_exception_to_response(resolver._get_response)
    for path in reversed(paths):
        instance = import_string(path)(handler)
        hooks = [hook for hook in _HANDLER_HOOKS if hasattr(instance, hook)]
        if hooks:
            raise ImproperlyConfigured(f"{path} needs {', '.join(hooks)}: list it in MIDDLEWARE, not API_MIDDLEWARE")
        handler = convert_exception_to_response(instance)
    return handler


def refuse_nul_in_urls(get_response: Callable[[HttpRequest], HttpResponse]) -> Callable[[HttpRequest], HttpResponse]:
    """A URL holding a NUL character answers 400 before any view runs.

    PostgreSQL refuses NUL in a query parameter with an error, so a view that
    looks up `/admin/tools_app/tool/%00/change/` or filters on `?tool_id=%00`
    answered 500 with a traceback in the log. No id, name or filter of
    Toolgate can hold one. The API checks its own input and answers with its
    envelope (core/api/handlers.py), so /api/ paths pass through.
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


# What a view or a template may set to make one response's policy differ from the site's (django-csp's names).
_RESPONSE_OVERRIDES = (
    "_csp_config",
    "_csp_update",
    "_csp_replace",
    "_csp_exempt",
    "_csp_config_ro",
    "_csp_update_ro",
    "_csp_replace_ro",
    "_csp_exempt_ro",
)
_DEBUG_PAGES = (http.HTTPStatus.NOT_FOUND, http.HTTPStatus.INTERNAL_SERVER_ERROR)


class SitePolicyCSPMiddleware(CSPMiddleware):
    """django-csp's middleware, with the site's own policy built once instead of on every response.

    django-csp builds both headers from the settings for every response (about
    150 µs of a request's CPU here, API answers and `/healthz` included), yet
    they differ only when a view changes its response's policy, a template used
    a nonce, or the settings change. Those responses (and DEBUG's error pages,
    and sites with excluded URL prefixes) still go through django-csp; the rest
    get the same two headers, built again only when the settings differ from
    the copy they were built from (tests override them).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        super().__init__(get_response)
        self._lock = threading.Lock()
        self._built: tuple[tuple[Any, Any], str, str] | None = None  # (the two policies, their headers)

    def process_response(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        policies = (
            getattr(settings, "CONTENT_SECURITY_POLICY", None),
            getattr(settings, "CONTENT_SECURITY_POLICY_REPORT_ONLY", None),
        )
        if not self._site_policy_applies(request, response, policies):
            return super().process_response(request, response)
        header, header_report_only = self._site_headers(policies)
        if header and HEADER not in response:
            response[HEADER] = header
        if header_report_only and HEADER_REPORT_ONLY not in response:
            response[HEADER_REPORT_ONLY] = header_report_only
        # As django-csp does: a template asking for a nonce after the header was written is an error, not a gap.
        request.csp_nonce = CheckableLazyObject(self._csp_nonce_post_response)  # type: ignore[attr-defined]
        return response

    @staticmethod
    def _site_policy_applies(request: HttpRequest, response: HttpResponseBase, policies: tuple[Any, Any]) -> bool:
        if getattr(request, "_csp_nonce", None) is not None:
            return False
        if any(hasattr(response, name) for name in _RESPONSE_OVERRIDES):
            return False
        if settings.DEBUG and response.status_code in _DEBUG_PAGES:
            return False
        return not any((policy or {}).get("EXCLUDE_URL_PREFIXES") for policy in policies)

    def _site_headers(self, policies: tuple[Any, Any]) -> tuple[str, str]:
        built = self._built
        if built is None or built[0] != policies:
            with self._lock:
                built = self._built = (copy.deepcopy(policies), build_policy(), build_policy(report_only=True))
        return built[1], built[2]
