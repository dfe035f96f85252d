"""OAuth providers: registered by `add_oauth_provider` or in admin, the client secret sealed and never shown."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from connections_app.models import OAuthProvider
from core.crypto import KeyRing, open_sealed

pytestmark = pytest.mark.django_db

SECRET = "client-secret-canary-5e6f7a8b"


def secret_of(provider: OAuthProvider) -> str:
    return open_sealed(
        provider.encrypted_client_secret, binding=provider.binding(), ring=KeyRing.from_settings()
    ).decode()


def add(monkeypatch, *extra: str, secret: str = SECRET) -> str:
    monkeypatch.setenv("TOOLGATE_OAUTH_CLIENT_SECRET", secret)
    out = io.StringIO()
    call_command(
        "add_oauth_provider",
        "github",
        "--authorize-url=https://github.com/login/oauth/authorize",
        "--token-url=https://github.com/login/oauth/access_token",
        "--client-id=Iv1.abc",
        *extra,
        stdout=out,
    )
    return out.getvalue()


def test_add_oauth_provider_registers_then_updates_by_name(monkeypatch):
    first = add(monkeypatch, "--scopes=repo, read:user")
    scopes = OAuthProvider.objects.get().default_scopes
    second = add(monkeypatch, "--no-pkce", secret="rotated-secret-0000")

    provider = OAuthProvider.objects.get()
    assert first.strip() == "registered OAuth provider github (with PKCE)"
    assert second.strip() == "updated OAuth provider github (without PKCE)"
    assert scopes == ["read:user", "repo"]
    assert provider.default_scopes == []  # an upsert sets what the command says
    assert provider.use_pkce is False
    assert secret_of(provider) == "rotated-secret-0000"
    assert SECRET.encode() not in bytes(provider.encrypted_client_secret)


def test_add_oauth_provider_needs_the_secret_in_the_environment(monkeypatch):
    monkeypatch.delenv("TOOLGATE_OAUTH_CLIENT_SECRET", raising=False)

    with pytest.raises(CommandError, match="TOOLGATE_OAUTH_CLIENT_SECRET"):
        call_command(
            "add_oauth_provider", "github", "--authorize-url=https://a", "--token-url=https://b", "--client-id=x"
        )
    assert OAuthProvider.objects.count() == 0


def test_add_oauth_provider_refuses_bad_urls_and_stores_nothing(monkeypatch):
    monkeypatch.setenv("TOOLGATE_OAUTH_CLIENT_SECRET", SECRET)

    with pytest.raises(CommandError, match="authorize_url"):
        call_command("add_oauth_provider", "github", "--authorize-url=nope", "--token-url=https://b", "--client-id=x")
    assert OAuthProvider.objects.count() == 0


def test_admin_adds_a_provider_with_a_write_only_secret(admin_client):
    response = admin_client.post(
        reverse("admin:connections_app_oauthprovider_add"),
        {
            "name": "github",
            "display_name": "GitHub",
            "authorize_url": "https://github.com/login/oauth/authorize",
            "token_url": "https://github.com/login/oauth/access_token",
            "client_id": "Iv1.abc",
            "use_pkce": "on",
            "client_secret": SECRET,
            "scopes": "repo",
        },
    )

    assert response.status_code == 302
    provider = OAuthProvider.objects.get()
    assert secret_of(provider) == SECRET
    page = admin_client.get(reverse("admin:connections_app_oauthprovider_change", args=[provider.pk]))
    assert page.status_code == 200
    assert SECRET not in page.content.decode()
    assert 'name="name"' not in page.content.decode()  # the name is bound into the envelope: fixed


def test_admin_keeps_the_secret_when_the_field_is_left_blank(admin_client, monkeypatch):
    add(monkeypatch)
    provider = OAuthProvider.objects.get()

    response = admin_client.post(
        reverse("admin:connections_app_oauthprovider_change", args=[provider.pk]),
        {
            "display_name": "GitHub",
            "authorize_url": provider.authorize_url,
            "token_url": provider.token_url,
            "client_id": "Iv1.new",
            "use_pkce": "on",
            "client_secret": "",
            "scopes": "",
        },
    )

    assert response.status_code == 302
    provider.refresh_from_db()
    assert provider.client_id == "Iv1.new"
    assert secret_of(provider) == SECRET
