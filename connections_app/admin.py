"""The operators' view of connections: metadata and audit trail, never credentials.

Connections are created by tenants (UI, REST, OAuth) and changed only by
services, so the admin neither adds, edits nor deletes them. Its one write is
revocation, through `connection_revoke`. The encrypted envelope is not a field
here in any form; the key id it was sealed under is shown, for key rotation.
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from connections_app.forms import OAuthProviderAdminForm
from connections_app.models import Connection, ConnectionEvent, ExecutionGrant, OAuthProvider
from connections_app.services import connection_refresh_resume, connection_revoke, grant_revoke
from core.admin_display import RevokedFilter, WrittenElsewhereAdmin, act_on_each, revoke_action, short_datetime
from policies_app.models import ServiceAccount

__all__ = ["ConnectionAdmin"]


@admin.register(Connection)
class ConnectionAdmin(WrittenElsewhereAdmin, admin.ModelAdmin):
    """A read-only page per connection; the model-level change permission exists only for the revoke action.

    Tenants create connections (an operator never holds their credentials); they are revoked, never
    deleted: grants and audit rows keep pointing at them.
    """

    admin_may_change = True  # narrowed to the model level below

    list_display = (
        "short_id",
        "tenant",
        "provider",
        "label",
        "kind",
        "state",
        "scopes_display",
        "created",
        "creator",
        "last_used",
        "expires",
        "revoked",
    )
    list_display_links = ("short_id",)
    list_filter = ("tenant", "provider", "credential_type", "status")
    search_fields = ("label", "tenant__slug", "provider")
    list_select_related = ("tenant", "created_by", "created_by_service_account")
    actions = ("revoke_selected", "resume_refresh_selected")
    fields = (
        "id",
        "tenant",
        "provider",
        "credential_type",
        "label",
        "owner",
        "status",
        "scopes_display",
        "expires_at",
        "created_at",
        "creator",
        "last_used_at",
        "revoked_at",
        "revoked_by",
        "encryption_key_id",
        "next_refresh_at",
        "refreshed_at",
        "refresh_failures",
        "last_refresh_error",
        "last_refresh_error_category",
        "events",
    )
    readonly_fields = fields

    def has_change_permission(self, request: HttpRequest, obj: Connection | None = None) -> bool:
        """No object is edited here (the page is a view, a POST to it is refused); the model-level
        permission stays, because the revoke action requires it."""
        return obj is None and super().has_change_permission(request)

    @admin.display(description="id", ordering="id")
    def short_id(self, connection: Connection) -> str:
        return connection.short_id

    @admin.display(description="scopes")
    def scopes_display(self, connection: Connection) -> str:
        return ", ".join(connection.scopes) or "—"

    @admin.display(description="type", ordering="credential_type")
    def kind(self, connection: Connection) -> str:
        return connection.get_credential_type_display()

    # Short dates: with Django's long ones the list is wider than a 1280 px screen.
    @admin.display(description="created at", ordering="created_at")
    def created(self, connection: Connection) -> str | None:
        return short_datetime(connection.created_at)

    @admin.display(description="created by")
    def creator(self, connection: Connection) -> str:
        return connection.creator

    @admin.display(description="last used", ordering="last_used_at")
    def last_used(self, connection: Connection) -> str | None:
        return short_datetime(connection.last_used_at)

    @admin.display(description="expires at", ordering="expires_at")
    def expires(self, connection: Connection) -> str | None:
        return short_datetime(connection.expires_at)

    @admin.display(description="revoked", ordering="revoked_at")
    def revoked(self, connection: Connection) -> str | None:
        return short_datetime(connection.revoked_at)

    @admin.display(description="status", ordering="status")
    def state(self, connection: Connection) -> str:
        """The status; a connection whose refreshes keep failing says why (`Needs attention: provider error`)."""
        if connection.status == Connection.Status.NEEDS_ATTENTION:
            return f"{connection.get_status_display()}: {connection.last_refresh_error_category}"
        return connection.get_status_display()

    @admin.display(description="last refresh error category")
    def last_refresh_error_category(self, connection: Connection) -> str:
        return connection.last_refresh_error_category or "—"

    @admin.display(description="audit trail")
    def events(self, connection: Connection) -> SafeString:
        url = reverse("admin:connections_app_connectionevent_changelist")
        return format_html('<a href="{}?connection_id={}">Events of this connection</a>', url, connection.pk)

    revoke_selected = revoke_action(
        lambda connection, user: connection_revoke(connection=connection, revoked_by=user), noun="connection"
    )

    @admin.action(description="Resume background refresh of selected connections", permissions=["change"])
    def resume_refresh_selected(self, request: HttpRequest, queryset: QuerySet[Connection]) -> None:
        act_on_each(
            self,
            request,
            queryset,
            lambda connection: connection_refresh_resume(connection=connection, actor=request.user),
            done="Resumed background refresh of",
            noun="connection",
            logged="Background refresh resumed.",
            unchanged="did not need attention",
        )


@admin.register(ConnectionEvent)
class ConnectionEventAdmin(WrittenElsewhereAdmin, admin.ModelAdmin):
    """The connections' audit trail: written only by services, read here."""

    list_display = (
        "tenant",
        "connection_short_id",
        "kind",
        "actor",
        "service_account",
        "tool_id",
        "detail",
        "created_at",
    )
    list_filter = ("tenant", "kind")
    search_fields = ("tool_id", "detail")
    list_select_related = ("tenant", "actor")
    show_full_result_count = False  # the trail grows large; counting it all on every page is costly
    fields = (
        "created_at",
        "tenant",
        "connection_id",
        "kind",
        "actor",
        "service_account",
        "tool_id",
        "detail",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[ConnectionEvent]:
        """`service_account_id` is a plain UUID (no foreign key): its name comes in the same query."""
        names = ServiceAccount.objects.filter(pk=OuterRef("service_account_id")).values("name")[:1]
        return super().get_queryset(request).annotate(service_account_name=Subquery(names))

    @admin.display(description="connection")
    def connection_short_id(self, event: ConnectionEvent) -> str:
        return str(event.connection_id)[-4:]

    @admin.display(description="service account")
    def service_account(self, event: ConnectionEvent) -> str:
        if event.service_account_id is None:
            return "—"
        return event.service_account_name or str(event.service_account_id)  # type: ignore[attr-defined]


@admin.register(OAuthProvider)
class OAuthProviderAdmin(admin.ModelAdmin):
    """Providers tenants connect to. The client secret can be replaced, never read; the name is
    fixed once created, because the secret's envelope is bound to it."""

    form = OAuthProviderAdminForm
    list_display = ("name", "display_name", "client_id", "use_pkce", "encryption_key_id", "updated_at")
    search_fields = ("name", "display_name", "client_id")
    readonly_fields = ("encryption_key_id", "created_at", "updated_at")

    def get_readonly_fields(self, request: HttpRequest, obj: OAuthProvider | None = None) -> tuple[str, ...]:
        return (*self.readonly_fields, "name") if obj is not None else self.readonly_fields


@admin.register(ExecutionGrant)
class ExecutionGrantAdmin(WrittenElsewhereAdmin, admin.ModelAdmin):
    """Grants are made over REST or the tenant UI; operators inspect and revoke them."""

    admin_may_change = True

    list_display = ("id", "tenant", "service_account", "connection_count", "created_at", "expires_at", "revoked_at")
    list_filter = ("tenant", RevokedFilter)
    search_fields = ("service_account__name", "tenant__slug")
    list_select_related = ("tenant", "service_account__tenant")
    actions = ("revoke_selected",)
    fields = (
        "id",
        "tenant",
        "service_account",
        "connection_list",
        "created_at",
        "created_by",
        "expires_at",
        "revoked_at",
        "revoked_by",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[ExecutionGrant]:
        return super().get_queryset(request).annotate(connection_total=Count("connections"))

    @admin.display(description="connections", ordering="connection_total")
    def connection_count(self, grant: ExecutionGrant) -> int:
        return grant.connection_total  # type: ignore[attr-defined]

    @admin.display(description="connections")
    def connection_list(self, grant: ExecutionGrant) -> str:
        """Provider, label and the id's last four characters: metadata, never credentials."""
        return ", ".join(str(connection) for connection in grant.connections.all()) or "—"

    revoke_selected = revoke_action(lambda grant, user: grant_revoke(grant=grant, revoked_by=user), noun="grant")
