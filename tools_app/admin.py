"""The operators' catalog: tool switches, and the audit log read-only.

Tools come from code through `manage.py sync_tools`, so the admin neither adds
nor deletes them; the only thing an operator changes is the kill switch, and it
goes through `tool_set_enabled` whichever way it is flipped (change form,
list_editable, bulk action), which bumps the governance generation.
"""

from __future__ import annotations

import json

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from core.admin_display import WrittenElsewhereAdmin, count_of, short_datetime
from core.errors import AppError
from tools_app import toolsets_admin  # registers the toolsets admin
from tools_app.models import Tool, ToolInvocation
from tools_app.selectors import schema_hash_label, tool_ids_known
from tools_app.services import tool_metadata_set, tool_set_enabled
from tools_app.sources import tool_enable_problems

__all__ = ["ToolAdmin", "ToolInvocationAdmin", "toolsets_admin"]


@admin.register(Tool)
class ToolAdmin(WrittenElsewhereAdmin, admin.ModelAdmin):
    # Tools come from code via sync_tools; a deleted row would lose its switch and history (sync marks
    # gone tools instead). Operators change the switch and the metadata.
    admin_may_change = True
    # The kill switch next to the id, and short headers: every column fits at 1280 px.
    list_display = (
        "id",
        "is_enabled",
        "effect",
        "level",
        "confirm",
        "tag_list",
        "source",
        "missing",
        "schema_changed",
    )
    list_editable = ("is_enabled",)
    list_filter = (
        "effect",
        "consequence_level",
        "requires_confirmation",
        "source",
        "is_enabled",
        "requires_connection",
    )
    search_fields = ("id", "description")
    actions = ("enable_selected", "disable_selected")
    fields = (
        "id",
        "description",
        "is_enabled",
        "effect",
        "consequence_level",
        "requires_confirmation",
        "tags",
        "version",
        "source",
        "provider",
        "requires_connection",
        "missing_since",
        "schema_hash_shown",
        "schema_changed_at",
        "input_schema_pretty",
        "created_at",
        "updated_at",
    )
    readonly_fields = tuple(name for name in fields if name != "is_enabled")
    # An upstream tool's metadata is the operator's to set (its defaults are the most restrictive);
    # a code tool's comes from its contract.
    mcp_editable_fields = ("consequence_level", "requires_confirmation", "tags")

    def get_readonly_fields(self, request: HttpRequest, obj: Tool | None = None) -> tuple[str, ...]:
        if obj is not None and obj.source == Tool.Source.MCP:
            return tuple(name for name in self.readonly_fields if name not in self.mcp_editable_fields)
        return (*self.readonly_fields, "confirmation")

    def get_fields(self, request: HttpRequest, obj: Tool | None = None) -> list[str]:
        """A code tool's confirmation is read-only: said in words ("✗" above the field's help text read as on)."""
        fields = list(super().get_fields(request, obj))
        if obj is None or obj.source != Tool.Source.MCP:
            fields = ["confirmation" if name == "requires_confirmation" else name for name in fields]
        return fields

    @admin.display(description="Requires confirmation")
    def confirmation(self, obj: Tool) -> str:
        if obj.requires_confirmation:
            return "Yes: every call waits for a person's approval, whatever the policy says."
        return "No: the policy decides which calls wait for a person's approval."

    @admin.display(description="schema hash")
    def schema_hash_shown(self, tool: Tool) -> SafeString:
        """As policy files write it (`policy export`), and as the MCP tools' review pages show it."""
        return format_html('<code class="schema-hash">{}</code>', schema_hash_label(tool.schema_hash))

    @admin.display(description="tags")
    def tag_list(self, tool: Tool) -> str:
        return ", ".join(tool.tags)

    @admin.display(description="Level", ordering="consequence_level")
    def level(self, obj: Tool) -> str:
        return obj.consequence_level

    @admin.display(boolean=True, description="Confirm", ordering="requires_confirmation")
    def confirm(self, obj: Tool) -> bool:
        return obj.requires_confirmation

    @admin.display(description="Missing", ordering="missing_since")
    def missing(self, obj: Tool) -> str | None:
        return short_datetime(obj.missing_since)

    @admin.display(description="Schema changed", ordering="schema_changed_at")
    def schema_changed(self, obj: Tool) -> str | None:
        return short_datetime(obj.schema_changed_at)

    @admin.display(description="input schema")
    def input_schema_pretty(self, tool: Tool) -> SafeString:
        return format_html("<pre>{}</pre>", json.dumps(tool.input_schema, indent=2, sort_keys=True))

    def save_model(self, request: HttpRequest, obj: Tool, form: ModelForm, change: bool) -> None:
        """Every edit goes through a service: the switch like the bulk actions, an MCP tool's metadata too."""
        if obj.source == Tool.Source.MCP and any(name in form.changed_data for name in self.mcp_editable_fields):
            try:
                tool_metadata_set(
                    tool_id=obj.pk,
                    consequence_level=obj.consequence_level,
                    requires_confirmation=obj.requires_confirmation,
                    tags=obj.tags,
                )
            except AppError as exc:
                self.message_user(request, f"Metadata not saved: {exc}", messages.ERROR)
        problems = tool_enable_problems([obj.pk]) if obj.is_enabled else []
        if problems:  # e.g. an upstream tool runs only with an approved definition
            self.message_user(request, problems[0], messages.ERROR)
            return
        tool_set_enabled(tool_ids=[obj.pk], enabled=obj.is_enabled)

    @admin.action(description="Enable selected tools", permissions=["change"])
    def enable_selected(self, request: HttpRequest, queryset: QuerySet[Tool]) -> None:
        self._switch(request, queryset, enabled=True)

    @admin.action(description="Disable selected tools", permissions=["change"])
    def disable_selected(self, request: HttpRequest, queryset: QuerySet[Tool]) -> None:
        self._switch(request, queryset, enabled=False)

    def _switch(self, request: HttpRequest, queryset: QuerySet[Tool], *, enabled: bool) -> None:
        selected = list(queryset)
        if enabled:
            for problem in tool_enable_problems(tool.pk for tool in selected):
                self.message_user(request, problem, messages.ERROR)
                selected = [tool for tool in selected if not problem.startswith(f"{tool.pk} ")]
        changed = tool_set_enabled(tool_ids=[tool.pk for tool in selected], enabled=enabled)
        verb = "Enabled" if enabled else "Disabled"
        for tool in selected:
            if tool.pk in changed:
                self.log_change(request, tool, f"{verb} by bulk action.")
        unchanged = len(selected) - len(changed)
        message = f"{verb} {count_of(len(changed), 'tool')}."
        if unchanged:
            message += f" {count_of(unchanged, 'tool')} already {verb.lower()}."
        self.message_user(request, message)


class ToolIdFilter(admin.SimpleListFilter):
    """Offers the known tool ids instead of scanning the audit table for its distinct values."""

    title = "tool"
    parameter_name = "tool_id"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [(tool_id, tool_id) for tool_id in tool_ids_known()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[ToolInvocation]) -> QuerySet[ToolInvocation]:
        value = self.value()
        return queryset.filter(tool_id=value) if value else queryset


@admin.register(ToolInvocation)
class ToolInvocationAdmin(WrittenElsewhereAdmin, admin.ModelAdmin):
    """The audit log: readable by operators, written only by the runner."""

    # Every column fits at 1280 px; the tool_call_id is on each row's page and found by the search.
    list_display = (
        "started",
        "tenant",
        "service_account",
        "tool_id",
        "ok",
        "error_code",
        "decision",
        "duration",
    )
    list_filter = ("tenant", ToolIdFilter, "ok", "error_code", "decision")
    date_hierarchy = "started_at"
    # Exact matches: ids are looked up whole, and a substring scan of the audit table is slow.
    search_fields = ("=tool_call_id", "=run_id", "=subject_id")
    search_help_text = "Exact tool_call_id, run_id or subject (user:<id>, the person a call was made for)."
    list_select_related = ("tenant", "service_account__tenant")
    show_full_result_count = False  # the table grows large; counting it all on every page is costly
    fields = (
        "tool_call_id",
        "run_id",
        "tenant",
        "service_account",
        "tool_id",
        "state",
        "decision",
        "ok",
        "executed",
        "error_code",
        "safe_message",
        "connection_id",
        "grant_id",
        "subject_id",
        "approved_by",
        "authz_reason",
        "rule_id",
        "rule_action",
        "guardrail",
        "args_sha256",
        "result",
        "content",
        "result_bytes",
        "started_at",
        "ended_at",
        "duration_ms",
    )
    readonly_fields = fields

    @admin.display(description="Started at", ordering="started_at")
    def started(self, obj: ToolInvocation) -> str | None:
        return short_datetime(obj.started_at)

    @admin.display(description="ms", ordering="duration_ms")
    def duration(self, obj: ToolInvocation) -> int | None:
        return obj.duration_ms
