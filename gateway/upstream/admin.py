"""The operators' view of upstream MCP servers and the definitions they offer.

Servers: add and edit (the operator token is write-only), "discover now",
status and last error. Tools: filtered by server and status, approved and live
definitions side by side with their diff, "approve this definition" (who and
when are recorded), and confirming or tightening the effect the upstream's
hints suggest. Every write goes through gateway.upstream.services; every
string an upstream sent is escaped.
"""

from __future__ import annotations

import difflib
import json
import shlex
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.helpers import ActionForm
from django.contrib.admin.utils import unquote
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.templatetags.static import static
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from changes_app.selectors import change_last_actor_label
from core.admin_display import WrittenElsewhereAdmin, short_datetime
from core.errors import AppError
from gateway.host.sandbox import binds_from_rows
from gateway.upstream.definitions import safe_label
from gateway.upstream.feature_services import mcp_features_approve, mcp_features_set_enabled
from gateway.upstream.models import McpFeature, McpServer, McpTool
from gateway.upstream.services import (
    DiscoveryFailed,
    approved_schema_hash,
    mcp_server_allow_in_policy,
    mcp_server_check,
    mcp_server_discover,
    mcp_server_register,
    mcp_server_remove,
    mcp_server_set_token,
    mcp_tool_allow_asking,
    mcp_tool_approval_preview,
    mcp_tool_approve,
    mcp_tool_set_effect,
    mcp_tools_approve,
)
from policies_app.models import ToolPolicy
from runner.types import ToolEffect
from tools_app.selectors import schema_hash_label

APPROVE_TEMPLATE = "admin/gateway/mcptool/approve.html"
APPROVE_AND_ENABLE_TEMPLATE = "admin/gateway/mcptool/approve_and_enable.html"
SHORT_HASH_CHARS = 8  # hex digits in the list; the title holds the whole hash
ERROR_PREVIEW_CHARS = 120
NOT_APPLICABLE = "—"
APPROVE_ACTION = "tool.approve_definition"  # the change log's action of mcp_tool_approve


class McpServerForm(forms.ModelForm):
    """The token is write-only: a blank field keeps the stored one; nothing is ever rendered back."""

    operator_token = forms.CharField(
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False),
        help_text="Bearer token for servers without a provider. Stored encrypted; leave blank to keep the current one.",
    )
    clear_operator_token = forms.BooleanField(required=False, label="Remove the stored operator token")
    url = forms.URLField(
        max_length=2000,
        assume_scheme="https",
        required=False,
        help_text="The server's streamable-HTTP endpoint (stdio servers: `manage.py mcp_upstream add --command`).",
    )

    class Meta:
        model = McpServer
        fields = ("slug", "url", "provider", "discover_seconds", "enabled")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        stdio = self.instance.pk is not None and self.instance.is_stdio
        try:
            mcp_server_check(
                slug=data.get("slug") or self.instance.slug or "",  # read-only (absent) on a change
                url="" if stdio else data.get("url", ""),
                provider=data.get("provider", ""),
                discover_seconds=data.get("discover_seconds") or 0,
                **(stdio_fields(self.instance) if stdio else {}),
                secret_env_names=list(self.instance.secret_env_names or []) if stdio else (),
            )
        except AppError as error:
            raise forms.ValidationError(str(error)) from None
        return data


def stdio_fields(server: McpServer) -> dict[str, Any]:
    """What only the command sets on a stdio server; the admin keeps it as it is."""
    return {
        "command": list(server.command),
        "env": dict(server.env or {}),
        "credential_env": server.credential_env,
        "allowed_hosts": list(server.allowed_hosts or []),
        "trusted_unsandboxed": server.trusted_unsandboxed,
        "npm_package": server.npm_package,
        "pip_package": server.pip_package,
        "binds": binds_from_rows(server.binds),
    }


class PolicyChoiceForm(forms.Form):
    """The policy that "allow every approved tool of the selected servers" writes to."""

    policy = forms.ModelChoiceField(
        queryset=ToolPolicy.objects.select_related("tenant", "service_account").order_by("name"),
        required=False,
        empty_label="(policy, for “allow every approved tool”)",
    )


class McpServerActionForm(ActionForm, PolicyChoiceForm):
    """The action bar, with the policy choice beside the action."""


@admin.register(McpServer)
class McpServerAdmin(admin.ModelAdmin):
    form = McpServerForm
    action_form = McpServerActionForm
    # Every column fits at 1280 px: provider and discovery interval are on the server's page.
    list_display = (
        "slug",
        "endpoint",
        "provider",
        "enabled",
        "last_discovery",
        "discovery_status",
        "last_error_preview",
        "has_operator_token",
        "removed",
    )
    list_filter = ("transport", "enabled", "last_discovery_status", "provider")
    search_fields = ("slug", "url")
    actions = ("discover_now", "allow_in_policy", "remove_selected")
    readonly_fields = (
        "token_state",
        "last_discovery_at",
        "last_discovery_status",
        "last_discovery_error",
        "protocol_version",
        "removed_at",
        "created_at",
        "updated_at",
    )

    stdio_readonly_fields = (
        "transport",
        "command_line",
        "npm_package",
        "pip_package",
        "bound_folders",
        "environment_names",
        "credential_env",
        "egress",
        "trusted_unsandboxed",
    )

    def get_fields(self, request: HttpRequest, obj: McpServer | None = None) -> list[str]:
        if obj is not None and obj.is_stdio:
            return [
                "slug",
                *self.stdio_readonly_fields,
                "provider",
                "discover_seconds",
                "enabled",
                *self.readonly_fields,
            ]
        fields = ["slug", "url", "provider", "discover_seconds", "enabled", "operator_token"]
        if obj is not None:
            fields += ["clear_operator_token", *self.readonly_fields]
        return fields

    def get_readonly_fields(self, request: HttpRequest, obj: McpServer | None = None) -> tuple[str, ...]:
        if obj is not None and obj.is_stdio:
            return ("slug", *self.stdio_readonly_fields, *self.readonly_fields)
        return ("slug", *self.readonly_fields) if obj is not None else ()

    @admin.display(description="endpoint")
    def endpoint(self, server: McpServer) -> str:
        return f"stdio: {self.command_line(server)}" if server.is_stdio else server.url

    @admin.display(description="command")
    def command_line(self, server: McpServer) -> str:
        line = shlex.join(server.command or [])
        return line if len(line) <= ERROR_PREVIEW_CHARS else line[:ERROR_PREVIEW_CHARS] + "…"

    @admin.display(description="bound folders (host:sandbox:mode)")
    def bound_folders(self, server: McpServer) -> str:
        return ", ".join(bind.label for bind in binds_from_rows(server.binds)) or "-"

    @admin.display(description="environment (values not shown)")
    def environment_names(self, server: McpServer) -> str:
        plain = sorted(server.env or {})
        sealed = [f"{name} (encrypted)" for name in server.secret_env_names or []]
        return ", ".join([*plain, *sealed]) or "-"

    @admin.display(description="network (allowed hosts)")
    def egress(self, server: McpServer) -> str:
        return ", ".join(server.allowed_hosts or []) or "none (no network)"

    def has_delete_permission(self, request: HttpRequest, obj: McpServer | None = None) -> bool:
        return False  # removal marks tools removed; their ids stay in the audit log

    @admin.display(description="last discovery", ordering="last_discovery_at")
    def last_discovery(self, server: McpServer) -> str | None:
        return short_datetime(server.last_discovery_at)

    @admin.display(description="status", ordering="last_discovery_status")
    def discovery_status(self, server: McpServer) -> str:
        return server.get_last_discovery_status_display()

    @admin.display(description="removed", ordering="removed_at")
    def removed(self, server: McpServer) -> str | None:
        return short_datetime(server.removed_at)

    @admin.display(description="last error")
    def last_error_preview(self, server: McpServer) -> str:
        error = server.last_discovery_error
        return error if len(error) <= ERROR_PREVIEW_CHARS else error[:ERROR_PREVIEW_CHARS] + "…"

    @admin.display(description="token")
    def has_operator_token(self, server: McpServer) -> SafeString | str:
        """Yes or no for an HTTP server; a stdio server takes no bearer token, so the question does not apply."""
        if server.is_stdio:
            return NOT_APPLICABLE
        icon, alt = ("yes", "True") if server.has_operator_token else ("no", "False")
        return format_html('<img src="{}" alt="{}">', static(f"admin/img/icon-{icon}.svg"), alt)

    @admin.display(description="operator token")
    def token_state(self, server: McpServer) -> str:
        return f"stored, encrypted under key {server.operator_token_key_id}" if server.has_operator_token else "none"

    def save_model(self, request: HttpRequest, obj: McpServer, form: forms.ModelForm, change: bool) -> None:
        """Through the service, like the command: schedule, tool rows and the governance generation follow."""
        data = form.cleaned_data
        token = data.get("operator_token") or None
        stdio = change and obj.is_stdio
        server, _created = mcp_server_register(
            slug=obj.slug,
            url="" if stdio else data["url"],
            provider=data.get("provider", ""),
            operator_token=None if stdio else token,
            discover_seconds=data["discover_seconds"],
            enabled=data.get("enabled", True),
            **({**stdio_fields(obj), "secret_env": None} if stdio else {}),
        )
        if data.get("clear_operator_token") and not token:
            mcp_server_set_token(server=server, token="")
        obj.pk = server.pk

    @admin.action(description="Discover now", permissions=["change"])
    def discover_now(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        for server in queryset.order_by("slug"):
            try:
                report = mcp_server_discover(server_id=server.pk)
            except DiscoveryFailed as failure:
                self.message_user(request, f"{failure.slug}: failed: {failure.safe_message}", messages.ERROR)
                continue
            self.message_user(request, report.summary(), messages.SUCCESS)

    @admin.action(description="Allow every approved tool of the selected servers in the chosen policy")
    def allow_in_policy(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        """Adds `mcp__<server>__*` to the policy chosen beside the action (gateway.upstream.services)."""
        if not request.user.has_perm("policies_app.change_toolpolicy"):
            self.message_user(request, "Changing a policy needs the permission to change policies.", messages.ERROR)
            return
        form = PolicyChoiceForm(request.POST)
        policy = form.cleaned_data.get("policy") if form.is_valid() else None
        if policy is None:
            self.message_user(request, "Choose the policy beside the action, then run it again.", messages.ERROR)
            return
        for server in queryset.order_by("slug"):
            try:
                policy, pattern, added = mcp_server_allow_in_policy(
                    slug=server.slug, policy_pk=policy.pk, user=request.user
                )
            except AppError as error:
                self.message_user(request, f"{server.slug}: {error}", messages.ERROR)
                continue
            done = "now allows" if added else "already allowed"
            self.message_user(
                request,
                f"Policy {policy.name} {done} {pattern}: every approved, enabled tool of {server.slug}.",
                messages.SUCCESS,
            )

    @admin.action(description="Remove selected servers (their tools are marked removed)", permissions=["change"])
    def remove_selected(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        for server in queryset.order_by("slug"):
            mcp_server_remove(slug=server.slug)
            self.log_change(request, server, "Removed; its tools are marked removed.")
        self.message_user(request, f"Removed {queryset.count()} server(s).")


@admin.register(McpTool)
class McpToolAdmin(WrittenElsewhereAdmin, admin.ModelAdmin):
    # Tools come from discovery; removed ones stay, for their audit rows.
    admin_may_change = True
    # Every column fits at 1280 px: the server and the upstream's name are in the tool id (a mapped name and
    # when the tool was last listed are on its page), how and when it was approved in one column, the hash cut.
    list_display = (
        "tool_id",
        "status",
        "enabled",
        "effect",
        "suggested_effect",
        "approved",
        "schema_hash",
    )
    list_filter = ("status", "server", "suggested_effect")
    search_fields = ("tool__id", "upstream_name")
    list_select_related = ("server", "tool", "approved_by")
    actions = (
        "approve_and_enable_selected",
        "confirm_suggested_effect",
        "set_state_change",
        "set_external_side_effect",
        "allow_elicitation",
        "allow_elicitation_and_sampling",
        "allow_no_asking",
    )
    fields = (
        "tool_id_link",
        "server",
        "upstream_label",
        "status",
        "enabled",
        "effect",
        "suggested_effect",
        "effect_confirmed_at",
        "effect_confirmed_by",
        "approve_link",
        "comparison",
        "schema_hash_full",
        "approved_schema_hash_full",
        "approved_at",
        "approved_by_label",
        "approved_via",
        "asking",
        "first_seen_at",
        "last_seen_at",
        "drifted_at",
        "removed_at",
    )
    readonly_fields = fields

    @admin.display(description="approved", ordering="approved_at")
    def approved(self, tool: McpTool) -> str | None:
        if tool.approved_at is None:
            return None
        by = f" by {tool.approved_by.get_username()}" if tool.approved_by is not None else ""
        return (
            f"{short_datetime(tool.approved_at)}{by} ({tool.approved_via})"
            if tool.approved_via
            else (f"{short_datetime(tool.approved_at)}{by}")
        )

    @admin.display(description="approved by")
    def approved_by_label(self, tool: McpTool) -> str:
        """The user, or for an approval from a command or a policy import (no user) the change log's actor."""
        if tool.approved_by is not None:
            return tool.approved_by.get_username()
        if tool.approved_at is None:
            return "-"
        return change_last_actor_label(obj=tool, action=APPROVE_ACTION) or "-"

    @admin.display(description="last seen", ordering="last_seen_at")
    def last_seen(self, tool: McpTool) -> str | None:
        return short_datetime(tool.last_seen_at)

    @admin.display(description="upstream name")
    def upstream_label(self, tool: McpTool) -> str:
        return safe_label(tool.upstream_name).strip("'")

    @admin.display(description="enabled", boolean=True)
    def enabled(self, tool: McpTool) -> bool:
        return tool.tool.is_enabled

    @admin.display(description="effect in force")
    def effect(self, tool: McpTool) -> str:
        return tool.tool.effect

    @admin.display(description="schema hash")
    def schema_hash(self, tool: McpTool) -> SafeString:
        """Abbreviated like a git hash (hex digits); the whole `sha256:` hash is the title and on the tool's page."""
        full = schema_hash_label(tool.tool.schema_hash)
        digits = full.removeprefix("sha256:")
        return format_html('<code class="schema-hash" title="{}">{}…</code>', full, digits[:SHORT_HASH_CHARS])

    @admin.display(description="schema hash (policy files pin it)")
    def schema_hash_full(self, tool: McpTool) -> SafeString:
        return format_html(
            '<code class="schema-hash">{}</code> (of the live definition and the effect in force; '
            "what <code>policy export</code> writes)",
            schema_hash_label(tool.tool.schema_hash),
        )

    @admin.display(description="schema hash of the approved definition")
    def approved_schema_hash_full(self, tool: McpTool) -> SafeString | str:
        approved = approved_schema_hash(tool)
        return format_html('<code class="approved-schema-hash">{}</code>', approved) if approved else "(never approved)"

    @admin.display(description="tool")
    def tool_id_link(self, tool: McpTool) -> SafeString:
        url = reverse("admin:tools_app_tool_change", args=[tool.tool_id])
        return format_html('<a href="{}">{}</a> (kill switch and catalog row)', url, tool.tool_id)

    @admin.display(description="review")
    def approve_link(self, tool: McpTool) -> SafeString | str:
        if tool.status in (McpTool.Status.PENDING, McpTool.Status.DRIFTED):
            url = reverse("admin:gateway_mcptool_approve", args=[tool.pk])
            return format_html('<a class="button" href="{}">Review and approve the live definition</a>', url)
        return "nothing to approve" if tool.status == McpTool.Status.APPROVED else "removed upstream"

    @admin.display(description="approved vs live definition")
    def comparison(self, tool: McpTool) -> SafeString:
        return definition_comparison(tool)

    # --- approval ---------------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        custom = [
            path(
                "<path:object_id>/approve/",
                self.admin_site.admin_view(self.approve_view),
                name="gateway_mcptool_approve",
            )
        ]
        return custom + super().get_urls()

    def approve_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET: what would be pinned; POST (with the live hash shown): pin it, recording who and when."""
        tool = self.get_object(request, unquote(object_id))
        if tool is None:
            raise Http404("no such MCP tool")
        if not self.has_change_permission(request, tool):
            raise Http404("no such MCP tool")
        if request.method == "POST":
            shown = request.POST.get("schema_hash", "")
            try:
                mcp_tool_approve(
                    tool_id=tool.tool_id,
                    user=request.user,  # type: ignore[arg-type]
                    via="admin",
                    expected_schema_hash=shown,
                )
            except AppError as error:
                self.message_user(request, str(error), messages.ERROR)
            else:
                self.log_change(request, tool, f"Approved definition {shown}.")
                self.message_user(
                    request, f"Approved the live definition of {tool.tool_id} ({shown}).", messages.SUCCESS
                )
            return HttpResponseRedirect(reverse("admin:gateway_mcptool_change", args=[tool.pk]))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "tool": tool,
            "preview": mcp_tool_approval_preview(tool),
            "comparison": definition_comparison(tool),
            "title": f"Approve {tool.tool_id}",
        }
        return TemplateResponse(request, APPROVE_TEMPLATE, context)

    @admin.action(description="Approve and enable selected tools", permissions=["change"])
    def approve_and_enable_selected(self, request: HttpRequest, queryset: QuerySet[McpTool]) -> HttpResponse | None:
        """One step from discovered to callable: an intermediate page shows each definition (with its diff),
        the effect it will run with and the schema hash it will pin; its POST approves, confirms and enables
        exactly what was shown (each tool guarded by its hash), or nothing."""
        tools = list(queryset.select_related("tool", "server").order_by("tool_id"))
        removed = [tool.tool_id for tool in tools if tool.status == McpTool.Status.REMOVED]
        if removed:
            message = f"Removed upstream, nothing to approve: {', '.join(removed)}. Nothing changed."
            self.message_user(request, message, messages.ERROR)
            return None
        if request.POST.get("post") == "yes":
            expected = {tool.tool_id: request.POST.get(f"schema_hash_{tool.pk}", "") for tool in tools}
            try:
                previews = mcp_tools_approve(
                    expected=expected,
                    enable=True,
                    user=request.user,  # type: ignore[arg-type]
                    via="admin",
                )
            except AppError as error:
                self.message_user(request, str(error), messages.ERROR)
                fresh = list(McpTool.objects.select_related("tool", "server").filter(pk__in=[t.pk for t in tools]))
                return self._approve_and_enable_page(request, sorted(fresh, key=lambda tool: tool.tool_id))
            for preview in previews:
                self.log_change(
                    request, preview.tool, f"Approved and enabled ({preview.effect.value}, {preview.schema_hash})."
                )
            listed = "; ".join(f"{p.tool.tool_id} ({p.effect.value}, {p.schema_hash})" for p in previews)
            self.message_user(request, f"Approved and enabled {len(previews)} tool(s): {listed}.", messages.SUCCESS)
            return None
        return self._approve_and_enable_page(request, tools)

    def _approve_and_enable_page(self, request: HttpRequest, tools: list[McpTool]) -> TemplateResponse:
        reviews = [
            (mcp_tool_approval_preview(tool, confirm_effect=True), definition_comparison(tool)) for tool in tools
        ]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Approve and enable {len(tools)} MCP tool(s)",
            "reviews": reviews,
            "tool_ids": [tool.tool_id for tool in tools],
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, APPROVE_AND_ENABLE_TEMPLATE, context)

    # --- effects ----------------------------------------------------------------------------

    @admin.action(description="Confirm the effect the upstream's hints suggest", permissions=["change"])
    def confirm_suggested_effect(self, request: HttpRequest, queryset: QuerySet[McpTool]) -> None:
        for tool in queryset:
            self._set_effect(request, tool, ToolEffect(tool.suggested_effect))

    @admin.action(description="Set effect: state_change", permissions=["change"])
    def set_state_change(self, request: HttpRequest, queryset: QuerySet[McpTool]) -> None:
        for tool in queryset:
            self._set_effect(request, tool, ToolEffect.STATE_CHANGE)

    @admin.action(description="Set effect: external_side_effect (most restrictive)", permissions=["change"])
    def set_external_side_effect(self, request: HttpRequest, queryset: QuerySet[McpTool]) -> None:
        for tool in queryset:
            self._set_effect(request, tool, ToolEffect.EXTERNAL_SIDE_EFFECT)

    def _set_effect(self, request: HttpRequest, tool: McpTool, effect: ToolEffect) -> None:
        try:
            mcp_tool_set_effect(tool_id=tool.tool_id, effect=effect, user=request.user)  # type: ignore[arg-type]
        except AppError as error:
            self.message_user(request, str(error), messages.ERROR)
            return
        self.log_change(request, tool, f"Effect set to {effect.value}.")
        self.message_user(request, f"{tool.tool_id}: effect is {effect.value}.", messages.SUCCESS)

    # --- asking the client mid-call (docs/mcp-asking.md) -------------------------------------

    @admin.display(description="may ask the client")
    def asking(self, tool: McpTool) -> str:
        elicitation, sampling = tool.asks_allowed
        asks = [name for name, allowed in (("elicitation", elicitation), ("sampling", sampling)) if allowed]
        return ", ".join(asks) or "nothing"

    @admin.action(
        description="Allow asking the person (elicitation) for the approved definition", permissions=["change"]
    )
    def allow_elicitation(self, request: HttpRequest, queryset: QuerySet[McpTool]) -> None:
        self._allow_asking(request, queryset, elicitation=True, sampling=False)

    @admin.action(
        description="Allow elicitation and sampling (the policy caps sampling) for the approved definition",
        permissions=["change"],
    )
    def allow_elicitation_and_sampling(self, request: HttpRequest, queryset: QuerySet[McpTool]) -> None:
        self._allow_asking(request, queryset, elicitation=True, sampling=True)

    @admin.action(description="Allow no asking (neither elicitation nor sampling)", permissions=["change"])
    def allow_no_asking(self, request: HttpRequest, queryset: QuerySet[McpTool]) -> None:
        self._allow_asking(request, queryset, elicitation=False, sampling=False)

    def _allow_asking(
        self, request: HttpRequest, queryset: QuerySet[McpTool], *, elicitation: bool, sampling: bool
    ) -> None:
        for selected in queryset:
            try:
                tool = mcp_tool_allow_asking(
                    tool_id=selected.tool_id,
                    elicitation=elicitation,
                    sampling=sampling,
                    user=request.user,  # type: ignore[arg-type]
                )
            except AppError as error:
                self.message_user(request, str(error), messages.ERROR)
                continue
            self.log_change(request, tool, f"May ask the client: {self.asking(tool)}.")
            self.message_user(request, f"{tool.tool_id}: may ask the client {self.asking(tool)}.", messages.SUCCESS)


def _pretty(definition: Any) -> str:
    return json.dumps(definition, indent=2, sort_keys=True, ensure_ascii=False) if definition else ""


def definition_comparison(tool: McpTool) -> SafeString:
    """Approved and live definitions side by side, then a unified diff (escaped: upstream text)."""
    approved, live = _pretty(tool.approved_definition), _pretty(tool.live_definition)
    diff = "\n".join(
        difflib.unified_diff(approved.splitlines(), live.splitlines(), "approved", "live", lineterm="", n=2)
    )
    rows = format_html(
        '<table class="mcp-definition-comparison"><thead><tr><th>approved</th><th>live</th></tr></thead>'
        "<tbody><tr><td><pre>{}</pre></td><td><pre>{}</pre></td></tr></tbody></table>",
        approved or "(never approved)",
        live,
    )
    if not diff:
        return format_html("{}<p>The live definition is the approved one.</p>", rows)
    lines = format_html_join("\n", "{}", ((line,) for line in diff.splitlines()))
    return format_html('{}<h3>Diff</h3><pre class="mcp-definition-diff">{}</pre>', rows, lines)


@admin.register(McpFeature)
class McpFeatureAdmin(admin.ModelAdmin):
    """Upstream resources and prompts: review the live definition, approve it, switch it on or off.

    Like tools: new entries arrive pending and off, a drifted one is quarantined until it is
    approved again, and the caller's policy must also name it (allowed_resources /
    allowed_prompts). Every write goes through feature_services; upstream text is escaped.
    """

    list_display = ("name", "kind", "server", "status", "is_enabled", "approved_at", "last_seen_at")
    list_filter = ("kind", "status", "is_enabled", "server")
    list_select_related = ("server",)
    search_fields = ("name", "upstream_key")
    actions = ("approve_definitions", "approve_and_enable", "enable_entries", "disable_entries")
    readonly_fields = (
        "server",
        "kind",
        "name",
        "upstream_label",
        "ident",
        "status",
        "is_enabled",
        "live_json",
        "approved_json",
        "live_hash",
        "approved_hash",
        "approved_at",
        "approved_by",
        "approved_via",
        "first_seen_at",
        "last_seen_at",
        "drifted_at",
        "removed_at",
    )
    fields = readonly_fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: McpFeature | None = None) -> bool:
        return False

    @admin.display(description="upstream key")
    def upstream_label(self, row: McpFeature) -> str:
        return safe_label(row.upstream_key, limit=300)

    @admin.display(description="live definition")
    def live_json(self, row: McpFeature) -> SafeString:
        return format_html("<pre>{}</pre>", json.dumps(row.live_definition, indent=2, sort_keys=True))

    @admin.display(description="approved definition")
    def approved_json(self, row: McpFeature) -> SafeString:
        if row.approved_definition is None:
            return format_html("{}", NOT_APPLICABLE)
        return format_html("<pre>{}</pre>", json.dumps(row.approved_definition, indent=2, sort_keys=True))

    def _approve(self, request: HttpRequest, queryset: QuerySet[McpFeature], *, enable: bool) -> None:
        names = list(queryset.values_list("name", flat=True))
        try:
            mcp_features_approve(names=names, enable=enable, user=request.user, via="admin")  # type: ignore[arg-type]
        except AppError as exc:
            self.message_user(request, exc.safe_message, messages.ERROR)
            return
        state = "approved and enabled" if enable else "approved (still off)"
        self.message_user(request, f"{len(names)} {state}; callers also need a policy that allows them")

    @admin.action(description="Approve the live definitions", permissions=["change"])
    def approve_definitions(self, request: HttpRequest, queryset: QuerySet[McpFeature]) -> None:
        self._approve(request, queryset, enable=False)

    @admin.action(description="Approve the live definitions and switch on", permissions=["change"])
    def approve_and_enable(self, request: HttpRequest, queryset: QuerySet[McpFeature]) -> None:
        self._approve(request, queryset, enable=True)

    def _switch(self, request: HttpRequest, queryset: QuerySet[McpFeature], *, enabled: bool) -> None:
        try:
            changed = mcp_features_set_enabled(names=queryset.values_list("name", flat=True), enabled=enabled)
        except AppError as exc:
            self.message_user(request, exc.safe_message, messages.ERROR)
            return
        self.message_user(request, f"{len(changed)} switched {'on' if enabled else 'off'}")

    @admin.action(description="Switch on", permissions=["change"])
    def enable_entries(self, request: HttpRequest, queryset: QuerySet[McpFeature]) -> None:
        self._switch(request, queryset, enabled=True)

    @admin.action(description="Switch off", permissions=["change"])
    def disable_entries(self, request: HttpRequest, queryset: QuerySet[McpFeature]) -> None:
        self._switch(request, queryset, enabled=False)
