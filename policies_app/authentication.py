"""Service-account API keys for DRF: the Bearer scheme, scope permissions and fairness throttle.

`Authorization: Bearer tg_<prefix>_<secret>`, or another Bearer credential an
app above accepts (a signed-in MCP client's access token: signin/apps.py adds
its check at start-up, `bearer_check_add`). Unknown, wrong and revoked keys
get the same answer (the contract's 401 envelope, rendered by core/api/handlers.py),
so the API never tells a prober which part of a key was right.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from django.conf import settings
from django.http import HttpRequest
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed, NotAuthenticated
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle
from structlog.contextvars import bind_contextvars

from changes_app.context import Actor
from changes_app.kinds import ActorKind
from policies_app.fairness import fairness_check
from policies_app.models import ServiceAccount
from policies_app.selectors import Caller, caller_for_key
from policies_app.services import service_account_note_use

SCHEME = "Bearer"
INVALID_KEY_MESSAGE = "invalid API key"
WRONG_SCHEME_MESSAGE = "send the API key as `Authorization: Bearer <api key>`"
X_API_KEY_MESSAGE = "the X-API-Key header is not read; send the key as `Authorization: Bearer <api key>`"

# What a Bearer value that is no API key may still be: each check returns its Caller, or None.
BearerCheck = Callable[[str, HttpRequest], Caller | None]
_bearer_checks: list[BearerCheck] = []


def bearer_check_add(check: BearerCheck) -> None:
    """Accept another kind of Bearer credential (installed once, by its app's `ready()`)."""
    if check not in _bearer_checks:
        _bearer_checks.append(check)


class ServiceAccountUser:
    """What `request.user` is for an API call: the authenticated Caller, nothing Django-user-like."""

    is_authenticated = True
    is_anonymous = False
    is_active = True

    def __init__(self, caller: Caller) -> None:
        self.caller = caller

    @property
    def pk(self) -> str:
        return self.caller.service_account_id

    def __str__(self) -> str:
        return f"{self.caller.tenant_slug}/{self.caller.name}"

    @property
    def change_actor(self) -> Actor:
        """How the change log names this caller (changes_app.context.actor_for_user asks for it)."""
        return Actor(kind=ActorKind.SERVICE_ACCOUNT, id=self.caller.service_account_id, label=str(self))


class ServiceAccountAuthentication(BaseAuthentication):
    """`Authorization: Bearer <api key>` of an active service account.

    No header means anonymous (the permission answers 401 "no API key"); a
    header of another scheme says to use Bearer; a Bearer header that is not a
    valid key answers 401 "invalid API key" whatever was wrong with it.
    Authentication only authenticates: the key lookup keeps its own view of
    governance fresh, and the runner keeps the call's.
    """

    def authenticate(self, request: Request) -> tuple[ServiceAccountUser, None] | None:
        header = get_authorization_header(request)
        if not header:
            if "HTTP_X_API_KEY" in request.META:
                raise AuthenticationFailed(X_API_KEY_MESSAGE)
            return None
        scheme, _, key = header.partition(b" ")
        if scheme.lower() != SCHEME.lower().encode():  # `Token <key>`, `Basic ...` or a bare key
            raise AuthenticationFailed(WRONG_SCHEME_MESSAGE)
        try:
            clear_key = key.strip().decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationFailed(INVALID_KEY_MESSAGE) from None
        caller = caller_for_key(key=clear_key)
        if caller is None:  # not an API key: another credential an app above accepts
            caller = next((found for check in _bearer_checks if (found := check(clear_key, request))), None)
        if caller is None:
            raise AuthenticationFailed(INVALID_KEY_MESSAGE)
        return caller_signed_in(caller), None

    def authenticate_header(self, request: Request) -> str:
        return SCHEME


def mcp_resource_url(request: HttpRequest) -> str:
    """The protected resource a request is sent to (RFC 8707 / RFC 9728): its URL without the query.

    `/mcp` and each toolset endpoint (`/mcp/t/<name>`) are resources of their
    own, so a client that connects to a toolset signs in for that toolset only
    and its consent page shows the toolset's tools.
    """
    return request.build_absolute_uri(request.path)


def caller_signed_in(caller: Caller) -> ServiceAccountUser:
    """What authenticating a request does beyond the key check; the user the request then has."""
    service_account_note_use(service_account_id=caller.service_account_id, loaded_last_used_at=caller.last_used_at)
    # Every log line of the request names the caller (ids only; config/logs.py writes them).
    bind_contextvars(tenant_id=str(caller.tenant_id), service_account_id=caller.service_account_id)
    return ServiceAccountUser(caller)


SUBJECT_HEADER = "X-Toolgate-Subject"
_SUBJECT_META = "HTTP_X_TOOLGATE_SUBJECT"


def request_subject_token(request: Request | HttpRequest) -> str | None:
    """The subject token sent beside the API key (`X-Toolgate-Subject`), None when the header is absent.

    Only the token travels from here (to `delegation_for_token`, which derives
    the subject from its digest); a present but empty or non-ASCII header is a
    token that matches nothing, refused like a forged one.
    """
    value = request.META.get(_SUBJECT_META)
    if value is None:
        return None
    return value.strip() if value.isascii() else ""


def request_caller(request: Request) -> Caller:
    """The Caller behind an authenticated API request (views run after the permission check)."""
    caller = getattr(request.user, "caller", None)
    if not isinstance(caller, Caller):
        raise NotAuthenticated()
    return caller


class ScopePermission(BasePermission):
    """An authenticated service account holding `required_scope`; anonymous callers get 401."""

    required_scope: ClassVar[str]

    @property
    def message(self) -> str:
        return f"the API key lacks the {self.required_scope} scope"

    def has_permission(self, request: Request, view: Any) -> bool:
        caller = getattr(request.user, "caller", None)
        return isinstance(caller, Caller) and self.required_scope in caller.scopes


class ToolsExecScope(ScopePermission):
    """List and execute tools, read the caller's own invocations."""

    required_scope = ServiceAccount.Scope.TOOLS_EXEC.value


class InvocationsScope(BasePermission):
    """Read audit rows: `tools:exec` reads the caller's own, `invocations:read` every row of its tenant."""

    accepted_scopes = frozenset({ServiceAccount.Scope.TOOLS_EXEC.value, ServiceAccount.Scope.INVOCATIONS_READ.value})
    message = "the API key lacks the tools:exec or invocations:read scope"

    def has_permission(self, request: Request, view: Any) -> bool:
        caller = getattr(request.user, "caller", None)
        return isinstance(caller, Caller) and not self.accepted_scopes.isdisjoint(caller.scopes)


class ConnectionsManageScope(ScopePermission):
    """Manage the tenant's connections and grants."""

    required_scope = ServiceAccount.Scope.CONNECTIONS_MANAGE.value


class ServiceAccountRateThrottle(BaseThrottle):
    """Fairness between callers on the API's reads: TOOLGATE_API_RATE_PER_SECOND per service account.

    Tool calls spend the same share inside the runner instead (so a refused
    call is audited like any `rate_limited`); the exec view turns this off.
    The policies' budgets are the real limits.
    """

    def __init__(self) -> None:
        self._retry_after_s: int | None = None

    def allow_request(self, request: Request, view: Any) -> bool:
        caller = getattr(request.user, "caller", None)
        if not isinstance(caller, Caller):
            return True
        refusal = fairness_check(
            service_account_id=caller.service_account_id, rate_per_second=settings.TOOLGATE_API_RATE_PER_SECOND
        )
        if refusal is None:
            return True
        self._retry_after_s = refusal.retry_after_s
        return False

    def wait(self) -> float | None:
        return self._retry_after_s


class ServiceAccountAuthenticationScheme(OpenApiAuthenticationExtension):
    """Registers the Bearer scheme with drf-spectacular."""

    target_class = ServiceAccountAuthentication
    name = "ServiceAccountKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A service account's API key: `Authorization: Bearer tg_<prefix>_<secret>`.",
        }
