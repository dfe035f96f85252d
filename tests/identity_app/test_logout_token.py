"""The back-channel logout endpoint's checks: logout tokens signed with the real provider's own key (the test
made it), so each refusal is for the one claim the case breaks; a refused token ends nothing and answers 400."""

from __future__ import annotations

import secrets
import time
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth import get_user_model
from joserfc import jwt
from joserfc.jwk import OctKey

from changes_app.models import Change
from identity_app.models import SingleSignOnSession
from identity_app.oidc import BACKCHANNEL_LOGOUT_EVENT
from tests.identity_app.conftest import CLIENT_ID, CLIENT_SECRET, OTHER_CLIENT_ID, browser, mapping, sso_login
from tests.support.oidc import signing_key

pytestmark = pytest.mark.django_db

ENDPOINT = "/sso/corp/backchannel-logout"
FORM = "application/x-www-form-urlencoded"
DROP = object()


def token(idp, *, key=None, header: dict[str, Any] | None = None, **claims: Any) -> str:
    now = int(time.time())
    values = {
        "iss": idp.issuer,
        "aud": CLIENT_ID,
        "iat": now,
        "exp": now + 120,
        "jti": secrets.token_hex(12),
        "events": {BACKCHANNEL_LOGOUT_EVENT: {}},
        "sub": "op-1",
        **claims,
    }
    key = key or idp.keys[0]
    return jwt.encode(
        {"alg": "RS256", "kid": key.kid, "typ": "logout+jwt", **(header or {})},
        {name: value for name, value in values.items() if value is not DROP},
        key,
    )


def post(value: str, path: str = ENDPOINT):
    """As a provider posts it: one form-encoded logout_token."""
    return browser().post(path, urlencode({"logout_token": value}), content_type=FORM)


@pytest.fixture
def signed_in(idp, corp):
    """Olga's admin session, opened by a real login at the provider."""
    idp.set_accounts({"op-1": {"preferred_username": "olga", "groups": ["tg-ops"]}})
    mapping("tg-ops", operator_role="viewer")
    client, response = sso_login(idp, corp, "op-1", "admin")
    assert response.status_code == 302
    return client


def still_signed_in(client) -> bool:
    return client.get("/admin/").status_code == 200


def test_a_valid_token_ends_the_subjects_sessions_once_and_a_replay_is_refused(idp, signed_in):
    # given: olga in a second browser too, and someone else
    other_browser, _ = sso_login(idp, signed_in_provider(), "op-1", "admin")
    idp.set_accounts({"op-2": {"preferred_username": "oscar", "groups": ["tg-ops"]}})
    oscar, _ = sso_login(idp, signed_in_provider(), "op-2", "admin")
    value = token(idp)

    # when
    first = post(value)
    replayed = post(value)

    # then
    assert first.status_code == 200
    assert first["Cache-Control"] == "no-store"
    assert not still_signed_in(signed_in)
    assert not still_signed_in(other_browser)
    assert still_signed_in(oscar)
    assert Change.objects.get(action="sso.logout").after["sessions_ended"] == 2
    assert replayed.status_code == 400
    assert replayed.json() == {"error": "invalid_request", "error_description": "this logout token was already used"}


def signed_in_provider():
    return SingleSignOnSession.objects.select_related("provider").first().provider


def test_a_sid_names_one_provider_session_and_must_belong_to_the_sub(idp, signed_in):
    SingleSignOnSession.objects.update(sid="sid-1")

    assert post(token(idp, sid="sid-1", sub="someone-else")).status_code == 200
    assert still_signed_in(signed_in)  # sid and sub must both match
    assert post(token(idp, sid="sid-2", sub=DROP)).status_code == 200
    assert still_signed_in(signed_in)

    assert post(token(idp, sid="sid-1", sub=DROP)).status_code == 200
    assert not still_signed_in(signed_in)
    assert not SingleSignOnSession.objects.exists()


def test_signing_out_here_forgets_the_session(signed_in):
    assert SingleSignOnSession.objects.count() == 1

    signed_in.post("/sso/sign-out")

    assert not SingleSignOnSession.objects.exists()


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda idp: "not-a-jwt", "the logout token does not verify (DecodeError)"),
        (
            lambda idp: token(idp, key=signing_key("key-1")),  # same key id, another key
            "the logout token does not verify (BadSignatureError)",
        ),
        (
            lambda idp: token(idp, key=signing_key("made-up")),
            "the logout token is signed with a key the provider does not publish",
        ),
        (
            lambda idp: jwt.encode(
                {"alg": "HS256"},
                {"iss": idp.issuer, "aud": CLIENT_ID, "iat": int(time.time()), "jti": "j", "sub": "op-1"},
                OctKey.import_key(CLIENT_SECRET),
            ),
            "the logout token does not verify (UnsupportedAlgorithmError)",
        ),
        (
            lambda idp: token(idp, iss="http://127.0.0.1:1"),
            "the logout token is not valid here (invalid_claim: Invalid claim: 'iss')",
        ),
        (
            lambda idp: token(idp, aud=OTHER_CLIENT_ID),
            "the logout token is not valid here (invalid_claim: Invalid claim: 'aud')",
        ),
        (
            lambda idp: token(idp, iat=DROP),
            "the logout token is not valid here (missing_claim: Missing claim: 'iat')",
        ),
        (
            lambda idp: token(idp, jti=DROP),
            "the logout token is not valid here (missing_claim: Missing claim: 'jti')",
        ),
        (
            lambda idp: token(idp, iat=int(time.time()) + 3600, exp=DROP),
            "the logout token is not valid here (invalid_claim: The token was issued in the future)",
        ),
        (
            lambda idp: token(idp, iat=int(time.time()) - 3600, exp=DROP),
            "the logout token was issued more than 600 seconds ago",
        ),
        (
            lambda idp: token(idp, exp=int(time.time()) - 3600),
            "the logout token is not valid here (expired_token: The token is expired)",
        ),
        (
            lambda idp: token(idp, events=DROP),
            f"the logout token's events claim has no {BACKCHANNEL_LOGOUT_EVENT} member",
        ),
        (
            lambda idp: token(idp, events={BACKCHANNEL_LOGOUT_EVENT: "yes"}),
            f"the logout token's events claim has no {BACKCHANNEL_LOGOUT_EVENT} member",
        ),
        (lambda idp: token(idp, nonce="n-1"), "a logout token must not carry a nonce"),
        (
            lambda idp: token(idp, sub=DROP),
            "the logout token names neither a session (sid) nor a subject (sub)",
        ),
        (lambda idp: token(idp, sid=7), "the logout token's sid and sub must be strings"),
        (lambda idp: "x" * 20_000, "logout_token is missing or too long"),
        (lambda idp: "", "logout_token is missing or too long"),
    ],
)
def test_a_token_that_does_not_hold_is_refused_and_ends_nothing(idp, signed_in, make, reason):
    response = post(make(idp))

    assert response.status_code == 400
    assert response.json() == {"error": "invalid_request", "error_description": reason}
    assert still_signed_in(signed_in)
    assert SingleSignOnSession.objects.count() == 1
    assert not Change.objects.filter(action="sso.logout").exists()


def test_requests_that_are_not_a_logout_are_refused_clearly(idp, signed_in):
    value = token(idp)
    client = browser()

    assert client.get(ENDPOINT).status_code == 405
    wrong_type = client.post(ENDPOINT, {"logout_token": value}, content_type="application/json")
    assert (wrong_type.status_code, wrong_type.json()["error_description"]) == (
        400,
        "the body must be application/x-www-form-urlencoded",
    )
    nothing = client.post(ENDPOINT, "state=1", content_type=FORM)
    assert (nothing.status_code, nothing.json()["error_description"]) == (400, "send exactly one logout_token")
    unknown = post(value, "/sso/nope/backchannel-logout")
    assert (unknown.status_code, unknown.json()) == (
        404,
        {"error": "invalid_request", "error_description": "no such identity provider"},
    )
    assert still_signed_in(signed_in)
    assert get_user_model().objects.filter(username="olga").exists()


def test_admin_lists_the_sessions_without_their_keys(signed_in, admin_client):
    tracked = SingleSignOnSession.objects.get()

    page = admin_client.get("/admin/identity_app/singlesignonsession/")
    detail = admin_client.get(f"/admin/identity_app/singlesignonsession/{tracked.pk}/change/")

    assert page.status_code == 200
    assert "olga" in page.content.decode()
    assert detail.status_code == 200
    assert tracked.session_key not in page.content.decode() + detail.content.decode()
