"""Single sign-on as data: the OpenID Connect providers people sign in with, and what their groups grant.

An operator registers providers and role mappings in admin. A login reads the
mappings again every time and sets the user's roles to exactly what they grant,
so a group removed at the provider takes its role away at the next login.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from policies_app.models import Tenant, TenantMembership

# The Django groups that carry the operator permission sets (identity_app.permission_sets builds them).
OPERATOR_GROUP_NAMES = {
    "viewer": "Toolgate viewer",
    "approver": "Toolgate approver",
    "tool_admin": "Toolgate tool admin",
}


class IdentityProvider(models.Model):
    """An OpenID Connect provider (Okta, Entra ID, Google, Keycloak...) found by discovery from its issuer.

    The client secret is sealed with the key ring like every credential: an
    AES-GCM envelope bound to this provider's slug, never shown again. A
    provider with a tenant is that tenant's own: its logins may only grant
    membership of that tenant, never an operator role.
    """

    slug = models.SlugField(max_length=64, unique=True, help_text="Names the provider in URLs and the change log.")
    display_name = models.CharField(max_length=100, help_text='The button reads "Sign in with <display name>".')
    issuer = models.URLField(
        max_length=500, help_text="The issuer URL; /.well-known/openid-configuration is read from it."
    )
    client_id = models.CharField(max_length=200)
    encrypted_client_secret = models.BinaryField(editable=False)
    encryption_key_id = models.CharField(max_length=64, editable=False)
    scopes = models.JSONField(default=list, blank=True, help_text='Beyond "openid", e.g. ["profile", "email"].')
    username_claim = models.CharField(max_length=100, default="preferred_username")
    email_claim = models.CharField(max_length=100, default="email")
    groups_claim = models.CharField(max_length=100, default="groups", blank=True)
    tenant = models.ForeignKey(
        Tenant,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="identity_providers",
        help_text="A tenant's own provider: shown on the portal only, grants membership of this tenant only.",
    )
    link_by_verified_email = models.BooleanField(
        default=False,
        help_text="Let a login take over an existing local user with the same email, if the provider verified it.",
    )
    is_enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]
        verbose_name = "identity provider"

    def __str__(self) -> str:
        return self.display_name or self.slug

    def binding(self) -> dict[str, str]:
        """What the client-secret envelope is bound to."""
        return {"identity_provider": self.slug}


class RoleMapping(models.Model):
    """One rule "members of group G get role R", read at every login.

    An operator rule grants a permission set (and the staff flag admin needs);
    a tenant rule grants membership of a tenant. A rule without a provider
    applies to every provider without a tenant; a tenant's own provider only
    applies the rules that name it.
    """

    class OperatorRole(models.TextChoices):
        NONE = "", "None"
        VIEWER = "viewer", "Viewer (read-only admin and audit)"
        APPROVER = "approver", "Approver (decides approvals)"
        TOOL_ADMIN = "tool_admin", "Tool admin (switches, policies, upstreams)"
        SUPERUSER = "superuser", "Superuser"

    provider = models.ForeignKey(
        IdentityProvider, null=True, blank=True, on_delete=models.CASCADE, related_name="role_mappings"
    )
    group = models.CharField(max_length=200, help_text="The group's name as the groups claim carries it.")
    operator_role = models.CharField(max_length=16, choices=OperatorRole.choices, blank=True, default="")
    is_staff = models.BooleanField(default=False, help_text="May open admin (implied by any operator role).")
    tenant = models.ForeignKey(Tenant, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    tenant_role = models.CharField(max_length=16, choices=TenantMembership.Role.choices, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["group", "pk"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(tenant__isnull=True, tenant_role="")
                | (models.Q(tenant__isnull=False) & ~models.Q(tenant_role="")),
                name="rolemapping_tenant_with_role",
            ),
            models.CheckConstraint(
                condition=~models.Q(operator_role="", is_staff=False, tenant__isnull=True),
                name="rolemapping_grants_something",
            ),
        ]

    def __str__(self) -> str:
        granted = [label for label in (self.operator_role, "staff" if self.is_staff else "") if label]
        if self.tenant_id:
            granted.append(f"{self.tenant_role} of {self.tenant}")
        return f"{self.group} → {', '.join(granted)}"

    def clean(self) -> None:
        if bool(self.tenant_id) != bool(self.tenant_role):
            raise ValidationError("A tenant and a tenant role go together.")
        if not (self.operator_role or self.is_staff or self.tenant_id):
            raise ValidationError("The rule grants nothing: choose an operator role, staff or a tenant.")
        provider = self.provider if self.provider_id else None
        if provider is not None and provider.tenant_id is not None:
            if self.operator_role or self.is_staff:
                raise ValidationError("A tenant's own provider cannot grant operator roles or staff.")
            if self.tenant_id != provider.tenant_id:
                raise ValidationError("A tenant's own provider grants membership of its tenant only.")


class ExternalIdentity(models.Model):
    """Which user a provider's subject is: logins find the user by (provider, sub), never by a name."""

    provider = models.ForeignKey(IdentityProvider, on_delete=models.CASCADE, related_name="identities")
    subject = models.CharField(max_length=255)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="external_identities")
    last_login_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "external identities"
        constraints = [models.UniqueConstraint(fields=["provider", "subject"], name="identity_unique_subject")]

    def __str__(self) -> str:
        return f"{self.subject} at {self.provider}"


class SingleSignOnSession(models.Model):
    """Which Django session a single sign-on login opened, under the provider's session id (`sid`) and subject.

    A back-channel logout names the provider's session or subject, never ours:
    this row finds the Django sessions to end. Rows go with their session (a
    logout, a sign-out) or once it has expired.
    """

    provider = models.ForeignKey(IdentityProvider, on_delete=models.CASCADE, related_name="sessions")
    subject = models.CharField(max_length=255)
    sid = models.CharField(max_length=255, blank=True, help_text="The provider's session id from the ID token.")
    session_key = models.CharField(max_length=40, unique=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()

    class Meta:
        verbose_name = "single sign-on session"
        indexes = [
            models.Index(fields=["provider", "sid"], name="sso_session_sid"),
            models.Index(fields=["provider", "subject"], name="sso_session_subject"),
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.provider_id} ({self.sid or 'no sid'})"
