"""Forms of the tenant UI: they parse what a person typed; the services decide what is allowed.

Secret inputs use `PasswordInput(render_value=False)`, so a form shown again
after an error never carries the secret back to the browser.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.core.validators import MaxLengthValidator
from django.db.models import QuerySet

from connections_app.models import Connection
from policies_app.models import ServiceAccount

EXPIRY_HELP = "Optional, in UTC. Leave empty for no expiry."


class ExpiryInput(forms.DateTimeInput):
    """The browser's native date-time picker; Django parses its ISO value."""

    input_type = "datetime-local"

    def __init__(self) -> None:
        super().__init__(format="%Y-%m-%dT%H:%M")


class UIForm(forms.Form):
    """Labels without Django's trailing colon: the stylesheet sets labels apart."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)


def _secret_input(autocomplete: str) -> forms.PasswordInput:
    return forms.PasswordInput(render_value=False, attrs={"autocomplete": autocomplete, "spellcheck": "false"})


def _bound_the_username(form: AuthenticationForm) -> None:
    """Refuse an over-long username as a field error, before `authenticate()` runs.

    Django's AuthenticationForm sets `max_length` on the username field only
    after the field is built, so the length is never validated; the username
    then reaches django-axes, which records failed log-ins in a varchar(255):
    a 10,000-character username was a 500 (and a long traceback) on PostgreSQL.
    A field error keeps the attempt away from `authenticate()` and from axes.
    """
    field = form.fields["username"]
    field.validators.append(MaxLengthValidator(field.max_length))


class LoginForm(AuthenticationForm):
    """The tenant UI's log-in form: Django's, with the username's length checked."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        _bound_the_username(self)


class AdminLoginForm(AdminAuthenticationForm):
    """The admin's log-in form, bounded like the tenant UI's (`admin.site.login_form`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _bound_the_username(self)


class ConnectionForm(UIForm):
    """What every hand-entered connection has; subclasses add their secret fields in `SECRET_FIELDS`."""

    SECRET_FIELDS: tuple[str, ...] = ()

    provider = forms.ChoiceField(help_text="The service whose tools will use this credential.")
    label = forms.CharField(
        max_length=100, required=False, help_text="A name your team recognises it by, e.g. “release bot”."
    )
    scopes = forms.CharField(
        required=False,
        max_length=2000,
        help_text="Comma separated, as the provider names them (e.g. repo, read:user). Optional.",
    )
    expires_at = forms.DateTimeField(label="Expires at", required=False, widget=ExpiryInput(), help_text=EXPIRY_HELP)
    personal = forms.BooleanField(
        label="Personal: only for calls made on my behalf",
        required=False,
        help_text=(
            "Only calls a service makes for you (with your subject token, see Delegations) may use it, and only "
            "through a grant. Other members do not see it; owners see its details, never its secret."
        ),
    )

    def __init__(self, *args: Any, providers: Iterable[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["provider"].choices = [(provider, provider) for provider in providers]

    def clean_scopes(self) -> list[str]:
        return [scope.strip() for scope in self.cleaned_data["scopes"].split(",") if scope.strip()]

    def credentials(self) -> dict[str, str]:
        return {name: self.cleaned_data[name] for name in self.SECRET_FIELDS}


class ApiKeyConnectionForm(ConnectionForm):
    SECRET_FIELDS = ("api_key",)

    api_key = forms.CharField(
        label="API key",
        max_length=4096,
        widget=_secret_input("off"),
        help_text="Stored encrypted. It is never shown again, not even to you.",
    )

    field_order = ["provider", "label", "api_key", "scopes", "expires_at", "personal"]


class AppPasswordConnectionForm(ConnectionForm):
    SECRET_FIELDS = ("username", "password")

    username = forms.CharField(max_length=256, widget=forms.TextInput(attrs={"autocomplete": "off"}))
    password = forms.CharField(
        label="App password",
        max_length=4096,
        strip=False,
        widget=_secret_input("new-password"),
        help_text="Stored encrypted. It is never shown again, not even to you.",
    )

    field_order = ["provider", "label", "username", "password", "scopes", "expires_at", "personal"]


# ?type= on the "add connection" page -> its form and its heading.
CONNECTION_FORMS: dict[str, tuple[type[ConnectionForm], str]] = {
    Connection.CredentialType.API_KEY: (ApiKeyConnectionForm, "Add an API key"),
    Connection.CredentialType.APP_PASSWORD: (AppPasswordConnectionForm, "Add an app password"),
}


class ConnectionChoiceField(forms.ModelMultipleChoiceField):
    def label_from_instance(self, obj: Connection) -> str:
        return f"{obj.label or obj.get_credential_type_display()} — {obj.provider}, …{obj.short_id}"


class ServiceAccountChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: ServiceAccount) -> str:
        return obj.name  # the tenant is implied; str() would repeat it


class GrantForm(UIForm):
    service_account = ServiceAccountChoiceField(
        queryset=ServiceAccount.objects.none(),
        empty_label="Choose a service account",
        help_text="The caller that may use the connections below.",
    )
    connections = ConnectionChoiceField(
        queryset=Connection.objects.none(),
        widget=forms.CheckboxSelectMultiple,
        help_text="Active connections of this tenant.",
    )
    expires_at = forms.DateTimeField(label="Expires at", required=False, widget=ExpiryInput(), help_text=EXPIRY_HELP)

    def __init__(
        self,
        *args: Any,
        service_accounts: QuerySet[ServiceAccount],
        connections: QuerySet[Connection],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.fields["service_account"].queryset = service_accounts
        self.fields["connections"].queryset = connections


class ServiceAccountForm(UIForm):
    name = forms.SlugField(
        max_length=100,
        help_text="Letters, digits, hyphens and underscores; unique in this tenant, e.g. support-agent.",
    )
    scopes = forms.MultipleChoiceField(
        choices=[
            (ServiceAccount.Scope.TOOLS_EXEC, "tools:exec — list and run tools, read its own calls' records"),
            (ServiceAccount.Scope.CONNECTIONS_MANAGE, "connections:manage — manage connections and grants over REST"),
            (ServiceAccount.Scope.INVOCATIONS_READ, "invocations:read — read every call record of this tenant"),
        ],
        initial=[ServiceAccount.Scope.TOOLS_EXEC],
        widget=forms.CheckboxSelectMultiple,
    )


class ActivityFilterForm(UIForm):
    """The activity page's GET filters; a bad value is reported and ignored, never a 500."""

    OUTCOMES = {"ok": True, "failed": False}

    tool = forms.ChoiceField(required=False)
    outcome = forms.ChoiceField(
        required=False, choices=[("", "Any outcome"), ("ok", "Succeeded"), ("failed", "Failed or refused")]
    )
    run = forms.CharField(label="Run id", required=False, max_length=128)
    person = forms.ChoiceField(label="On behalf of", required=False)

    def __init__(
        self, *args: Any, tool_ids: Iterable[str], people: Iterable[tuple[str, str]] = (), **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.fields["tool"].choices = [("", "All tools"), *((tool_id, tool_id) for tool_id in tool_ids)]
        self.fields["person"].choices = [("", "Anyone (or no one)"), *people]

    def filters(self) -> dict[str, Any]:
        """Keyword arguments for `invocation_list`, from the fields that are valid."""
        self.is_valid()
        data = self.cleaned_data
        return {
            "tool_id": data.get("tool") or "",
            "ok": self.OUTCOMES.get(data.get("outcome") or ""),
            "run_id": data.get("run") or "",
            "subject_id": data.get("person") or "",
        }


class ApprovalDecisionForm(UIForm):
    """A tenant owner's decision on one approval request, with an optional reason."""

    # Sent by the Approve or Deny button the owner pressed (the template renders only the reason).
    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("deny", "Deny")])
    reason = forms.CharField(
        max_length=500,
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Optional. Recorded with the decision, with your name and the time.",
    )


class WebhookForm(UIForm):
    """The URL approval events are posted to; the signing secret is generated, never typed."""

    url = forms.URLField(
        max_length=500,
        label="Webhook URL",
        assume_scheme="https",
        help_text="Toolgate POSTs approval.requested and approval.decided here, signed with HMAC-SHA256.",
    )


class DelegationForm(UIForm):
    """A person lets a service account act on their behalf (their subject token is shown once)."""

    service_account = ServiceAccountChoiceField(
        queryset=ServiceAccount.objects.none(),
        empty_label="Choose a service account",
        help_text="The agent that may call tools for you.",
    )
    tools = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Leave all unticked to allow every tool its policy allows; tick some to allow only those.",
    )
    expires_at = forms.DateTimeField(label="Expires at", required=False, widget=ExpiryInput(), help_text=EXPIRY_HELP)

    def __init__(
        self, *args: Any, service_accounts: QuerySet[ServiceAccount], tool_ids: Iterable[str], **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.fields["service_account"].queryset = service_accounts
        self.fields["tools"].choices = [(tool_id, tool_id) for tool_id in tool_ids]


class RedirectUrisForm(UIForm):
    """Where a service account's consent redirects may return: one exact URL per line."""

    redirect_uris = forms.CharField(
        label="Consent redirect URIs",
        required=False,
        max_length=5500,
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
        help_text="One per line, matched exactly: https, or http on 127.0.0.1 / localhost. At most 10.",
    )

    def clean_redirect_uris(self) -> list[str]:
        return [line.strip() for line in self.cleaned_data["redirect_uris"].splitlines() if line.strip()]


class CallConfirmForm(UIForm):
    """The person's own answer to a call made for them: the Confirm or Decline button they pressed."""

    decision = forms.ChoiceField(choices=[("confirm", "Confirm"), ("decline", "Decline")])


class CallConnectionForm(ApiKeyConnectionForm):
    """The connect page's key form: the provider is the call's, and the connection is the person's own.

    The same fields and checks as "Add an API key", less the two the call
    decides: which provider, and personal (a connection made for one person's
    call is theirs alone).
    """

    def __init__(self, *args: Any, provider: str, **kwargs: Any) -> None:
        super().__init__(*args, providers=[provider], **kwargs)
        del self.fields["provider"]
        del self.fields["personal"]
