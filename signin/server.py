"""Toolgate as the OAuth 2.1 authorization server of its own `/mcp` (docs/api.md), on Authlib's server side.

Authlib does the protocol: the authorization request's checks, the token
endpoint's grants, PKCE, RFC 7591 registration, RFC 7009 revocation and the
RFC 6749 §5.2 error bodies. This module only binds its hooks to
signin.services (what is stored) and adds Toolgate's rules:

- public clients only (`token_endpoint_auth_method` `none`), registered or known
  by an https Client ID Metadata Document (documents.py fetches those, at the
  authorization step only: the token and revocation endpoints read stored rows);
- PKCE with S256 only, always;
- RFC 8707: `resource` is `<base>/mcp` (the default) or one toolset's
  `<base>/mcp/t/<name>`; the code and its tokens are bound to it, and a token
  request that names another resource than its code's or grant's is refused;
- rotating refresh tokens; a reused refresh token or code revokes its family.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from authlib.common.encoding import json_dumps
from authlib.common.security import generate_token
from authlib.integrations.django_oauth2.requests import DjangoJsonRequest, DjangoOAuth2Request
from authlib.oauth2 import AuthorizationServer, OAuth2Error
from authlib.oauth2.rfc6749 import (
    AuthorizationCodeMixin,
    ClientMixin,
    InvalidRequestError,
    TokenMixin,
)
from authlib.oauth2.rfc6749.grants import AuthorizationCodeGrant, RefreshTokenGrant
from authlib.oauth2.rfc7009 import RevocationEndpoint
from authlib.oauth2.rfc7591 import ClientRegistrationEndpoint
from authlib.oauth2.rfc7591.errors import InvalidClientMetadataError, InvalidRedirectURIError
from authlib.oauth2.rfc7636 import CodeChallenge
from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpRequest, HttpResponse

from core.errors import AppError
from policies_app.keys import access_token_generate, refresh_token_generate
from policies_app.models import Delegation
from signin.documents import document_client_allowed
from signin.models import SigninClient, SigninCode, SigninToken
from signin.services import (
    ACCESS_TOKEN_TTL,
    SIGNIN_SCOPE,
    signin_client_get,
    signin_client_register,
    signin_code_create,
    signin_code_take,
    signin_redirect_uri_problem,
    signin_refresh_take,
    signin_token_find,
    signin_token_revoke,
    signin_tokens_issue,
    signin_tokens_rotate,
)
from tools_app.toolsets import NAME_RE as TOOLSET_NAME_RE

GRANT_TYPES = ["authorization_code", "refresh_token"]
MAX_RESOURCE_LENGTH = 500  # what SigninCode.resource and SigninGrant.resource hold
NO_CLIENT_ID = "token_holder"  # RFC 7009 from a public client that sent only the token


def site_base(request: HttpRequest) -> str:
    """`<base>`: the scheme and host this request reached, the issuer and the prefix of every endpoint."""
    return request.build_absolute_uri("/").rstrip("/")


def mcp_resource(request: HttpRequest) -> str:
    """`<base>/mcp`, the whole catalog's protected resource (RFC 8707 / RFC 9728)."""
    return f"{site_base(request)}/mcp"


def toolset_resource(request: HttpRequest, name: str) -> str:
    """`<base>/mcp/t/<name>`, one toolset's protected resource."""
    return f"{mcp_resource(request)}/t/{name}"


class InvalidTargetError(OAuth2Error):
    """RFC 8707: the `resource` is not one this server issues tokens for."""

    error = "invalid_target"


@dataclass(frozen=True, slots=True)
class Target:
    """What a sign-in is for (its RFC 8707 `resource`): the whole catalog, or one toolset by name."""

    resource: str
    toolset: str | None


def target_of(request: HttpRequest, resource: str | None) -> Target:
    """The target a `resource` value names (none sent: the whole catalog); InvalidTargetError otherwise.

    The value is the client's, so untrusted: it must be exactly this server's
    `/mcp` or `/mcp/t/` followed by a well-formed toolset name. Whether that
    toolset exists depends on the tenant, which the person picks on the consent
    page, so that is checked there (on every showing and on the answer).
    """
    whole = mcp_resource(request)
    if resource is None or resource == whole:
        return Target(resource=whole, toolset=None)
    prefix = toolset_resource(request, "")
    name = resource[len(prefix) :] if resource.startswith(prefix) else ""
    if len(resource) > MAX_RESOURCE_LENGTH or not TOOLSET_NAME_RE.fullmatch(name):
        raise InvalidTargetError(f"The resource must be {whole} or {prefix}<toolset name>.")
    return Target(resource=resource, toolset=name)


# --- the rows, as Authlib sees them ----------------------------------------------------------------


class Client(ClientMixin):
    """A public client: no secret, code + refresh grants, exact redirect URIs."""

    def __init__(self, row: SigninClient) -> None:
        self.row = row

    def get_client_id(self) -> str:
        return self.row.client_id

    def get_default_redirect_uri(self) -> str | None:
        return None  # redirect_uri is required on every authorization request

    def get_allowed_scope(self, scope: str | None) -> str:
        return SIGNIN_SCOPE  # one scope; what the client may do is the person's consent

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.row.redirect_uris

    def check_client_secret(self, client_secret: str) -> bool:
        return False

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method == "none" or (method == NO_CLIENT_ID and endpoint == "revocation")

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in GRANT_TYPES


class _UnknownHolder(Client):
    """The revocation endpoint's client for a token nobody holds: revoking it answers 200 and does nothing."""

    def __init__(self) -> None:
        self.row = SigninClient(client_id="")


@dataclass(frozen=True, slots=True)
class Code(AuthorizationCodeMixin):
    row: SigninCode

    def get_redirect_uri(self) -> str:
        return self.row.redirect_uri

    def get_scope(self) -> str:
        return self.row.scope

    @property
    def code_challenge(self) -> str:
        return self.row.code_challenge

    @property
    def code_challenge_method(self) -> str:
        return "S256"


@dataclass(frozen=True, slots=True)
class Token(TokenMixin):
    row: SigninToken

    def check_client(self, client: Client) -> bool:
        return self.row.grant.client_id == client.row.pk

    def get_scope(self) -> str:
        return self.row.scope

    def get_expires_in(self) -> int:
        return int(ACCESS_TOKEN_TTL.total_seconds())

    def is_revoked(self) -> bool:
        return self.row.revoked_at is not None

    def is_expired(self) -> bool:
        return False  # the resource server reads the row's own expiry


@dataclass(frozen=True, slots=True)
class Consented:
    """The person who allowed the client, and the delegation their consent made or reused."""

    user: AbstractBaseUser
    delegation: Delegation


# --- extensions: S256 only, and the resource binding ----------------------------------------------


class S256Only(CodeChallenge):
    """PKCE is required of every client, with S256 (RFC 7636 `plain` is refused, as is no method)."""

    DEFAULT_CODE_CHALLENGE_METHOD = "S256"
    SUPPORTED_CODE_CHALLENGE_METHOD = ["S256"]

    def validate_code_challenge(self, grant: Any, redirect_uri: str) -> None:
        data = grant.request.payload.data
        if not data.get("code_challenge") or data.get("code_challenge_method") != "S256":
            raise InvalidRequestError("PKCE is required: send code_challenge with code_challenge_method=S256.")
        super().validate_code_challenge(grant, redirect_uri)


def _requested_resource(request: Any) -> str | None:
    values = request.payload.datalist.get("resource", [])
    if len(values) > 1:
        raise InvalidTargetError("Only one 'resource' may be requested.")
    return values[0] if values else None


def requested_target(request: Any) -> Target:
    """RFC 8707: the target of an authorization or token request (InvalidTargetError when it has none)."""
    return target_of(request._request, _requested_resource(request))


def check_same_resource(request: Any, bound: str) -> None:
    """A token request may name only the resource its code or grant is bound to (never a wider one)."""
    if _requested_resource(request) not in (None, bound):
        raise InvalidTargetError(f"This sign-in is for {bound}: ask for that resource, or sign in again.")


class ResourceBinding:
    def __call__(self, grant: Any) -> None:
        grant.register_hook("after_validate_authorization_request_payload", self._on_authorization)
        grant.register_hook("before_validate_token_request", self._on_token)
        grant.register_hook("after_validate_token_request", self._on_code)

    def _on_authorization(self, grant: Any, redirect_uri: str) -> None:
        requested_target(grant.request)

    def _on_token(self, grant: Any) -> None:
        requested_target(grant.request)

    def _on_code(self, grant: Any, result: None) -> None:
        check_same_resource(grant.request, grant.request.authorization_code.row.resource)


# --- grants -------------------------------------------------------------------------------------------


class CodeGrant(AuthorizationCodeGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = ["none"]

    def save_authorization_code(self, code: str, request: Any) -> None:
        consented: Consented = request.user
        signin_code_create(
            code=code,
            client=request.client.row,
            delegation=consented.delegation,
            redirect_uri=request.payload.redirect_uri,
            code_challenge=request.payload.data["code_challenge"],
            resource=requested_target(request).resource,
            scope=request.scope or SIGNIN_SCOPE,
        )

    def query_authorization_code(self, code: str, client: Client) -> Code | None:
        row = signin_code_take(code=code, client=client.row)
        return None if row is None else Code(row)

    def delete_authorization_code(self, authorization_code: Code) -> None:
        """Nothing to do: the code was spent when it was taken."""

    def authenticate_user(self, authorization_code: Code) -> Code:
        return authorization_code

    def save_token(self, token: dict[str, Any]) -> None:
        signin_tokens_issue(
            code=self.request.authorization_code.row,
            access=token["access_token"],
            refresh=token["refresh_token"],
            scope=token.get("scope") or SIGNIN_SCOPE,
        )


class RefreshGrant(RefreshTokenGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = ["none"]
    INCLUDE_NEW_REFRESH_TOKEN = True

    def authenticate_refresh_token(self, refresh_token: str) -> Token | None:
        requested_target(self.request)
        row = signin_refresh_take(refresh_token=refresh_token, client=self.request.client.row)
        if row is None:
            return None
        check_same_resource(self.request, row.grant.resource)
        return Token(row)

    def authenticate_user(self, refresh_token: Token) -> Token:
        return refresh_token

    def save_token(self, token: dict[str, Any]) -> None:
        signin_tokens_rotate(
            old=self.request.refresh_token.row,
            access=token["access_token"],
            refresh=token["refresh_token"],
            scope=token.get("scope") or SIGNIN_SCOPE,
        )

    def revoke_old_credential(self, refresh_token: Token) -> None:
        """Done by signin_tokens_rotate, in the same transaction as the new pair."""


# --- endpoints ----------------------------------------------------------------------------------------


class Revocation(RevocationEndpoint):
    CLIENT_AUTH_METHODS = ["none", NO_CLIENT_ID]

    def query_token(self, token_string: str, token_type_hint: str | None) -> Token | None:
        row = signin_token_find(token=token_string)
        return None if row is None else Token(row)

    def revoke_token(self, token: Token, request: Any) -> None:
        signin_token_revoke(token=token.row)


def _authenticate_token_holder(query_client: Any, request: Any) -> Client | None:
    """RFC 7009 from a public client that sent no client_id: the token itself says whose it is."""
    if request.payload.client_id:
        return None
    row = signin_token_find(token=request.form.get("token") or "")
    return _UnknownHolder() if row is None else Client(row.grant.client)


LIST_FIELDS = ("redirect_uris", "grant_types", "response_types", "contacts")
TEXT_FIELDS = ("client_name", "client_uri", "token_endpoint_auth_method", "scope", "logo_uri", "software_id")


def metadata_shape_problem(document: object) -> str | None:
    """Why a registration body is not client metadata (RFC 7591 §2): a JSON object whose lists are lists
    of strings and whose texts are strings (null stands for absent); None when it is."""
    if not isinstance(document, dict):
        return "The body must be a JSON object of client metadata."
    for name in LIST_FIELDS:
        value = document.get(name)
        if value is not None and not (isinstance(value, list) and all(isinstance(item, str) for item in value)):
            return f"'{name}' must be a list of strings."
    for name in TEXT_FIELDS:
        value = document.get(name)
        if value is not None and not isinstance(value, str):
            return f"'{name}' must be a string."
    return None


class Registration(ClientRegistrationEndpoint):
    """RFC 7591, open to anyone (rate-limited by the view): public clients with checked redirect URIs."""

    def extract_client_metadata(self, request: Any) -> dict[str, Any]:
        problem = metadata_shape_problem(request.payload.data)
        if problem is not None:
            raise InvalidClientMetadataError(problem)
        return super().extract_client_metadata(request)

    def authenticate_token(self, request: Any) -> bool:
        return True  # open registration: the person's login and consent are what protect anything

    def get_server_metadata(self) -> None:
        return None

    def generate_client_info(self, request: Any) -> dict[str, Any]:
        return {"client_id": f"tgc_{generate_token(32)}"}

    def save_client(self, client_info: dict[str, Any], client_metadata: dict[str, Any], request: Any) -> Client:
        problem = next(
            (p for p in map(signin_redirect_uri_problem, client_metadata.get("redirect_uris") or [None]) if p), None
        )
        if problem is not None:
            raise InvalidRedirectURIError(problem)
        try:
            row = signin_client_register(
                client_id=client_info["client_id"],
                client_name=client_metadata.get("client_name"),
                client_uri=client_metadata.get("client_uri"),
                redirect_uris=client_metadata.get("redirect_uris"),
                registered_from=getattr(getattr(request.payload, "_request", None), "client_ip", None),
            )
        except AppError as error:
            raise InvalidClientMetadataError(error.safe_message) from None
        return Client(row)

    def generate_client_registration_info(self, client: Client, request: Any) -> dict[str, Any]:
        """What was registered, as the client must use it (RFC 7591 §3.2.1 lets the server decide)."""
        row = client.row
        return {
            "client_name": row.client_name,
            "redirect_uris": row.redirect_uris,
            "token_endpoint_auth_method": "none",
            "grant_types": GRANT_TYPES,
            "response_types": ["code"],
            "scope": SIGNIN_SCOPE,
        }


class ToolgateAuthorizationServer(AuthorizationServer):
    """Authlib's generic server on Django requests, with Toolgate's clients and tokens."""

    def __init__(self) -> None:
        super().__init__(scopes_supported=None)
        self.register_token_generator("default", _generate_pair)
        self.register_grant(CodeGrant, [S256Only(required=True), ResourceBinding()])
        self.register_grant(RefreshGrant)
        self.register_client_auth_method(NO_CLIENT_ID, _authenticate_token_holder)
        self.register_endpoint(Revocation)
        self.register_endpoint(Registration)

    def query_client(self, client_id: str) -> Client | None:
        """A stored, live client; never a fetch (documents are fetched at the authorization step only)."""
        row = signin_client_get(client_id=client_id)
        return None if row is None or not document_client_allowed(row) else Client(row)

    def save_token(self, token: dict[str, Any], request: Any) -> None:
        raise NotImplementedError("each grant saves its own tokens")  # pragma: no cover

    def create_oauth2_request(self, request: Any) -> DjangoOAuth2Request:
        return request if isinstance(request, DjangoOAuth2Request) else DjangoOAuth2Request(request)

    def create_json_request(self, request: Any) -> DjangoJsonRequest:
        return DjangoJsonRequest(request)

    def handle_response(self, status_code: int, payload: Any, headers: Any) -> HttpResponse:
        body = json_dumps(payload) if isinstance(payload, dict) else payload
        response = HttpResponse(body, status=status_code)
        for name, value in headers:
            response[name] = value
        if isinstance(payload, dict):
            response["Content-Type"] = "application/json"
            response["Cache-Control"] = "no-store"
        return response

    def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
        """No signals: the services that write record their own change-log entries."""


def _generate_pair(*, scope: str | None = None, **_context: Any) -> dict[str, Any]:
    """A bearer pair in Toolgate's token shapes (`tga_…`, `tgr_…`); stored as digests by the grants."""
    return {
        "token_type": "Bearer",
        "access_token": access_token_generate().key,
        "refresh_token": refresh_token_generate().key,
        "expires_in": int(ACCESS_TOKEN_TTL.total_seconds()),
        "scope": scope or SIGNIN_SCOPE,
    }


@functools.cache
def authorization_server() -> ToolgateAuthorizationServer:
    """The one server of this process (stateless apart from its registered grants and endpoints)."""
    return ToolgateAuthorizationServer()
