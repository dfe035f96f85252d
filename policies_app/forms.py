"""Operator forms of the admin: what an operator may type, checked before any write.

Tool ids and effects are offered as choices built from the code (the registry,
the catalog, ToolEffect), never typed by hand, so a typo cannot silently allow
nothing or the wrong tool.
"""

from __future__ import annotations

from typing import Any

from django import forms

from policies_app.catalog import tool_ids_known, tool_server_prefixes
from policies_app.models import ServiceAccount, ToolPolicy
from policies_app.selectors import policy_active_in_scope
from policies_app.toolpatterns import FEATURE_POLICY_FIELDS, feature_entry_problem, is_pattern, pattern_problem
from runner.types import ToolEffect

SCOPE_CHOICES = ServiceAccount.Scope.choices
EFFECT_CHOICES = [(effect.value, effect.value) for effect in ToolEffect]


class ServiceAccountCreateForm(forms.ModelForm):
    """Tenant, name and scopes: the key is minted by the service, never by this form."""

    scopes = forms.MultipleChoiceField(
        choices=SCOPE_CHOICES,
        widget=forms.CheckboxSelectMultiple,
        initial=[ServiceAccount.Scope.TOOLS_EXEC],
        help_text=(
            "tools:exec lists and runs tools (and reads its own call records); connections:manage manages the "
            "tenant's connections and grants; invocations:read reads every call record of the tenant."
        ),
    )

    class Meta:
        model = ServiceAccount
        fields = ["tenant", "name", "scopes"]


class ServiceAccountChangeForm(forms.ModelForm):
    """Name and scopes of an existing account; its tenant and key never change."""

    scopes = forms.MultipleChoiceField(choices=SCOPE_CHOICES, widget=forms.CheckboxSelectMultiple)

    class Meta:
        model = ServiceAccount
        fields = ["name", "scopes"]

    def clean_scopes(self) -> list[str]:
        return sorted(self.cleaned_data["scopes"])


class ToolPolicyForm(forms.ModelForm):
    """A policy's scope, tools, approval effects and budgets, with the scope rules spelled out.

    Scope errors are attached to the scope's own field: besides reading better
    than the database constraint's name, that makes Django skip re-checking the
    same constraint with its generic message.
    """

    allowed_tools = forms.MultipleChoiceField(
        choices=(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Tools from the code registry and the catalog. A tool also needs its switch on to run.",
    )
    allowed_tool_patterns = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
        label="Allowed tool patterns",
        help_text="One per line; * matches any characters (no other wildcard), e.g. mcp__everything__* for "
        "every tool of one MCP server, now and after discovery. A matched tool still needs its switch on and "
        "an approved definition.",
    )
    allowed_resources = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
        label="Allowed resources",
        help_text="Upstream MCP resources this scope may read, one per line: a URI or a pattern such as "
        "toolgate://docs/* (every resource of the server docs). Empty: none. A resource also needs an "
        "approved definition and its switch on.",
    )
    allowed_prompts = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
        label="Allowed prompts",
        help_text="Upstream MCP prompts this scope may fetch, one per line: a name or a pattern such as "
        "mcp__docs__*. Empty: none.",
    )
    require_approval_for_effects = forms.MultipleChoiceField(
        choices=EFFECT_CHOICES,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Calls of tools with these effects wait for a person's approval.",
    )
    require_approval_for_tools = forms.MultipleChoiceField(
        choices=(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Calls of these tools wait for a person's approval, whatever their effect or level. "
        "A tool that requires confirmation always does.",
    )

    class Meta:
        model = ToolPolicy
        fields = [
            "name",
            "tenant",
            "service_account",
            "is_active",
            "allowed_tools",
            "allowed_tool_patterns",
            "allowed_resources",
            "allowed_prompts",
            "require_approval_for_effects",
            "require_approval_at_or_above",
            "require_approval_for_tools",
            "approver",
            "approval_ttl_s",
            "max_runtime_ms",
            "max_result_bytes",
            "rate_limit_per_minute",
            "max_concurrency",
            "max_samples_per_call",
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Ids the policy already names stay visible (and can be unticked) even if unknown now.
        entries = set(self.instance.allowed_tools or ())
        patterns = sorted(entry for entry in entries if is_pattern(entry))
        tool_ids = sorted(set(tool_ids_known()) | entries.difference(patterns))
        self.fields["allowed_tools"].choices = [(tool_id, tool_id) for tool_id in tool_ids]
        self.initial["allowed_tools"] = sorted(entries.difference(patterns))
        self.initial["allowed_tool_patterns"] = "\n".join(patterns)
        for name in FEATURE_POLICY_FIELDS:
            self.initial[name] = "\n".join(sorted(getattr(self.instance, name) or ()))
        named = sorted(set(tool_ids_known()) | set(self.instance.require_approval_for_tools or ()))
        self.fields["require_approval_for_tools"].choices = [(tool_id, tool_id) for tool_id in named]

    def clean_allowed_tools(self) -> list[str]:
        return sorted(self.cleaned_data["allowed_tools"])

    def clean_allowed_tool_patterns(self) -> list[str]:
        """Each line a pattern that can match something an operator knows of (policies_app.toolpatterns)."""
        lines = sorted({line.strip() for line in self.cleaned_data["allowed_tool_patterns"].splitlines()} - {""})
        known, prefixes = tool_ids_known(), tool_server_prefixes()
        problems = [f"{line!r} has no *: tick the tool above instead" for line in lines if not is_pattern(line)]
        problems += [
            problem
            for line in lines
            if is_pattern(line)
            and (problem := pattern_problem(line, known_ids=known, server_prefixes=prefixes)) is not None
        ]
        if problems:
            raise forms.ValidationError(problems)
        return lines

    def clean_allowed_resources(self) -> list[str]:
        return self._feature_entries("allowed_resources")

    def clean_allowed_prompts(self) -> list[str]:
        return self._feature_entries("allowed_prompts")

    def _feature_entries(self, name: str) -> list[str]:
        lines = sorted({line.strip() for line in (self.cleaned_data[name] or "").splitlines()} - {""})
        problems = [problem for line in lines if (problem := feature_entry_problem(name, line)) is not None]
        if problems:
            raise forms.ValidationError(problems)
        return lines

    def clean_require_approval_for_effects(self) -> list[str]:
        return sorted(self.cleaned_data["require_approval_for_effects"])

    def clean_require_approval_for_tools(self) -> list[str]:
        return sorted(self.cleaned_data["require_approval_for_tools"])

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if "allowed_tools" in cleaned and "allowed_tool_patterns" in cleaned:
            cleaned["allowed_tools"] = sorted({*cleaned["allowed_tools"], *cleaned["allowed_tool_patterns"]})
        if "tenant" not in cleaned or "service_account" not in cleaned:
            return cleaned  # a field error already explains what is wrong
        tenant, account = cleaned["tenant"], cleaned["service_account"]
        if account is not None and (tenant is None or account.tenant_id != tenant.pk):
            self.add_error(
                "service_account",
                f"{account} belongs to tenant {account.tenant}; choose that tenant or another service account.",
            )
            return cleaned
        if cleaned.get("is_active"):
            self._check_one_active_per_scope(tenant, account)
        return cleaned

    def _check_one_active_per_scope(self, tenant: Any, account: ServiceAccount | None) -> None:
        other = policy_active_in_scope(
            tenant_id=tenant.pk if tenant else None,
            service_account_id=account.pk if account else None,
            exclude_pk=self.instance.pk,
        )
        if other is None:
            return
        # The field each database constraint names: global -> is_active, tenant, service account.
        field = "service_account" if account else "tenant" if tenant else "is_active"
        self.add_error(
            field,
            f"The policy “{other.name}” is already active in this scope ({other.scope_label}): "
            "deactivate it first, or save this one as inactive.",
        )
