"""Admin for single sign-on: providers (the client secret can be replaced, never read), role mappings,
the identities logins have linked and the sessions they opened (read-only: logins make them)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from identity_app.models import ExternalIdentity, IdentityProvider, RoleMapping, SingleSignOnSession
from identity_app.services import provider_save, role_mapping_delete, role_mapping_save


class IdentityProviderAdminForm(forms.ModelForm):
    issuer = forms.URLField(
        max_length=500,
        assume_scheme="https",
        help_text="The issuer URL; /.well-known/openid-configuration is read from it.",
    )
    client_secret = forms.CharField(
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Required when adding; leave empty to keep the current secret. It is sealed and never shown.",
    )

    class Meta:
        model = IdentityProvider
        fields = (
            "slug",
            "display_name",
            "issuer",
            "client_id",
            "client_secret",
            "scopes",
            "username_claim",
            "email_claim",
            "groups_claim",
            "tenant",
            "link_by_verified_email",
            "is_enabled",
        )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.instance.pk is None and not cleaned.get("client_secret"):
            self.add_error("client_secret", "A new provider needs its client secret.")
        return cleaned


@admin.register(IdentityProvider)
class IdentityProviderAdmin(admin.ModelAdmin):
    form = IdentityProviderAdminForm
    list_display = ("slug", "display_name", "issuer", "client_id", "tenant", "is_enabled", "encryption_key_id")
    list_filter = ("is_enabled", "tenant")
    search_fields = ("slug", "display_name", "issuer", "client_id")
    list_select_related = ("tenant",)
    readonly_fields = ("encryption_key_id", "created_at", "updated_at")

    def get_readonly_fields(self, request: HttpRequest, obj: IdentityProvider | None = None) -> tuple[str, ...]:
        # The secret's envelope is bound to the slug: fixed once created.
        return (*self.readonly_fields, "slug") if obj is not None else self.readonly_fields

    def save_model(self, request: HttpRequest, obj: IdentityProvider, form: Any, change: bool) -> None:
        provider_save(provider=obj, client_secret=form.cleaned_data.get("client_secret") or None)


@admin.register(RoleMapping)
class RoleMappingAdmin(admin.ModelAdmin):
    list_display = ("group", "provider", "operator_role", "is_staff", "tenant", "tenant_role")
    list_filter = ("operator_role", "is_staff", "provider", "tenant")
    search_fields = ("group",)
    list_select_related = ("provider", "tenant")

    def save_model(self, request: HttpRequest, obj: RoleMapping, form: Any, change: bool) -> None:
        role_mapping_save(mapping=obj)

    def delete_model(self, request: HttpRequest, obj: RoleMapping) -> None:
        role_mapping_delete(mapping=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[RoleMapping]) -> None:
        for mapping in queryset:
            role_mapping_delete(mapping=mapping)


@admin.register(ExternalIdentity)
class ExternalIdentityAdmin(admin.ModelAdmin):
    list_display = ("subject", "provider", "user", "last_login_at", "created_at")
    list_filter = ("provider",)
    search_fields = ("subject", "user__username")
    list_select_related = ("provider", "user")
    readonly_fields = ("provider", "subject", "user", "last_login_at", "created_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: ExternalIdentity | None = None) -> bool:
        return False


@admin.register(SingleSignOnSession)
class SingleSignOnSessionAdmin(admin.ModelAdmin):
    """Who is signed in through which provider, for back-channel logout. The session key is a bearer
    credential (it is the session cookie's value): never shown."""

    fields = ("provider", "user", "subject", "sid", "created_at", "expires_at")
    list_display = ("user", "provider", "subject", "created_at", "expires_at")
    list_filter = ("provider",)
    search_fields = ("subject", "user__username")
    list_select_related = ("provider", "user")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: SingleSignOnSession | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: SingleSignOnSession | None = None) -> bool:
        return False  # deleting the row would not end the session; the provider's logout or deactivation does
