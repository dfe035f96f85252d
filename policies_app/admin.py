"""The operators' governance screens: tenants, memberships, service accounts, delegations, policies.

Approval requests have their screen of their own, approvals_admin.py.

Writes with rules go through policies_app.services (account creation and
revocation, delegation revocation, policy edits). Secrets never reach a page:
the key digest is not a field here, and a new account's clear key appears once,
on the response to the form that created it.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Field, QuerySet
from django.forms import Field as FormField
from django.forms import ModelForm
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from core.admin_display import RevokedFilter, WrittenElsewhereAdmin, count_of, revoke_action
from policies_app import approvals_admin, rules_admin  # noqa: F401 - register the approvals', argument rules' and result guards' screens
from policies_app.catalog import enabled_tool_ids, tool_ids_known
from policies_app.forms import ServiceAccountChangeForm, ServiceAccountCreateForm, ToolPolicyForm
from policies_app.governance import governance_cache
from policies_app.models import Delegation, ServiceAccount, Tenant, TenantMembership, ToolPolicy
from policies_app.selectors import EffectivePolicy, policies_applicable_to, policy_effective_for
from policies_app.services import (
    delegation_revoke,
    policy_delete,
    policy_save,
    service_account_create,
    service_account_revoke,
    service_account_update,
)
from policies_app.toolpatterns import is_pattern
from runner.types import Budgets

KEY_CREATED_TEMPLATE = "admin/policies_app/serviceaccount/key_created.html"
EFFECTIVE_POLICY_TEMPLATE = "admin/policies_app/serviceaccount/effective_policy.html"


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "created_at")
    search_fields = ("slug", "name")
    readonly_fields = ("created_at",)


@admin.register(TenantMembership)
class TenantMembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "tenant", "role", "created_at")
    list_filter = ("role", "tenant")
    search_fields = ("user__username", "tenant__slug", "tenant__name")
    list_select_related = ("user", "tenant")
    readonly_fields = ("created_at",)


@admin.register(ServiceAccount)
class ServiceAccountAdmin(admin.ModelAdmin):
    """Accounts are created by the service (it mints the key) and revoked, never deleted.

    Deleting an account would cut its audit rows loose; revocation keeps them
    attributed while the key stops working on the next call.
    """

    list_display = ("tenant", "name", "scopes_display", "key_prefix", "created_at", "last_used_at", "revoked_at")
    list_display_links = ("name",)
    list_filter = ("tenant", RevokedFilter)
    search_fields = ("name", "key_prefix")
    list_select_related = ("tenant",)
    actions = ("revoke_selected",)
    add_fieldsets = ((None, {"fields": ("tenant", "name", "scopes")}),)
    fieldsets = (
        (None, {"fields": ("tenant", "name", "scopes")}),
        ("Key", {"fields": ("key_prefix",), "description": "Only the public prefix is kept in clear."}),
        ("Policy", {"fields": ("effective_policy",)}),
        ("Consent redirect", {"fields": ("consent_redirect_uris",)}),
        ("History", {"fields": ("created_at", "created_by", "last_used_at", "revoked_at", "revoked_by")}),
    )
    change_readonly_fields = (
        "tenant",
        "key_prefix",
        "effective_policy",
        "consent_redirect_uris",
        "created_at",
        "created_by",
        "last_used_at",
        "revoked_at",
        "revoked_by",
    )
    exclude = ("key_digest",)

    def has_delete_permission(self, request: HttpRequest, obj: ServiceAccount | None = None) -> bool:
        return False

    def get_fieldsets(self, request: HttpRequest, obj: ServiceAccount | None = None) -> Any:
        return self.add_fieldsets if obj is None else self.fieldsets

    def get_readonly_fields(self, request: HttpRequest, obj: ServiceAccount | None = None) -> tuple[str, ...]:
        return () if obj is None else self.change_readonly_fields

    def get_form(
        self, request: HttpRequest, obj: ServiceAccount | None = None, change: bool = False, **kwargs: Any
    ) -> type[ModelForm]:
        kwargs["form"] = ServiceAccountChangeForm if obj is not None else ServiceAccountCreateForm
        return super().get_form(request, obj, change=change, **kwargs)

    @admin.display(description="scopes")
    def scopes_display(self, account: ServiceAccount) -> str:
        return ", ".join(account.scopes)

    @admin.display(description="effective policy")
    def effective_policy(self, account: ServiceAccount) -> SafeString:
        governance_cache.refresh()  # this process may hold an older generation than the database
        policy = policy_effective_for(tenant_id=account.tenant_id, service_account_id=str(account.pk))
        url = reverse("admin:policies_app_serviceaccount_effective_policy", args=[account.pk])
        if policy is None:
            return format_html('No policy: nothing is allowed. <a href="{}">Details</a>', url)
        return format_html(
            '{} ({} allowed). <a href="{}">Details</a>', policy.name, count_of(len(policy.allowed_tools), "tool"), url
        )

    # --- creation: the service mints the key, the response shows it once -----------------

    def save_form(self, request: HttpRequest, form: ModelForm, change: bool) -> ServiceAccount:
        """On add the service creates the account and mints its key; the form itself is never saved."""
        if change:
            return super().save_form(request, form, change)
        account, clear_key = service_account_create(
            tenant=form.cleaned_data["tenant"],
            name=form.cleaned_data["name"],
            scopes=form.cleaned_data["scopes"],
            created_by=request.user,
        )
        # Kept on this request object only, for response_add: never in the session or a message.
        request.toolgate_clear_key = clear_key  # type: ignore[attr-defined]
        return account

    def save_model(self, request: HttpRequest, obj: ServiceAccount, form: ModelForm, change: bool) -> None:
        if change:
            service_account_update(account=obj)
        # on add, service_account_create (in save_form) already saved it

    def save_related(self, request: HttpRequest, form: ModelForm, formsets: Any, change: bool) -> None:
        if change:
            super().save_related(request, form, formsets, change)

    def response_add(
        self, request: HttpRequest, obj: ServiceAccount, post_url_continue: str | None = None
    ) -> HttpResponse:
        """The one page that ever shows the key (admin views already send no-store headers)."""
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Service account created",
            "account": obj,
            "clear_key": request.toolgate_clear_key,  # type: ignore[attr-defined]
            "change_url": reverse("admin:policies_app_serviceaccount_change", args=[obj.pk]),
        }
        return TemplateResponse(request, KEY_CREATED_TEMPLATE, context)

    # --- revocation -----------------------------------------------------------------------

    revoke_selected = revoke_action(
        lambda account, user: service_account_revoke(account=account, revoked_by=user), noun="service account"
    )

    # --- effective policy -----------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        # Before the default patterns: their "<path:object_id>/" would swallow this URL.
        custom = [
            path(
                "<path:object_id>/effective-policy/",
                self.admin_site.admin_view(self.effective_policy_view),
                name="policies_app_serviceaccount_effective_policy",
            )
        ]
        return custom + super().get_urls()

    def effective_policy_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Which policy the runner applies to this account now, and the ones it overrides."""
        account = self.get_object(request, unquote(object_id))
        if account is None:
            raise Http404("no such service account")
        if not self.has_view_or_change_permission(request, account):
            raise PermissionDenied
        governance_cache.refresh()
        effective = policy_effective_for(tenant_id=account.tenant_id, service_account_id=str(account.pk))
        candidates = policies_applicable_to(tenant_id=account.tenant_id, service_account_id=str(account.pk))
        applied = next((p for p in candidates if effective is not None and p.name == effective.name), None)
        enabled = enabled_tool_ids()
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Effective policy of {account}",
            "account": account,
            "effective": effective,
            "applied": applied,
            "overridden": [p for p in candidates if p is not applied],
            "tools": _allowed_rows(effective, enabled) if effective else [],
            "approval_effects": sorted(effective.approval_effects) if effective else [],
            "budgets": _budget_rows(effective.budgets) if effective else [],
        }
        return TemplateResponse(request, EFFECTIVE_POLICY_TEMPLATE, context)


def _allowed_rows(effective: EffectivePolicy, enabled: set[str]) -> list[tuple[str, bool]]:
    """The policy's named ids and the catalog ids its patterns match now, each with its switch."""
    named = {entry for entry in effective.allowed_tools if not is_pattern(entry)}
    matched = {tool_id for tool_id in tool_ids_known() if effective.allows(tool_id)}
    return [(tool_id, tool_id in enabled) for tool_id in sorted(named | matched)]


def _budget_rows(budgets: Budgets) -> list[tuple[str, int | None]]:
    return [
        ("max runtime (ms)", budgets.max_runtime_ms),
        ("max result bytes", budgets.max_result_bytes),
        ("rate limit per minute", budgets.rate_limit_per_minute),
        ("max concurrency", budgets.max_concurrency),
        ("max sampling requests per call", budgets.max_samples_per_call),
    ]


@admin.register(Delegation)
class DelegationAdmin(WrittenElsewhereAdmin, admin.ModelAdmin):
    """People's delegations to service accounts: made by the people themselves (tenant UI, consent redirect).

    Operators read them and may revoke them; the token is never stored in clear
    and its digest is never shown.
    """

    admin_may_change = True

    list_display = (
        "tenant",
        "user",
        "service_account",
        "origin",
        "tools_display",
        "created_at",
        "expires_at",
        "revoked_at",
    )
    list_filter = ("tenant", "origin", RevokedFilter)
    search_fields = ("user__username", "service_account__name")
    list_select_related = ("tenant", "user", "service_account__tenant")
    actions = ("revoke_selected",)
    fields = (
        "tenant",
        "user",
        "service_account",
        "tools",
        "connection_ids",
        "origin",
        "created_at",
        "token_issued_at",
        "expires_at",
        "revoked_at",
        "revoked_by",
    )
    readonly_fields = fields

    @admin.display(description="tools")
    def tools_display(self, delegation: Delegation) -> str:
        return ", ".join(delegation.tools) or "all its policy allows"

    revoke_selected = revoke_action(
        lambda delegation, user: delegation_revoke(delegation=delegation, revoked_by=user), noun="delegation"
    )


@admin.register(ToolPolicy)
class ToolPolicyAdmin(admin.ModelAdmin):
    form = ToolPolicyForm
    list_display = ("name", "scope", "is_active", "allowed_tool_count", "updated_at", "updated_by")
    list_filter = ("is_active", "tenant")
    search_fields = ("name",)
    list_select_related = ("tenant", "service_account__tenant", "updated_by")
    fieldsets = (
        (None, {"fields": ("name", "is_active")}),
        (
            "Scope",
            {
                "fields": ("tenant", "service_account"),
                "description": "No tenant: global. A tenant: every account of that tenant. A service account "
                "(with its tenant): that caller only. The most specific active policy applies; "
                "with none, nothing is allowed.",
            },
        ),
        ("Tools", {"fields": ("allowed_tools", "allowed_tool_patterns")}),
        (
            "Resources and prompts",
            {
                "fields": ("allowed_resources", "allowed_prompts"),
                "description": "Upstream MCP resources and prompts (docs/resources.md); none unless listed here.",
            },
        ),
        (
            "Approval",
            {
                "fields": (
                    "require_approval_for_effects",
                    "require_approval_at_or_above",
                    "require_approval_for_tools",
                    "approver",
                    "approval_ttl_s",
                ),
                "description": "A call needs a person's approval when any rule here matches, or when its tool "
                "requires confirmation. Operators can always decide; with “tenant owners”, the tenant's "
                "owners can too, in the tenant UI.",
            },
        ),
        (
            "Budgets",
            {
                "fields": (
                    "max_runtime_ms",
                    "max_result_bytes",
                    "rate_limit_per_minute",
                    "max_concurrency",
                    "max_samples_per_call",
                ),
                "description": "Empty means the runner's default (for sampling requests: none).",
            },
        ),
        ("History", {"fields": ("created_at", "updated_at", "updated_by")}),
    )
    readonly_fields = ("created_at", "updated_at", "updated_by")

    @admin.display(description="scope")
    def scope(self, policy: ToolPolicy) -> str:
        return policy.scope_label

    @admin.display(description="allowed tools")
    def allowed_tool_count(self, policy: ToolPolicy) -> int:
        return len(policy.allowed_tools)

    def formfield_for_dbfield(self, db_field: Field, request: HttpRequest, **kwargs: Any) -> FormField | None:
        if db_field.name == "service_account":
            kwargs["queryset"] = ServiceAccount.objects.select_related("tenant")
        formfield = super().formfield_for_dbfield(db_field, request, **kwargs)
        if db_field.name == "service_account" and formfield is not None:
            # A new account's key page cannot come back through a related-object popup.
            formfield.widget.can_add_related = False
        return formfield

    def save_model(self, request: HttpRequest, obj: ToolPolicy, form: ModelForm, change: bool) -> None:
        policy_save(policy=obj, updated_by=request.user)  # type: ignore[arg-type]

    def delete_model(self, request: HttpRequest, obj: ToolPolicy) -> None:
        policy_delete(policy=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ToolPolicy]) -> None:
        """The bulk delete action too: one service call (and one change-log entry) per policy."""
        for policy in queryset:
            policy_delete(policy=policy)
