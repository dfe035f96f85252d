"""The operators' screen of MCP sign-in clients: who registered, where they send people back, revoking."""

from __future__ import annotations

from urllib.parse import urlsplit

from django.contrib import admin
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest

from core.admin_display import RevokedFilter, WrittenElsewhereAdmin, revoke_action
from signin.models import SigninClient
from signin.services import signin_client_revoke


@admin.register(SigninClient)
class SigninClientAdmin(WrittenElsewhereAdmin, admin.ModelAdmin):
    """MCP clients that sign people in (RFC 7591 registrations and metadata-document clients).

    Names and URIs are the clients' own, untrusted text (escaped). Revoking a
    client (or deleting it) ends every token issued to it at once.
    """

    admin_may_change = True
    admin_may_delete = True

    list_display = (
        "client_name",
        "kind",
        "client_id_short",
        "redirect_hosts",
        "live_grants",
        "created_at",
        "revoked_at",
    )
    list_filter = ("kind", RevokedFilter)
    search_fields = ("client_name", "client_id")
    actions = ("revoke_selected",)
    fields = (
        "client_name",
        "kind",
        "client_id",
        "client_uri",
        "redirect_uris",
        "registered_from",
        "metadata_fetched_at",
        "created_at",
        "revoked_at",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[SigninClient]:
        live = Count("grants", filter=Q(grants__revoked_at__isnull=True))
        return super().get_queryset(request).annotate(live_grant_count=live)

    @admin.display(description="client id")
    def client_id_short(self, client: SigninClient) -> str:
        return client.client_id if len(client.client_id) <= 60 else f"{client.client_id[:57]}…"

    @admin.display(description="redirect hosts")
    def redirect_hosts(self, client: SigninClient) -> str:
        return ", ".join(sorted({urlsplit(uri).netloc for uri in client.redirect_uris}))

    @admin.display(description="signed in", ordering="live_grant_count")
    def live_grants(self, client: SigninClient) -> int:
        return getattr(client, "live_grant_count", 0)

    revoke_selected = revoke_action(
        lambda client, user: signin_client_revoke(client=client, revoked_by=user),
        noun="client",
        description="Revoke selected clients (ends their tokens)",
    )
