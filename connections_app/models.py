"""A tenant's third-party accounts and what happened to them.

Credentials exist only as an AES-GCM envelope (core.crypto) bound to
the row's tenant, id and provider; there is no plaintext column. Rows are never
deleted, only revoked: grants and audit rows keep pointing at them.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from core.models import Revocable
from policies_app.models import ServiceAccount, Tenant

REFRESH_ERROR_CATEGORIES = {
    "timeout": "provider unreachable",
    "network": "provider unreachable",
    "server_error": "provider error",
    "undecryptable": "configuration",
    "client_secret_undecryptable": "configuration",
    "no_provider": "configuration",
    "no_refresh_token": "re-authorisation needed",
    "invalid_grant": "re-authorisation needed",
}


def refresh_error_category(code: str) -> str:
    """The category of a refresh error code: unreachable, provider error, configuration, re-authorisation,
    or (any other OAuth error code, e.g. `invalid_client`) the provider refusing Toolgate's request."""
    if not code:
        return ""
    return REFRESH_ERROR_CATEGORIES.get(code, "refused by the provider")


class Connection(Revocable):
    """One third-party account of a tenant (the seed's `connections` table).

    `status` is what the broker checks besides revocation: `needs_reauth` after
    a refresh token was refused. `needs_attention` after refreshes kept failing
    otherwise (TOOLGATE_REFRESH_MAX_FAILURES in a row): the sweep stops queuing
    it, the broker still uses it and refreshes it when a call meets its expired
    token, and a successful refresh makes it `active` again. `revoked` always goes with `revoked_at`
    (a constraint), so no code path can un-revoke by writing one of them.
    The refresh columns are bookkeeping for background OAuth refresh:
    `next_refresh_at` is indexed so the sweep reads only what is due.
    """

    class CredentialType(models.TextChoices):
        OAUTH2 = "oauth2", "OAuth 2"
        APP_PASSWORD = "app_password", "App password"
        API_KEY = "api_key", "API key"
        GITHUB_APP_INSTALLATION = "github_app_installation", "GitHub App installation"

    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        NEEDS_REAUTH = "needs_reauth", "Needs re-authorisation"
        NEEDS_ATTENTION = "needs_attention", "Needs attention"
        REVOKED = "revoked", "Revoked"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="connections")
    provider = models.SlugField(max_length=64)
    credential_type = models.CharField(max_length=32, choices=CredentialType.choices)
    label = models.CharField(max_length=100, blank=True, help_text="A name the tenant recognises it by.")
    encrypted_credentials = models.BinaryField(editable=False)
    encryption_key_id = models.CharField(max_length=64, editable=False, db_index=True)
    scopes = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # A connection stored over the REST API has no user behind it: the service account that stored it.
    created_by_service_account = models.ForeignKey(
        ServiceAccount, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(auto_now=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    # A personal connection: usable only by calls made on this person's behalf (their subject token),
    # and still only through a grant. Null: the tenant's shared connection.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    # Refresh bookkeeping (background OAuth refresh).
    next_refresh_at = models.DateTimeField(null=True, blank=True)
    refreshed_at = models.DateTimeField(null=True, blank=True)
    refresh_failures = models.PositiveIntegerField(default=0)
    last_refresh_error = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["tenant", "-created_at"], name="connection_tenant_created"),
            models.Index(
                fields=["next_refresh_at"], name="connection_refresh_due", condition=Q(next_refresh_at__isnull=False)
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status="revoked", revoked_at__isnull=False) | (~Q(status="revoked") & Q(revoked_at=None)),
                name="connection_revoked_status_matches",
            ),
            models.CheckConstraint(
                condition=Q(credential_type__in=["oauth2", "app_password", "api_key", "github_app_installation"]),
                name="connection_credential_type_known",
            ),
            models.CheckConstraint(
                condition=Q(status__in=["active", "needs_reauth", "needs_attention", "revoked"]),
                name="connection_status_known",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.provider} {self.label or self.credential_type} ({self.short_id})"

    EXPIRED = "expired"

    def status_at(self, now: datetime) -> str:
        """The status a tenant and a caller see: an API key or app password past its expiry is `expired`.

        (An OAuth token past its expiry is refreshed on its next use, so it stays `active`.)
        """
        if (
            self.status == self.Status.ACTIVE
            and self.credential_type != self.CredentialType.OAUTH2
            and self.expires_at is not None
            and self.expires_at <= now
        ):
            return self.EXPIRED
        return str(self.status)

    @property
    def status_now(self) -> str:
        return self.status_at(timezone.now())

    @property
    def status_label(self) -> str:
        status = self.status_now
        return "Expired" if status == self.EXPIRED else self.Status(status).label

    @property
    def last_refresh_error_category(self) -> str:
        """What kind of trouble the last failed refresh met, in words a tenant and an operator act on."""
        return refresh_error_category(self.last_refresh_error)

    @property
    def creator(self) -> str:
        """Who stored it, as pages show it: the user, or the service account for rows stored over the API."""
        if self.created_by is not None:
            return self.created_by.get_username()
        if self.created_by_service_account is not None:
            return f"service account {self.created_by_service_account.name}"
        return "—"

    @property
    def short_id(self) -> str:
        """The last four characters of the id: enough to tell rows apart, never a secret."""
        return str(self.id)[-4:]

    def binding(self) -> dict[str, str]:
        """What the credential envelope is bound to (its associated data)."""
        return {"tenant": str(self.tenant_id), "connection": str(self.id), "provider": self.provider}


class ExecutionGrant(Revocable):
    """Which connections one service account may use: the authority behind grant ∩ declared.

    The connections must be the grant's tenant's (grant_create checks it; the
    broker checks the tenant again at every use).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="grants")
    service_account = models.ForeignKey(ServiceAccount, on_delete=models.CASCADE, related_name="grants")
    connections = models.ManyToManyField(
        Connection, related_name="grants", blank=True, db_table="policies_app_executiongrant_connections"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # A grant made over the REST API has no user behind it: the service account that made it.
    created_by_service_account = models.ForeignKey(
        ServiceAccount, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        # The tables keep the names they had when grants lived in policies_app (migration 0005).
        db_table = "policies_app_executiongrant"

    def __str__(self) -> str:
        return f"grant {self.id} for {self.service_account_id}"


class OAuthProvider(models.Model):
    """An OAuth 2 authorization server tenants can connect to, registered by an operator.

    `name` is the provider a connection and the tools name (e.g. `github`).
    The client secret is stored like a credential: an AES-GCM envelope bound to
    this provider's name, so it cannot be moved to another provider's row.
    """

    name = models.SlugField(max_length=64, unique=True)
    display_name = models.CharField(max_length=100, blank=True)
    authorize_url = models.URLField(max_length=500)
    token_url = models.URLField(max_length=500)
    client_id = models.CharField(max_length=200)
    encrypted_client_secret = models.BinaryField(editable=False)
    encryption_key_id = models.CharField(max_length=64, editable=False)
    default_scopes = models.JSONField(default=list, blank=True)
    use_pkce = models.BooleanField(default=True, help_text="Send a PKCE S256 challenge (recommended).")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "OAuth provider"

    def __str__(self) -> str:
        return self.display_name or self.name

    def binding(self) -> dict[str, str]:
        """What the client-secret envelope is bound to."""
        return {"oauth_provider": self.name}


class ConnectionEvent(models.Model):
    """An audit trail of a connection: created, revoked, use refused, refreshed.

    `connection_id` is a plain UUID, not a foreign key: a refused use may name
    another tenant's connection or none that exists, and the event belongs to
    the tenant that asked. `detail` is a safe message, never a secret.
    """

    class Kind(models.TextChoices):
        CREATED = "created", "Created"
        REVOKED = "revoked", "Revoked"
        USE_DENIED = "use_denied", "Use refused"
        REWRAPPED = "rewrapped", "Re-encrypted"
        REFRESHED = "refreshed", "Token refreshed"
        REFRESH_FAILED = "refresh_failed", "Refresh failed"
        NEEDS_REAUTH = "needs_reauth", "Needs re-authorisation"
        NEEDS_ATTENTION = "needs_attention", "Needs attention"
        REFRESH_RESUMED = "refresh_resumed", "Refresh resumed"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="connection_events")
    connection_id = models.UUIDField(db_index=True)
    provider = models.SlugField(max_length=64, blank=True)
    kind = models.CharField(max_length=24, choices=Kind.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    service_account_id = models.UUIDField(null=True, blank=True)
    tool_id = models.CharField(max_length=64, blank=True)
    detail = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["kind", "provider"], name="connection_event_kind")]

    def __str__(self) -> str:
        return f"{self.kind} {self.connection_id}"


class TenantWebhook(models.Model):
    """Where a tenant hears about approvals: one URL, signed with a secret only the tenant was shown.

    The signing secret is sealed with the key ring, bound to the tenant (it must
    be recoverable to sign, so it cannot be a digest); it is shown once, when
    set. Only owners set or remove it.
    """

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="webhook")
    url = models.URLField(max_length=500)
    secret_sealed = models.BinaryField(editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    def __str__(self) -> str:
        return f"webhook of {self.tenant}"


class WebhookDelivery(models.Model):
    """One event on its way to a tenant's webhook: its payload (ids only), attempts and outcome.

    The delivery task takes this row's id, re-reads it and returns at once when
    it was already delivered, so a redelivered task never posts twice.
    """

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="webhook_deliveries")
    event = models.CharField(max_length=40)
    payload = models.JSONField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    last_error = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["tenant", "-created_at"], name="webhookdelivery_tenant_created")]

    def __str__(self) -> str:
        return f"{self.event} {self.id} ({self.status})"
