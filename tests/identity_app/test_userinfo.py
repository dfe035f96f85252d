"""Claims the ID token leaves out come from the UserInfo endpoint: a real provider told to put profile,
email and groups there only (as Entra ID and Google do for most claims)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth import get_user_model

from changes_app.models import Change
from identity_app import oidc
from identity_app.oidc import LoginRefused, claims_with_userinfo
from tests.identity_app.conftest import CALLBACK, CLIENT_ID, CLIENT_SECRET, mapping, sso_login
from tests.support.oidc import OpenIdProvider, signing_key

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def idp(tmp_path_factory) -> Iterator[OpenIdProvider]:
    client = {
        "client_id": CLIENT_ID,
        "client_secret": CLIENT_SECRET,
        "redirect_uris": [CALLBACK],
        "grant_types": ["authorization_code"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "client_secret_basic",
    }
    provider = OpenIdProvider(
        tmp_path_factory.mktemp("oidc-userinfo"),
        clients=[client],
        key=signing_key("key-ui"),
        options={"claims_in_userinfo": True},
    )
    provider.start()
    yield provider
    provider.stop()


def test_groups_only_in_userinfo_still_grant_their_roles(idp, corp, monkeypatch):
    # given: the ID token will carry sub alone; what it held is kept to show it
    idp.set_accounts({"op-1": {"preferred_username": "olga", "email": "olga@corp.test", "groups": ["tg-ops"]}})
    mapping("tg-ops", operator_role="tool_admin")
    in_id_token: list[dict] = []
    verify = oidc.id_token_claims

    def observed(*args, **kwargs):
        claims = verify(*args, **kwargs)
        in_id_token.append(claims)
        return claims

    monkeypatch.setattr(oidc, "id_token_claims", observed)

    # when
    client, response = sso_login(idp, corp, "op-1", "admin")

    # then
    assert "groups" not in in_id_token[0]
    assert "preferred_username" not in in_id_token[0]
    assert (response.status_code, response["Location"]) == (302, "/admin/")
    assert client.get("/admin/").status_code == 200
    user = get_user_model().objects.get(username="olga")
    assert (user.email, user.is_staff) == ("olga@corp.test", True)
    assert list(user.groups.values_list("name", flat=True)) == ["Toolgate tool admin"]
    assert Change.objects.get(action="sso.login").after["groups"] == ["tg-ops"]

    # a group removed at the provider is gone at the next login, read from userinfo again
    idp.set_accounts({"op-1": {"preferred_username": "olga", "email": "olga@corp.test", "groups": []}})
    _, again = sso_login(idp, corp, "op-1", "admin")
    assert again.status_code == 403
    user.refresh_from_db()
    assert not user.is_staff


def test_userinfo_fills_in_but_never_overrides_the_id_token_and_must_be_the_same_subject():
    id_claims = {"sub": "s-1", "iss": "https://idp", "aud": "tg", "email": "a@corp.test"}
    userinfo = {"sub": "s-1", "iss": "https://elsewhere", "email": "b@corp.test", "groups": ["g"], "nonce": "x"}

    assert claims_with_userinfo(id_claims, userinfo) == {**id_claims, "groups": ["g"]}
    with pytest.raises(LoginRefused, match="another subject"):
        claims_with_userinfo(id_claims, {**userinfo, "sub": "s-2"})
    with pytest.raises(LoginRefused, match="another subject"):
        claims_with_userinfo(id_claims, {"groups": ["g"]})
