"""A fake OAuth 2 provider on a real loopback socket: authorize and token endpoints.

It behaves like a strict production provider, so the client code is tested
against what matters:
- authorization codes are one-time, bound to client, redirect URI and the PKCE
  S256 challenge; the token endpoint verifies the code_verifier;
- refresh tokens rotate: each refresh returns a new one and spends the old one;
  presenting a spent refresh token is treated as theft and revokes the whole
  family (every token descended from the same authorization), answering
  `invalid_grant`, as RFC 9700 §4.14.2 recommends;
- failure modes a test can switch on: HTTP 500, a slow answer, `invalid_grant`.

Every token-endpoint call is counted per grant type, so a test can assert
"exactly one refresh".
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlencode

from connections_app.models import OAuthProvider
from connections_app.oauth import oauth_provider_upsert
from tests.support.loopback import Answer, LoopbackServer, RecordedRequest, json_answer, redirect_answer

CLIENT_ID = "toolgate-test-client"
CLIENT_SECRET = "fake-oauth-client-secret-0a1b2c"


@dataclass
class _Family:
    """The tokens of one authorization; revoked as a whole when a spent token is replayed."""

    live_refresh: str
    live_access: str
    spent_refresh: set[str] = field(default_factory=set)
    revoked: bool = False
    scope: str = ""


@dataclass(frozen=True, slots=True)
class _Code:
    client_id: str
    redirect_uri: str
    challenge: str
    challenge_method: str
    scope: str


class FakeOAuthProvider:
    """Start with `with FakeOAuthProvider() as provider:`; URLs at provider.authorize_url / token_url."""

    def __init__(self, *, expires_in: int = 3600, auto_approve: bool = True) -> None:
        self.server = LoopbackServer()
        self.expires_in = expires_in
        self.auto_approve = auto_approve
        self.fail_status: int | None = None  # answer the token endpoint with this status
        self.delay_s = 0.0  # sleep before answering the token endpoint
        self.refuse_refresh = False  # answer every refresh with invalid_grant
        self.rotate_refresh_tokens = True
        self._lock = threading.Lock()
        self._codes: dict[str, _Code] = {}
        self._families: list[_Family] = []
        self.refresh_calls: list[str] = []  # refresh tokens presented, in order
        self.code_calls = 0
        self.server.handle("GET", "/authorize", self._authorize)
        self.server.handle("POST", "/token", self._token)

    # --- URLs and state -------------------------------------------------------------

    @property
    def authorize_url(self) -> str:
        return f"{self.server.url}/authorize"

    @property
    def token_url(self) -> str:
        return f"{self.server.url}/token"

    def register(self, name: str = "github", *, scopes: tuple[str, ...] = ()) -> OAuthProvider:
        """Register this fake as the OAuth provider `name` (an OAuthProvider row with its client)."""
        provider, _created = oauth_provider_upsert(
            name=name,
            authorize_url=self.authorize_url,
            token_url=self.token_url,
            client_id=CLIENT_ID,
            client_secret=CLIENT_SECRET,
            scopes=scopes,
        )
        return provider

    def issue_tokens(self, scope: str = "repo") -> tuple[str, str]:
        """A fresh family as if the user had consented earlier: (access token, refresh token)."""
        with self._lock:
            family = _Family(live_refresh=_token("rt"), live_access=_token("at"), scope=scope)
            self._families.append(family)
            return family.live_access, family.live_refresh

    def is_live_access_token(self, token: str) -> bool:
        with self._lock:
            return any(f.live_access == token and not f.revoked for f in self._families)

    @property
    def revoked_families(self) -> int:
        with self._lock:
            return sum(family.revoked for family in self._families)

    def close(self) -> None:
        self.server.close()

    def __enter__(self) -> FakeOAuthProvider:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- endpoints --------------------------------------------------------------------

    def _authorize(self, request: RecordedRequest) -> Answer:
        params = {name: values[0] for name, values in request.query_params().items()}
        redirect_uri = params.get("redirect_uri", "")
        if params.get("client_id") != CLIENT_ID or not redirect_uri:
            return json_answer(400, {"error": "invalid_request"})
        state = params.get("state", "")
        if not self.auto_approve:
            return redirect_answer(f"{redirect_uri}?{urlencode({'error': 'access_denied', 'state': state})}")
        if params.get("response_type") != "code" or params.get("code_challenge_method") != "S256":
            return redirect_answer(f"{redirect_uri}?{urlencode({'error': 'invalid_request', 'state': state})}")
        code = _token("code")
        with self._lock:
            self._codes[code] = _Code(
                client_id=params["client_id"],
                redirect_uri=redirect_uri,
                challenge=params.get("code_challenge", ""),
                challenge_method=params["code_challenge_method"],
                scope=params.get("scope", ""),
            )
        return redirect_answer(f"{redirect_uri}?{urlencode({'code': code, 'state': state})}")

    def _token(self, request: RecordedRequest) -> Answer:
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.fail_status is not None:
            return json_answer(self.fail_status, {"error": "server_error"})
        form = {name: values[0] for name, values in parse_qs(request.body.decode()).items()}
        if not self._client_authenticated(request, form):
            return json_answer(401, {"error": "invalid_client"})
        grant_type = form.get("grant_type")
        if grant_type == "authorization_code":
            return self._exchange_code(form)
        if grant_type == "refresh_token":
            return self._refresh(form)
        return json_answer(400, {"error": "unsupported_grant_type"})

    def _exchange_code(self, form: dict[str, str]) -> Answer:
        with self._lock:
            self.code_calls += 1
            code = self._codes.pop(form.get("code", ""), None)  # one-time, even when the rest is wrong
        if code is None or code.redirect_uri != form.get("redirect_uri"):
            return json_answer(400, {"error": "invalid_grant"})
        verifier = form.get("code_verifier", "")
        if not verifier or _s256(verifier) != code.challenge:
            return json_answer(400, {"error": "invalid_grant", "error_description": "PKCE verification failed"})
        access, refresh = self.issue_tokens(scope=code.scope)
        return self._tokens_answer(access, refresh, code.scope)

    def _refresh(self, form: dict[str, str]) -> Answer:
        presented = form.get("refresh_token", "")
        with self._lock:
            self.refresh_calls.append(presented)
            if self.refuse_refresh:
                return json_answer(400, {"error": "invalid_grant"})
            family = next((f for f in self._families if presented in f.spent_refresh | {f.live_refresh}), None)
            if family is None or family.revoked:
                return json_answer(400, {"error": "invalid_grant"})
            if presented in family.spent_refresh:  # replay of a spent token: revoke the whole family
                family.revoked = True
                return json_answer(400, {"error": "invalid_grant", "error_description": "refresh token reused"})
            family.live_access = _token("at")
            if self.rotate_refresh_tokens:
                family.spent_refresh.add(presented)
                family.live_refresh = _token("rt")
                return self._tokens_answer(family.live_access, family.live_refresh, family.scope)
            return self._tokens_answer(family.live_access, None, family.scope)

    def _tokens_answer(self, access: str, refresh: str | None, scope: str) -> Answer:
        body: dict[str, object] = {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": self.expires_in,
            "scope": scope,
        }
        if refresh is not None:
            body["refresh_token"] = refresh
        return json_answer(200, body, {"Cache-Control": "no-store"})

    @staticmethod
    def _client_authenticated(request: RecordedRequest, form: dict[str, str]) -> bool:
        header = request.headers.get("authorization", "")
        if header.startswith("Basic "):
            pair = base64.b64decode(header.removeprefix("Basic ")).decode()
            return pair == f"{CLIENT_ID}:{CLIENT_SECRET}"
        return form.get("client_id") == CLIENT_ID and form.get("client_secret") == CLIENT_SECRET


def _token(kind: str) -> str:
    return f"{kind}_{secrets.token_urlsafe(24)}"


def _s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
