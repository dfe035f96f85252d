"""Back-channel logout end to end: a person signs out at the real provider, which posts its logout token to
Toolgate (a live server on loopback), and their admin or portal session is over at the next request."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from changes_app.models import Change
from identity_app.models import SingleSignOnSession
from tests.factories import TenantFactory
from tests.identity_app.conftest import CALLBACK, CLIENT_ID, CLIENT_SECRET, mapping, sso_login
from tests.support.oidc import OpenIdProvider, signing_key

pytestmark = pytest.mark.django_db(transaction=True)  # the live server's thread sees the sessions


@pytest.fixture(scope="module")
def idp(tmp_path_factory, live_server) -> Iterator[OpenIdProvider]:
    """The provider of this module knows where Toolgate's back-channel logout endpoint is (for provider `corp`)."""
    base = live_server.url.replace("localhost", "127.0.0.1")
    client = {
        "client_id": CLIENT_ID,
        "client_secret": CLIENT_SECRET,
        "redirect_uris": [CALLBACK],
        "grant_types": ["authorization_code"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "client_secret_basic",
        "backchannel_logout_uri": f"{base}/sso/corp/backchannel-logout",
        "backchannel_logout_session_required": True,  # ID tokens then carry `sid`, logout tokens too
    }
    provider = OpenIdProvider(tmp_path_factory.mktemp("oidc-bcl"), clients=[client], key=signing_key("key-bcl"))
    provider.start()
    yield provider
    provider.stop()


@pytest.fixture(autouse=True)
def live_hosts(settings) -> None:
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "127.0.0.1"]


def account(username: str, *groups: str) -> dict:
    return {"preferred_username": username, "email": f"{username}@corp.test", "groups": list(groups)}


@pytest.mark.parametrize(("audience", "page"), [("admin", "/admin/"), ("portal", "/connections/")])
def test_signing_out_at_the_provider_ends_that_persons_session_only(idp, corp, audience, page):
    # given: two people signed in, each in their own browser (and so their own provider session)
    acme = TenantFactory(slug="acme")
    mapping("tg-ops", operator_role="viewer")
    mapping("acme-eng", tenant=acme, tenant_role="member")
    idp.set_accounts({"p-1": account("pia", "tg-ops", "acme-eng"), "q-1": account("quin", "tg-ops", "acme-eng")})
    with httpx.Client(timeout=10) as pia_at_idp, httpx.Client(timeout=10) as quin_at_idp:
        pia, signed_in = sso_login(idp, corp, "p-1", audience, idp_browser=pia_at_idp)
        assert signed_in.status_code == 302
        quin, _ = sso_login(idp, corp, "q-1", audience, idp_browser=quin_at_idp)
        assert pia.get(page).status_code == 200
        tracked = SingleSignOnSession.objects.get(subject="p-1")
        assert tracked.session_key == pia.session.session_key
        assert tracked.sid  # the provider's session id, from the ID token

        # when: pia signs out at the provider
        idp.sign_out(pia_at_idp, CLIENT_ID)

    # then: her next request is anonymous, quin's session goes on
    after = pia.get(page)
    assert after.status_code == 302
    assert after["Location"].startswith("/admin/login/" if audience == "admin" else "/accounts/login/")
    assert quin.get(page).status_code == 200
    assert list(SingleSignOnSession.objects.values_list("subject", flat=True)) == ["q-1"]
    logout = Change.objects.get(action="sso.logout")
    assert logout.after == {
        "provider": "corp",
        "subject": "p-1",
        "sid": tracked.sid,
        "username": "pia",
        "sessions_ended": 1,
        "via": "back-channel",
    }
    assert logout.actor_label == "identity provider corp (back-channel logout)"
