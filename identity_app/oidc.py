"""The OpenID Connect relying party: discovery, the authorization request, the code exchange, the ID token.

Built on Authlib (already the project's OAuth client, see connections_app.oauth):
its httpx2 `OAuth2Client` builds the authorization URL with PKCE (S256) and
exchanges the code; its `CodeIDToken` checks the ID token's claims once joserfc
has checked the signature. Every request (discovery, JWKS, token) goes through
`CheckedTransport`, which resolves the host, refuses a private address unless
TOOLGATE_SSO_ALLOW_PRIVATE_NETWORKS allows it, and connects to the address it
checked, so a second DNS answer cannot point the login at an internal service.

Provider metadata and key sets are cached per process: discovery for an hour,
a key set until an ID token names a key id it does not hold. Then the set is
fetched again (the provider rotated its keys), at most once a minute per
provider, so forged tokens with made-up key ids cannot make us hammer it.
"""

from __future__ import annotations

import functools
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx2
from authlib.common.errors import AuthlibBaseError
from authlib.common.security import generate_token
from authlib.integrations.httpx_client import OAuth2Client
from authlib.oidc.core import CodeIDToken
from django.conf import settings
from joserfc import jwt
from joserfc.errors import InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet
from joserfc.jws import JWSRegistry
from joserfc.jwt import JWTClaimsRegistry

from core.errors import FORBIDDEN, AppError
from core.netguard import UpstreamAddressRefused, parse_endpoint, resolve_checked_now

HTTP_TIMEOUT_S = 10.0
DISCOVERY_TTL_S = 3600.0
JWKS_REFETCH_MIN_INTERVAL_S = 60.0
CLOCK_LEEWAY_S = 60
MAX_DOCUMENT_BYTES = 512 * 1024
# Symmetric algorithms would make the client secret a signing key; OpenID providers sign with keys pairs.
BACKCHANNEL_LOGOUT_EVENT = "http://schemas.openid.net/event/backchannel-logout"
# A logout token is sent the moment the person signs out at the provider: an old one is a replay, and the
# replay cache needs to keep its jti only this long.
LOGOUT_TOKEN_MAX_AGE_S = 600
MAX_LOGOUT_TOKEN_CHARS = 16 * 1024
ASYMMETRIC_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


class LoginRefused(AppError):
    """A single sign-on login that must not go through; the message is safe to show and to log."""

    def __init__(self, safe_message: str) -> None:
        super().__init__(safe_message, code=FORBIDDEN)


class CheckedTransport(httpx2.HTTPTransport):
    """An httpx2 transport that connects only to an address the outbound guard accepted.

    The Host header keeps the URL's name (httpx2 set it when the request was
    built) and TLS verifies that name (`sni_hostname`), while the socket goes to
    the address resolved and checked here.
    """

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            endpoint = parse_endpoint(str(request.url))
            address = resolve_checked_now(endpoint, allow_private=settings.TOOLGATE_SSO_ALLOW_PRIVATE_NETWORKS)
        except UpstreamAddressRefused as refused:
            raise LoginRefused(f"identity provider URL refused: {refused}") from None
        request.url = request.url.copy_with(host=address)
        request.extensions = {**request.extensions, "sni_hostname": endpoint.host}
        return super().handle_request(request)


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """Certificate verification built once per process (loading the CA bundle costs ~60 ms)."""
    return httpx2.create_ssl_context()


def oidc_client(*, client_id: str = "", client_secret: str = "", redirect_uri: str | None = None) -> OAuth2Client:
    """An Authlib client whose every request passes the outbound guard; PKCE S256 on the code flow."""
    return OAuth2Client(
        client_id=client_id or None,
        client_secret=client_secret or None,
        redirect_uri=redirect_uri,
        code_challenge_method="S256",
        token_endpoint_auth_method="client_secret_basic",  # noqa: S106 (a method name, not a secret)
        timeout=httpx2.Timeout(HTTP_TIMEOUT_S),
        follow_redirects=False,
        transport=CheckedTransport(verify=_tls_context()),
    )


@dataclass(frozen=True, slots=True)
class ProviderMetadata:
    """What discovery says about a provider, reduced to what the login uses."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    end_session_endpoint: str
    algorithms: tuple[str, ...]
    userinfo_endpoint: str = ""


_lock = threading.Lock()
_metadata: dict[str, tuple[float, ProviderMetadata]] = {}
_key_sets: dict[str, tuple[float, KeySet]] = {}


def caches_clear() -> None:
    """Forget every provider's metadata and keys (tests; an operator who changed an issuer)."""
    with _lock:
        _metadata.clear()
        _key_sets.clear()


def _get_json(url: str, *, headers: dict[str, str] | None = None) -> dict[str, Any]:
    try:
        with oidc_client() as client:
            response = client.request(
                "GET", url, headers={"Accept": "application/json", **(headers or {})}, withhold_token=True
            )
    except httpx2.HTTPError as error:
        raise LoginRefused(f"the identity provider could not be reached ({type(error).__name__})") from None
    if response.status_code != 200:
        raise LoginRefused(f"the identity provider answered {response.status_code} for {url}")
    if len(response.content) > MAX_DOCUMENT_BYTES:
        raise LoginRefused("the identity provider's document is too large")
    try:
        document = response.json()
    except ValueError:
        raise LoginRefused("the identity provider's document is not JSON") from None
    if not isinstance(document, dict):
        raise LoginRefused("the identity provider's document is not a JSON object")
    return document


def provider_metadata(issuer: str) -> ProviderMetadata:
    """The provider's discovery document, checked: it must name exactly this issuer (OpenID Discovery 4.3)."""
    now = time.monotonic()
    with _lock:
        cached = _metadata.get(issuer)
    if cached is not None and cached[0] > now:
        return cached[1]
    document = _get_json(issuer.rstrip("/") + "/.well-known/openid-configuration")
    if document.get("issuer") != issuer:
        raise LoginRefused("the discovery document names another issuer")
    try:
        metadata = ProviderMetadata(
            issuer=issuer,
            authorization_endpoint=str(document["authorization_endpoint"]),
            token_endpoint=str(document["token_endpoint"]),
            jwks_uri=str(document["jwks_uri"]),
            end_session_endpoint=str(document.get("end_session_endpoint") or ""),
            userinfo_endpoint=str(document.get("userinfo_endpoint") or ""),
            algorithms=tuple(
                alg
                for alg in document.get("id_token_signing_alg_values_supported") or ("RS256",)
                if alg in ASYMMETRIC_ALGORITHMS
            ),
        )
    except KeyError as missing:
        raise LoginRefused(f"the discovery document has no {missing.args[0]}") from None
    if not metadata.algorithms:
        raise LoginRefused("the provider offers no asymmetric ID token signing algorithm")
    with _lock:
        _metadata[issuer] = (now + DISCOVERY_TTL_S, metadata)
    return metadata


def provider_keys(metadata: ProviderMetadata, *, refresh: bool = False) -> KeySet:
    """The provider's signing keys: cached, fetched again on `refresh` unless fetched within the last minute."""
    now = time.monotonic()
    with _lock:
        cached = _key_sets.get(metadata.jwks_uri)
    if cached is not None and (not refresh or now - cached[0] < JWKS_REFETCH_MIN_INTERVAL_S):
        return cached[1]
    document = _get_json(metadata.jwks_uri)
    try:
        key_set = KeySet.import_key_set(document)  # type: ignore[arg-type]
    except (JoseError, ValueError, TypeError, KeyError):
        raise LoginRefused("the provider's key set does not parse") from None
    with _lock:
        _key_sets[metadata.jwks_uri] = (now, key_set)
    return key_set


@dataclass(frozen=True, slots=True)
class AuthorizationRequest:
    """Where to send the browser, and what the callback must find again (kept in the session)."""

    url: str
    state: str
    nonce: str
    code_verifier: str


def authorization_request(
    *, metadata: ProviderMetadata, client_id: str, scopes: list[str], redirect_uri: str
) -> AuthorizationRequest:
    """The authorization code request with fresh state, nonce and PKCE verifier."""
    state, nonce, verifier = generate_token(32), generate_token(32), generate_token(64)
    scope = " ".join(dict.fromkeys(["openid", *scopes]))
    with oidc_client(client_id=client_id, redirect_uri=redirect_uri) as client:
        url, _ = client.create_authorization_url(
            metadata.authorization_endpoint, state=state, nonce=nonce, code_verifier=verifier, scope=scope
        )
    return AuthorizationRequest(url=url, state=state, nonce=nonce, code_verifier=verifier)


def code_exchange(
    *,
    metadata: ProviderMetadata,
    client_id: str,
    client_secret: str,
    redirect_uri: str,
    code: str,
    code_verifier: str,
) -> dict[str, Any]:
    """The token response for `code` (with the PKCE verifier); LoginRefused when the provider says no."""
    try:
        with oidc_client(client_id=client_id, client_secret=client_secret, redirect_uri=redirect_uri) as client:
            token = client.fetch_token(
                metadata.token_endpoint, grant_type="authorization_code", code=code, code_verifier=code_verifier
            )
    except httpx2.HTTPError as error:
        raise LoginRefused(f"the token endpoint could not be reached ({type(error).__name__})") from None
    except AuthlibBaseError as error:  # the provider's error answer (invalid_grant for a spent or forged code...)
        code_name = error.error or type(error).__name__
        raise LoginRefused(f"the provider refused the code exchange ({code_name})") from None
    if not isinstance(token, dict) or "id_token" not in token:
        raise LoginRefused("the token response carries no ID token")
    return dict(token)


def _signed_by_provider(value: str, *, metadata: ProviderMetadata, what: str) -> jwt.Token:
    """The JWT once its signature verifies with one of the provider's keys (an unknown key id: fetch them again)."""
    registry = JWSRegistry(algorithms=list(metadata.algorithms))
    try:
        try:
            return jwt.decode(value, provider_keys(metadata), registry=registry)
        except InvalidKeyIdError:
            return jwt.decode(value, provider_keys(metadata, refresh=True), registry=registry)
    except InvalidKeyIdError:
        raise LoginRefused(f"{what} is signed with a key the provider does not publish") from None
    except (JoseError, ValueError, TypeError) as error:
        raise LoginRefused(f"{what} does not verify ({type(error).__name__})") from None


def id_token_claims(
    id_token: str, *, metadata: ProviderMetadata, client_id: str, nonce: str, access_token: str | None = None
) -> dict[str, Any]:
    """The ID token's claims once its signature, `iss`, `aud`, `exp`, `iat`, `nonce` and `azp` hold.

    An unknown key id fetches the key set once more (rotation); a bad signature,
    a wrong audience or issuer, an expired token or another nonce is refused.
    """
    token = _signed_by_provider(id_token, metadata=metadata, what="the ID token")
    params: dict[str, Any] = {"nonce": nonce, "client_id": client_id}
    if access_token:
        params["access_token"] = access_token
    claims = CodeIDToken(
        token.claims,
        token.header,
        {"iss": {"essential": True, "value": metadata.issuer}, "aud": {"essential": True, "value": client_id}},
        params,
    )
    try:
        claims.validate(leeway=CLOCK_LEEWAY_S)
    except JoseError as error:
        raise LoginRefused(f"the ID token is not valid for this login ({error.error}: {error.description})") from None
    if not nonce or claims.get("nonce") != nonce:
        raise LoginRefused("the ID token's nonce does not match this login")
    return dict(claims)


# What the ID token says about itself: never taken from the UserInfo response.
ID_TOKEN_ONLY_CLAIMS = frozenset(
    {"iss", "aud", "exp", "iat", "nbf", "nonce", "azp", "at_hash", "c_hash", "auth_time", "sid"}
)


def userinfo_claims(*, metadata: ProviderMetadata, access_token: str) -> dict[str, Any]:
    """The UserInfo response (JSON) for this access token, through the outbound guard like every request."""
    if not metadata.userinfo_endpoint:
        raise LoginRefused("the provider publishes no userinfo endpoint, and the ID token lacks claims it needs")
    if not access_token:
        raise LoginRefused("the token response carries no access token to read the userinfo claims with")
    return _get_json(metadata.userinfo_endpoint, headers={"Authorization": f"Bearer {access_token}"})


def claims_with_userinfo(id_claims: dict[str, Any], userinfo: dict[str, Any]) -> dict[str, Any]:
    """The ID token's claims, completed by UserInfo's where the ID token has none (OpenID Connect Core 5.3.2).

    UserInfo's `sub` must be the ID token's, or the response is someone else's
    and the login is refused; the ID token's own claims always win.
    """
    if userinfo.get("sub") != id_claims.get("sub"):
        raise LoginRefused("the userinfo response is for another subject than the ID token")
    extra = {name: value for name, value in userinfo.items() if name not in ID_TOKEN_ONLY_CLAIMS}
    return {**extra, **id_claims}


class LogoutTokenRefused(AppError):
    """A back-channel logout token that must not end anything; the message is safe to send back and to log."""

    def __init__(self, safe_message: str) -> None:
        super().__init__(safe_message)


def logout_token_claims(logout_token: str, *, metadata: ProviderMetadata, client_id: str) -> dict[str, Any]:
    """A back-channel logout token's claims once it holds (OpenID Connect Back-Channel Logout 1.0, 2.6).

    The signature by the provider's keys, `iss`, `aud`, a recent `iat`, a `jti`,
    the logout event, `sid` and/or `sub`, and no `nonce` (which would make it an
    ID token passed off as a logout token). The `jti` is checked for replay by
    the caller, which owns the cache.
    """
    if not logout_token or len(logout_token) > MAX_LOGOUT_TOKEN_CHARS:
        raise LogoutTokenRefused("logout_token is missing or too long")
    try:
        token = _signed_by_provider(logout_token, metadata=metadata, what="the logout token")
    except LoginRefused as refused:
        raise LogoutTokenRefused(refused.safe_message) from None
    claims = dict(token.claims)
    registry = JWTClaimsRegistry(
        leeway=CLOCK_LEEWAY_S,
        iss={"essential": True, "value": metadata.issuer},
        aud={"essential": True, "value": client_id},
        iat={"essential": True},
        jti={"essential": True},
    )
    try:
        registry.validate(claims)
    except JoseError as error:
        raise LogoutTokenRefused(f"the logout token is not valid here ({error.error}: {error.description})") from None
    if claims["iat"] < time.time() - LOGOUT_TOKEN_MAX_AGE_S:
        raise LogoutTokenRefused(f"the logout token was issued more than {LOGOUT_TOKEN_MAX_AGE_S} seconds ago")
    events = claims.get("events")
    if not isinstance(events, dict) or not isinstance(events.get(BACKCHANNEL_LOGOUT_EVENT), dict):
        raise LogoutTokenRefused(f"the logout token's events claim has no {BACKCHANNEL_LOGOUT_EVENT} member")
    if "nonce" in claims:
        raise LogoutTokenRefused("a logout token must not carry a nonce")
    sid, sub = claims.get("sid"), claims.get("sub")
    if not (isinstance(sid, str) and sid) and not (isinstance(sub, str) and sub):
        raise LogoutTokenRefused("the logout token names neither a session (sid) nor a subject (sub)")
    if any(value is not None and not isinstance(value, str) for value in (sid, sub)):
        raise LogoutTokenRefused("the logout token's sid and sub must be strings")
    return claims
