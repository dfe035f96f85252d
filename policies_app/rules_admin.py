"""Admin screens of argument rules and result guards, with a "try this rule" form.

The forms check a row exactly as a save would (policies_app/rules.py) and
attach each problem to its field; saves and deletes go through the services,
so every write is in the change log and bumps the governance generation.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest

from policies_app.cel import activation, condition_compile, condition_evaluate
from policies_app.models import ArgumentRule, ResultGuard
from policies_app.rules import BUILTIN_DETECTORS, guard_problems, rule_problems
from policies_app.services import argument_rule_save, result_guard_save, scoped_rule_delete
from runner.rules import ConditionError, activation_for
from runner.types import ToolEffect, ToolSpec

SCOPE_HELP = (
    "No tenant: global. A tenant: every account of that tenant. A service account (with its tenant): that caller "
    "only. Argument rules: the most specific scope with a matching rule decides, and within it deny wins. "
    "Result guards add up across scopes."
)


class _ScopedForm(forms.ModelForm):
    problems_of: Any = None

    def _post_clean(self) -> None:
        """The instance holds the form's values only once ModelForm has built it: check it then, as a save would."""
        super()._post_clean()
        if not self.errors:
            for field, problem in type(self).problems_of(self.instance).items():
                self.add_error(field if field in self.fields else None, problem)


class ArgumentRuleForm(_ScopedForm):
    problems_of = staticmethod(rule_problems)
    try_tool = forms.CharField(
        required=False, label="Try it: tool id", help_text="A tool id to evaluate the condition against."
    )
    try_args = forms.CharField(
        required=False,
        label="Try it: arguments (JSON)",
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text='Sample arguments, e.g. {"repo": "acme/widgets"}. Saving shows what the condition says for them.',
    )

    class Meta:
        model = ArgumentRule
        fields = ["name", "is_active", "tenant", "service_account", "tools", "tags", "condition", "action", "message"]

    def clean_try_args(self) -> Any:
        text = self.cleaned_data.get("try_args") or ""
        if not text.strip():
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"not JSON: {exc}") from None


class ResultGuardForm(_ScopedForm):
    problems_of = staticmethod(guard_problems)

    class Meta:
        model = ResultGuard
        fields = [
            "name",
            "is_active",
            "tenant",
            "service_account",
            "tools",
            "tags",
            "detectors",
            "patterns",
            "action",
            "arguments",
            "message",
        ]
        help_texts = {"detectors": "A list of: " + ", ".join(BUILTIN_DETECTORS)}


def try_rule(rule: ArgumentRule, tool_id: str, args: Any) -> str:
    """What the rule's condition says for these sample arguments: matches, does not match, or why it cannot say."""
    spec = ToolSpec(
        name=tool_id or "tool",
        description="",
        input_schema={},
        effect=ToolEffect.READ_ONLY,
        requires_connection=False,
        provider=None,
        schema_hash="",
    )
    variables = activation_for(
        args=args,
        spec=spec,
        caller={"tenant": rule.tenant.slug if rule.tenant else "", "service_account": ""},
        subject_id=None,
        connection_id=None,
        personal_connection=False,
        now=datetime.now(UTC),
    )
    try:
        matched = condition_evaluate(condition_compile(rule.condition), activation(variables))
    except ConditionError as exc:
        return f"the condition cannot be evaluated ({exc}): such a call is refused"
    return f"the condition holds: such a call gets {rule.action}" if matched else "the condition does not hold"


class _ScopedAdmin(admin.ModelAdmin):
    list_filter = ("is_active", "action", "tenant")
    search_fields = ("name",)
    list_select_related = ("tenant", "service_account__tenant", "updated_by")
    readonly_fields = ("created_at", "updated_at", "updated_by")

    @admin.display(description="scope")
    def scope(self, row: Any) -> str:
        return str(row.scope_label)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        scoped_rule_delete(row=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for row in queryset:
            scoped_rule_delete(row=row)


@admin.register(ArgumentRule)
class ArgumentRuleAdmin(_ScopedAdmin):
    form = ArgumentRuleForm
    list_display = ("name", "scope", "action", "is_active", "updated_at", "updated_by")
    fieldsets = (
        (None, {"fields": ("name", "is_active")}),
        ("Scope", {"fields": ("tenant", "service_account"), "description": SCOPE_HELP}),
        ("Tools", {"fields": ("tools", "tags")}),
        (
            "Rule",
            {
                "fields": ("condition", "action", "message"),
                "description": "CEL over args, tool, caller, subject, connection and now (docs/rules.md). A "
                "condition that cannot be evaluated on a call refuses it.",
            },
        ),
        ("Try it", {"fields": ("try_tool", "try_args")}),
        ("History", {"fields": ("created_at", "updated_at", "updated_by")}),
    )

    def save_model(self, request: HttpRequest, obj: ArgumentRule, form: ModelForm, change: bool) -> None:
        argument_rule_save(rule=obj, updated_by=request.user)  # type: ignore[arg-type]
        sample = form.cleaned_data.get("try_args")
        if sample is not None:
            outcome = try_rule(obj, form.cleaned_data.get("try_tool") or "", sample)
            self.message_user(request, f"Try it: {outcome}")


@admin.register(ResultGuard)
class ResultGuardAdmin(_ScopedAdmin):
    form = ResultGuardForm
    list_display = ("name", "scope", "action", "is_active", "updated_at", "updated_by")
    fieldsets = (
        (None, {"fields": ("name", "is_active")}),
        ("Scope", {"fields": ("tenant", "service_account"), "description": SCOPE_HELP}),
        ("Tools", {"fields": ("tools", "tags")}),
        ("Detection", {"fields": ("detectors", "patterns", "action", "arguments", "message")}),
        ("History", {"fields": ("created_at", "updated_at", "updated_by")}),
    )

    def save_model(self, request: HttpRequest, obj: ResultGuard, form: ModelForm, change: bool) -> None:
        result_guard_save(guard=obj, updated_by=request.user)  # type: ignore[arg-type]
