"""Operator forms of connections_app (admin)."""

from __future__ import annotations

from typing import Any

from django import forms

from connections_app.models import OAuthProvider
from connections_app.oauth import oauth_provider_set_secret


class OAuthProviderAdminForm(forms.ModelForm):
    """The client secret is write-only: never rendered back, sealed on save, kept when left blank."""

    client_secret = forms.CharField(
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Stored encrypted and never shown again. Leave blank to keep the current secret.",
    )
    scopes = forms.CharField(required=False, help_text="Default scopes, comma separated.")
    # Declared to choose Django 6's https default for scheme-less input now.
    authorize_url = forms.URLField(max_length=500, assume_scheme="https")
    token_url = forms.URLField(max_length=500, assume_scheme="https")

    class Meta:
        model = OAuthProvider
        fields = ("name", "display_name", "authorize_url", "token_url", "client_id", "use_pkce")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["scopes"].initial = ", ".join(self.instance.default_scopes)
        else:
            self.fields["client_secret"].required = True

    def clean_scopes(self) -> list[str]:
        return sorted({scope.strip() for scope in self.cleaned_data["scopes"].split(",") if scope.strip()})

    def save(self, commit: bool = True) -> OAuthProvider:
        provider = super().save(commit=False)
        provider.default_scopes = self.cleaned_data["scopes"]
        if self.cleaned_data["client_secret"]:
            oauth_provider_set_secret(provider=provider, client_secret=self.cleaned_data["client_secret"])
        if commit:
            provider.save()
        return provider
