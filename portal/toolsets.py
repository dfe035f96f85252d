"""The portal's toolsets page: members read their tenant's toolsets, owners create, edit and delete them.

A toolset is a named subset of the catalog an agent reaches at `/mcp/t/<name>`
(tools_app/toolsets.py). It narrows and never grants, so what an owner may
put in it is any tool id the catalog knows; the writes go through tools_app's
service (checked, in the change log, live on the next call).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from core.errors import AppError, add_app_error_to_form
from policies_app.models import TenantMembership
from portal.forms import UIForm
from portal.tenancy import tenant_member_required
from tools_app.models import Toolset
from tools_app.selectors import tool_ids_known
from tools_app.toolsets import toolset_delete, toolset_save, toolsets_visible_to

SECTION = "toolsets"


class ToolsetForm(UIForm):
    name = forms.SlugField(
        max_length=64, help_text="Lower-case letters, digits, '-' and '_': agents connect to /mcp/t/<name>."
    )
    description = forms.CharField(max_length=500, required=False)
    tool_ids = forms.MultipleChoiceField(
        label="Tools", required=False, widget=forms.SelectMultiple(attrs={"size": 12}), help_text="Tools by id."
    )
    tags = forms.CharField(
        required=False,
        max_length=600,
        help_text="Comma-separated tags: every tool carrying one of them belongs to the toolset too.",
    )

    def __init__(self, *args: Any, tool_ids: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["tool_ids"].choices = [(tool_id, tool_id) for tool_id in tool_ids]

    def clean_tags(self) -> list[str]:
        return [tag.strip() for tag in self.cleaned_data["tags"].split(",") if tag.strip()]


def _is_owner(request: HttpRequest) -> bool:
    return bool(request.tenant_role == TenantMembership.Role.OWNER)


def _own_toolset(request: HttpRequest, toolset_id: int) -> Toolset:
    """One of this tenant's own toolsets; a global one or another tenant's is not found (never editable here)."""
    toolset = Toolset.objects.filter(pk=toolset_id, tenant_id=request.tenant.pk).first()
    if toolset is None:
        raise Http404("no such toolset")
    return toolset


def _owner_only(request: HttpRequest) -> HttpResponse:
    return render(request, "tenant/owner_only.html", {"section": SECTION}, status=403)


@tenant_member_required
@require_GET
def toolsets(request: HttpRequest) -> HttpResponse:
    rows = sorted(toolsets_visible_to(tenant_id=request.tenant.pk), key=lambda row: (row.tenant_id is None, row.name))
    return render(
        request,
        "tenant/toolset_list.html",
        {
            "section": SECTION,
            "toolsets": rows,
            "is_owner": _is_owner(request),
            "mcp_url": request.build_absolute_uri("/mcp/t/"),
        },
    )


@tenant_member_required
@require_http_methods(["GET", "POST"])
def toolset_edit(request: HttpRequest, toolset_id: int | None = None) -> HttpResponse:
    """Create (no id) or edit one of the tenant's toolsets; owners only."""
    toolset = _own_toolset(request, toolset_id) if toolset_id is not None else None
    if not _is_owner(request):
        return _owner_only(request)
    initial = (
        {
            "name": toolset.name,
            "description": toolset.description,
            "tool_ids": toolset.tool_ids,
            "tags": ", ".join(toolset.tags),
        }
        if toolset is not None
        else None
    )
    form = ToolsetForm(request.POST or None, initial=initial, tool_ids=tool_ids_known())
    if request.method == "POST" and form.is_valid():
        try:
            saved = toolset_save(
                toolset=toolset,
                tenant_id=request.tenant.pk,
                name=form.cleaned_data["name"],
                description=form.cleaned_data["description"],
                tool_ids=form.cleaned_data["tool_ids"],
                tags=form.cleaned_data["tags"],
            )
        except AppError as error:
            add_app_error_to_form(form, error)
        else:
            messages.success(request, f"Toolset “{saved.name}” saved.")
            return redirect("web:toolset-list")
    return render(
        request,
        "tenant/toolset_form.html",
        {"section": SECTION, "form": form, "toolset": toolset},
        status=400 if form.errors else 200,
    )


@tenant_member_required
@require_http_methods(["GET", "POST"])
def toolset_delete_confirm(request: HttpRequest, toolset_id: int) -> HttpResponse:
    toolset = _own_toolset(request, toolset_id)
    if not _is_owner(request):
        return _owner_only(request)
    if request.method == "POST":
        toolset_delete(toolset=toolset)
        messages.success(request, f"Toolset “{toolset.name}” deleted.")
        return redirect("web:toolset-list")
    return render(
        request,
        "tenant/toolset_delete.html",
        {"section": SECTION, "toolset": toolset, "cancel_url": reverse("web:toolset-list")},
    )
