"""A real OpenID provider (panva's oidc-provider on loopback) and a provider row pointing at it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from identity_app import oidc
from identity_app.models import IdentityProvider, RoleMapping
from identity_app.services import provider_save
from tests.support.oidc import OpenIdProvider, callback_path, signing_key

HOST = "localhost"
CALLBACK = f"http://{HOST}/sso/callback"
CLIENT_ID = "toolgate"
CLIENT_SECRET = "toolgate-test-secret-0123456789"
OTHER_CLIENT_ID = "another-app"


@pytest.fixture(scope="module")
def idp(tmp_path_factory) -> Iterator[OpenIdProvider]:
    clients = [
        {
            "client_id": client_id,
            "client_secret": CLIENT_SECRET,
            "redirect_uris": [CALLBACK],
            "grant_types": ["authorization_code"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "client_secret_basic",
        }
        for client_id in (CLIENT_ID, OTHER_CLIENT_ID)
    ]
    provider = OpenIdProvider(tmp_path_factory.mktemp("oidc"), clients=clients, key=signing_key("key-1"))
    provider.start()
    yield provider
    provider.stop()


@pytest.fixture(autouse=True)
def sso_settings(settings) -> Iterator[None]:
    settings.ALLOWED_HOSTS = [HOST, "testserver"]
    settings.TOOLGATE_SSO_ALLOW_PRIVATE_NETWORKS = True  # the provider lives on loopback here
    oidc.caches_clear()
    yield
    oidc.caches_clear()


def make_provider(idp: OpenIdProvider, *, slug: str = "corp", tenant=None, **fields: Any) -> IdentityProvider:
    provider = IdentityProvider(
        slug=slug,
        display_name=fields.pop("display_name", "Corp IdP"),
        issuer=fields.pop("issuer", idp.issuer),
        client_id=fields.pop("client_id", CLIENT_ID),
        scopes=["profile", "email", "groups"],
        tenant=tenant,
        **fields,
    )
    return provider_save(provider=provider, client_secret=CLIENT_SECRET)


@pytest.fixture
def corp(idp) -> IdentityProvider:
    return make_provider(idp)


def mapping(group: str, **fields: Any) -> RoleMapping:
    return RoleMapping.objects.create(group=group, **fields)


def browser() -> Client:
    return Client(HTTP_HOST=HOST)


def start(client: Client, provider: IdentityProvider, audience: str, next_url: str = ""):
    query = {"for": audience, **({"next": next_url} if next_url else {})}
    return client.get(f"/sso/{provider.slug}/start", query)


def sso_login(
    idp: OpenIdProvider,
    provider: IdentityProvider,
    account: str,
    audience: str = "admin",
    *,
    client=None,
    next_url="",
    idp_browser=None,
):
    """The whole login as `account`: start, the provider's pages, the callback; (client, callback response)."""
    client = client or browser()
    started = start(client, provider, audience, next_url)
    assert started.status_code == 302, started.content.decode()
    callback = idp.sign_in(started["Location"], account, browser=idp_browser)
    assert callback.startswith(CALLBACK), callback
    return client, client.get(callback_path(callback))
