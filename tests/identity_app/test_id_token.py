"""ID token checks against the real provider's discovery document and key set (tokens signed by the test).

The test holds the provider's signing key, so it can sign what the provider
would sign and then change one thing at a time.
"""

from __future__ import annotations

import base64
import json
import time

import pytest
from joserfc import jwt
from joserfc.jwk import OctKey

from identity_app import oidc
from identity_app.oidc import LoginRefused
from tests.identity_app.conftest import CLIENT_ID, OTHER_CLIENT_ID
from tests.support.oidc import signing_key

NONCE = "nonce-0123456789"


def claims(idp, **overrides):
    now = int(time.time())
    base = {"iss": idp.issuer, "sub": "op-1", "aud": CLIENT_ID, "iat": now, "exp": now + 300, "nonce": NONCE}
    return base | overrides


def signed(payload, key, kid="key-1"):
    return jwt.encode({"alg": "RS256", "kid": kid}, payload, key)


def check(idp, token, nonce=NONCE):
    metadata = oidc.provider_metadata(idp.issuer)
    return oidc.id_token_claims(token, metadata=metadata, client_id=CLIENT_ID, nonce=nonce)


def test_a_token_signed_with_the_published_key_is_accepted(idp):
    assert check(idp, signed(claims(idp), idp.keys[0]))["sub"] == "op-1"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"aud": OTHER_CLIENT_ID}, "aud"),
        ({"aud": [OTHER_CLIENT_ID, "third"]}, "aud"),
        ({"iss": "http://127.0.0.1:1/other"}, "iss"),
        ({"exp": int(time.time()) - 3600, "iat": int(time.time()) - 7200}, "exp"),
        ({"nonce": "another-nonce"}, "nonce"),
        ({"azp": OTHER_CLIENT_ID}, "azp"),
    ],
)
def test_a_token_for_another_audience_issuer_time_or_login_is_refused(idp, change, reason):
    token = signed(claims(idp, **change), idp.keys[0])

    with pytest.raises(LoginRefused) as refused:
        check(idp, token)

    assert reason in refused.value.safe_message


def test_a_token_without_a_nonce_when_one_was_sent_is_refused(idp):
    payload = claims(idp)
    del payload["nonce"]

    with pytest.raises(LoginRefused, match="nonce"):
        check(idp, signed(payload, idp.keys[0]))


def test_a_forged_signature_under_the_published_key_id_is_refused(idp):
    forger = signing_key("key-1")  # same key id, another key

    with pytest.raises(LoginRefused, match="does not verify"):
        check(idp, signed(claims(idp), forger))


def test_a_token_signed_with_a_key_the_provider_does_not_publish_is_refused(idp):
    with pytest.raises(LoginRefused, match="does not publish"):
        check(idp, signed(claims(idp), signing_key("made-up"), kid="made-up"))


def test_an_unsigned_or_symmetric_token_is_refused(idp):
    def part(value):
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    unsigned = f"{part({'alg': 'none', 'kid': 'key-1'})}.{part(claims(idp))}."
    with pytest.raises(LoginRefused):
        check(idp, unsigned)
    # HS256 with the client secret as key: an attacker who knows a public client's secret could sign anything
    secret = OctKey.import_key("toolgate-test-secret-0123456789")
    with pytest.raises(LoginRefused):
        check(idp, jwt.encode({"alg": "HS256", "kid": "key-1"}, claims(idp), secret))


def test_unknown_key_ids_fetch_the_key_set_again_at_most_once_a_minute(idp, monkeypatch):
    metadata = oidc.provider_metadata(idp.issuer)
    first = oidc.provider_keys(metadata)
    again = oidc.provider_keys(metadata, refresh=True)  # within the minute: the cached set, no request
    monkeypatch.setattr(oidc, "JWKS_REFETCH_MIN_INTERVAL_S", 0.0)
    later = oidc.provider_keys(metadata, refresh=True)

    assert again is first
    assert later is not first
    assert [key.kid for key in later] == ["key-1"]


def test_a_provider_on_a_private_address_is_refused_unless_allowed(idp, settings):
    settings.TOOLGATE_SSO_ALLOW_PRIVATE_NETWORKS = False

    with pytest.raises(LoginRefused, match="identity provider URL refused"):
        oidc.provider_metadata(idp.issuer)
