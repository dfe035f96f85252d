"""MCP clients that sign in (OAuth 2.1): clients, one-time codes, token pairs and the grant they belong to.

The tables keep the names they were created with under policies_app
(`db_table`): the models moved here without a row being copied.
"""

from __future__ import annotations

import uuid

from django.db import models

from core.models import Revocable
from policies_app.models import Delegation, Tenant


class SigninClient(Revocable):
    """An MCP client that signs people in: registered by RFC 7591 or known by its Client ID Metadata Document.

    Public clients only (no secret). `client_name` and the redirect URIs come
    from the client and are untrusted text: escaped wherever they are shown.
    A metadata-document client's `client_id` is the document's https URL; its
    row caches the document (`metadata_fetched_at`) and is refreshed when stale.
    Revoking a client (or deleting it in admin) ends every token issued to it.
    """

    class Kind(models.TextChoices):
        REGISTERED = "registered", "Dynamic registration (RFC 7591)"
        METADATA_DOCUMENT = "metadata_document", "Client ID Metadata Document"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    client_id = models.CharField(max_length=500, unique=True, editable=False)
    kind = models.CharField(max_length=24, choices=Kind.choices, editable=False)
    client_name = models.CharField(max_length=200, blank=True)
    client_uri = models.CharField(max_length=500, blank=True)
    redirect_uris = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    registered_from = models.GenericIPAddressField(null=True, blank=True, editable=False)
    metadata_fetched_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        db_table = "policies_app_signinclient"
        ordering = ["-created_at"]
        verbose_name = "MCP sign-in client"

    def __str__(self) -> str:
        return self.client_name or self.client_id[:60]

    @property
    def display_name(self) -> str:
        return self.client_name or "(unnamed client)"


class SigninGrant(Revocable):
    """One signed-in client of a person: what the consent (one authorization code) started.

    The family of every token pair issued from that code, refresh after refresh.
    Tied to the person's delegation: revoking the delegation, the grant or the
    client ends its tokens at once; a reused refresh token or code revokes it.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    client = models.ForeignKey(SigninClient, on_delete=models.CASCADE, related_name="grants")
    delegation = models.ForeignKey(Delegation, on_delete=models.CASCADE, related_name="signin_grants")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="signin_grants")
    redirect_uri = models.CharField(max_length=500)
    resource = models.CharField(max_length=500)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoke_reason = models.CharField(max_length=40, blank=True)

    class Meta:
        db_table = "policies_app_signingrant"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"signed-in client {self.client_id} for delegation {self.delegation_id}"


class SigninCode(models.Model):
    """A one-time authorization code (a digest), bound to client, redirect URI, PKCE S256 challenge, resource.

    `used_at` is set by the first exchange, right or wrong; a second exchange
    revokes the grant the first one started.
    """

    id = models.BigAutoField(primary_key=True)
    code_digest = models.CharField(max_length=64, unique=True, editable=False)
    client = models.ForeignKey(SigninClient, on_delete=models.CASCADE, related_name="codes")
    delegation = models.ForeignKey(Delegation, on_delete=models.CASCADE, related_name="signin_codes")
    redirect_uri = models.CharField(max_length=500)
    code_challenge = models.CharField(max_length=128)
    resource = models.CharField(max_length=500)
    scope = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    grant = models.ForeignKey(SigninGrant, null=True, blank=True, on_delete=models.CASCADE, related_name="codes")

    class Meta:
        db_table = "policies_app_signincode"

    def __str__(self) -> str:
        return f"sign-in code {self.pk}"


class SigninToken(models.Model):
    """One issued pair: an access token (≤ 1 hour) and its refresh token, as prefixes + sha256 digests.

    `rotated_at` is set when the refresh token is exchanged for the next pair;
    presenting it again is reuse and revokes the whole grant (the family).
    """

    id = models.BigAutoField(primary_key=True)
    grant = models.ForeignKey(SigninGrant, on_delete=models.CASCADE, related_name="tokens")
    access_prefix = models.CharField(max_length=16, unique=True, editable=False)
    access_digest = models.CharField(max_length=64, editable=False)
    refresh_prefix = models.CharField(max_length=16, unique=True, editable=False)
    refresh_digest = models.CharField(max_length=64, editable=False)
    scope = models.CharField(max_length=200, blank=True)
    issued_at = models.DateTimeField(auto_now_add=True)
    access_expires_at = models.DateTimeField()
    refresh_expires_at = models.DateTimeField()
    rotated_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "policies_app_signintoken"

    def __str__(self) -> str:
        return f"sign-in token pair {self.pk}"
