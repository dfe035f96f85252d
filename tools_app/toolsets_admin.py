"""Toolsets in admin: operators edit every tenant's and the global ones, through the service (change log, push)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from core.errors import AppError
from tools_app.models import Toolset
from tools_app.selectors import tool_ids_known
from tools_app.toolsets import toolset_check, toolset_delete, toolset_save


class ToolsetAdminForm(forms.ModelForm):
    """Tool ids chosen from the catalog (never typed), tags as a comma-separated line."""

    tool_ids = forms.MultipleChoiceField(required=False, widget=forms.SelectMultiple(attrs={"size": 15}))
    tags = forms.CharField(required=False, help_text="Comma-separated: every tool carrying one of them belongs too.")

    class Meta:
        model = Toolset
        fields = ["tenant", "name", "description", "tool_ids", "tags"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["tool_ids"].choices = [(tool_id, tool_id) for tool_id in tool_ids_known()]
        if self.instance.pk:
            self.initial["tags"] = ", ".join(self.instance.tags)

    def clean_tags(self) -> list[str]:
        return sorted({tag.strip() for tag in self.cleaned_data["tags"].split(",") if tag.strip()})

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        try:
            toolset_check(
                name=cleaned.get("name") or "",
                tool_ids=sorted(cleaned.get("tool_ids") or []),
                tags=cleaned.get("tags") or [],
                description=cleaned.get("description") or "",
            )
        except AppError as error:
            for field_error in error.field_errors:
                self.add_error(field_error.path if field_error.path in self.fields else None, field_error.message)
        return cleaned


@admin.register(Toolset)
class ToolsetAdmin(admin.ModelAdmin):
    form = ToolsetAdminForm
    list_display = ("name", "tenant", "tool_count", "tag_list", "updated_at")
    list_filter = ("tenant",)
    search_fields = ("name", "description", "tenant__slug")
    list_select_related = ("tenant",)
    readonly_fields = ("created_at", "updated_at")

    @admin.display(description="tools")
    def tool_count(self, toolset: Toolset) -> int:
        return len(toolset.tool_ids)

    @admin.display(description="tags")
    def tag_list(self, toolset: Toolset) -> str:
        return ", ".join(toolset.tags)

    def save_model(self, request: HttpRequest, obj: Toolset, form: forms.ModelForm, change: bool) -> None:
        saved = toolset_save(
            toolset=obj if change else None,
            tenant_id=obj.tenant_id,
            name=obj.name,
            description=obj.description,
            tool_ids=obj.tool_ids,
            tags=obj.tags,
        )
        obj.pk = saved.pk

    def delete_model(self, request: HttpRequest, obj: Toolset) -> None:
        toolset_delete(toolset=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Toolset]) -> None:
        for toolset in queryset:
            toolset_delete(toolset=toolset)
