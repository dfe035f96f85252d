"""The operators' screen for approval requests: what the call would do, and Approve / Deny with a reason.

An approver sees what they approve: the connection's label (installed by the
rows' owner, `connection_labels.py`) and the call's args, opened from their
seal (`approval_args.py`). Decisions go through policies_app.services, which
records who, when and why and erases the kept args.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from core.admin_display import WrittenElsewhereAdmin, count_of
from policies_app.approval_args import approval_args_view
from policies_app.connection_labels import connection_label
from policies_app.models import ApprovalRequest
from policies_app.services import approval_decide

CHANGE_FORM_TEMPLATE = "admin/policies_app/approvalrequest/change_form.html"


class ApprovalDecisionForm(forms.Form):
    """What an operator posts from the detail page: the decision and, optionally, why."""

    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("deny", "Deny")])
    reason = forms.CharField(
        max_length=500,
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60, "form": "approval-decide-form"}),
        label="Reason",
    )


class ApprovalStatusFilter(admin.SimpleListFilter):
    """Status as callers see it: a pending or approved request past its expiry is `expired`."""

    title = "status"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [(value, label) for value, label in ApprovalRequest.Status.choices] + [("expired", "Expired")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[ApprovalRequest]) -> QuerySet[ApprovalRequest]:
        value = self.value()
        now = timezone.now()
        open_statuses = [ApprovalRequest.Status.PENDING, ApprovalRequest.Status.APPROVED]
        if value == "expired":
            return queryset.filter(status__in=open_statuses, expires_at__lte=now)
        if value in open_statuses:
            return queryset.filter(status=value, expires_at__gt=now)
        if value in ApprovalRequest.Status.values:
            return queryset.filter(status=value)
        return queryset


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(WrittenElsewhereAdmin, admin.ModelAdmin):
    """Operators decide pending calls here; the caller then repeats the call to run or be refused."""

    admin_may_change = True  # the decision; requests come from calls and are never deleted

    change_form_template = CHANGE_FORM_TEMPLATE
    # Few, short columns: Status, Expires and Decided by stay visible on a 1280 px screen.
    list_display = ("tool_id", "tenant", "service_account", "status_now", "expires_at", "decided_by_name", "created_at")
    list_display_links = ("tool_id",)
    list_filter = (ApprovalStatusFilter, "approver", "consequence_level", "tenant")
    sortable_by = ("tool_id", "tenant", "status_now", "expires_at", "decided_by_name", "created_at")
    search_fields = ("=tool_call_id", "tool_id")
    search_help_text = "Exact tool_call_id, or part of a tool id."
    list_select_related = ("tenant", "service_account__tenant")
    actions = ("approve_selected", "deny_selected")
    fields = (
        "tenant",
        "service_account",
        "tool_id",
        "effect",
        "consequence_level",
        "required_because",
        "connection",
        "subject_id",
        "tool_call_id",
        "args_sha256",
        "status_now",
        "approver",
        "created_at",
        "expires_at",
        "decided_at",
        "decided_by_name",
        "reason",
        "consumed_at",
    )
    readonly_fields = fields

    @admin.display(description="status", ordering="status")
    def status_now(self, approval: ApprovalRequest) -> str:
        return approval.status_at(timezone.now())

    @admin.display(description="connection")
    def connection(self, approval: ApprovalRequest) -> str:
        return connection_label(tenant_id=approval.tenant_id, connection_id=approval.connection_id)

    # --- the detail page: what is being approved, and the decision ------------------------------

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        approval = self.get_object(request, unquote(object_id))
        context: dict[str, Any] = {**(extra_context or {})}
        if approval is not None:
            context.update(
                args=approval_args_view(approval),
                decision_form=ApprovalDecisionForm(),
                can_decide=self.has_change_permission(request, approval)
                and approval.status_at(timezone.now()) == ApprovalRequest.Status.PENDING,
                decide_url=reverse("admin:policies_app_approvalrequest_decide", args=[approval.pk]),
                # Nothing on this page is a form field: the decision has its own buttons.
                show_save=False,
                show_save_and_continue=False,
                show_save_and_add_another=False,
                show_delete=False,
            )
        return super().change_view(request, object_id, form_url, extra_context=context)

    def get_urls(self) -> list[URLPattern]:
        custom = [
            path(
                "<path:object_id>/decide/",
                self.admin_site.admin_view(require_POST(self.decide_view)),
                name="policies_app_approvalrequest_decide",
            )
        ]
        return custom + super().get_urls()

    def decide_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST (CSRF-checked by admin_view): approve or deny one request, with an optional reason."""
        approval = self.get_object(request, unquote(object_id))
        if approval is None or not self.has_view_permission(request, approval):
            raise Http404("no such approval request")
        change_url = reverse("admin:policies_app_approvalrequest_change", args=[approval.pk])
        if not self.has_change_permission(request, approval):
            self.message_user(request, "You may view approval requests but not decide them.", messages.ERROR)
            return HttpResponseRedirect(change_url)
        form = ApprovalDecisionForm(request.POST)
        if not form.is_valid():
            problems = "; ".join(f"{field}: {' '.join(errors)}" for field, errors in form.errors.items())
            self.message_user(request, f"Nothing was decided: {problems}", messages.ERROR)
            return HttpResponseRedirect(change_url)
        approve = form.cleaned_data["decision"] == "approve"
        reason = form.cleaned_data["reason"]
        if approval_decide(approval=approval, approve=approve, decided_by=request.user, reason=reason):
            verb = "Approved" if approve else "Denied"
            self.log_change(request, approval, f"{verb}." + (f" Reason: {reason}" if reason else ""))
            self.message_user(
                request,
                f"{verb}: {approval}. The caller's repeat of the call will now {'run' if approve else 'be refused'}.",
                messages.SUCCESS,
            )
        else:
            self.message_user(
                request, "Nothing was decided: the request is no longer pending, or it has expired.", messages.WARNING
            )
        return HttpResponseRedirect(change_url)

    # --- bulk decisions from the list ----------------------------------------------------------

    @admin.action(description="Approve selected requests", permissions=["change"])
    def approve_selected(self, request: HttpRequest, queryset: QuerySet[ApprovalRequest]) -> None:
        self._decide(request, queryset, approve=True)

    @admin.action(description="Deny selected requests", permissions=["change"])
    def deny_selected(self, request: HttpRequest, queryset: QuerySet[ApprovalRequest]) -> None:
        self._decide(request, queryset, approve=False)

    def _decide(self, request: HttpRequest, queryset: QuerySet[ApprovalRequest], *, approve: bool) -> None:
        verb = "Approved" if approve else "Denied"
        decided = skipped = 0
        for approval in queryset:
            if approval_decide(approval=approval, approve=approve, decided_by=request.user):
                self.log_change(request, approval, f"{verb}.")
                decided += 1
            else:
                skipped += 1
        self.message_user(request, f"{verb} {count_of(decided, 'request')}.")
        if skipped:
            self.message_user(
                request,
                f"Skipped {count_of(skipped, 'request')} that {'was' if skipped == 1 else 'were'} "
                "not pending or had expired.",
                messages.WARNING,
            )
