"""The pages an MCP client sends a person to when a call made for them needs them (URL elicitation).

- `calls/<id>/confirm/`: the person confirms or declines one exact call (tool and
  arguments shown as kept for them), when it asks for their own confirmation.
- `calls/<id>/`: where a call that others must approve stands, for its person
  (and for the owners who may decide it, who get a link to decide).

Neither URL is pre-authenticated or carries anything secret: the page asks the
browser's own sign-in (the login page's `next` is checked by Django, so no open
redirect), then checks that the one signed in is the person the call is for
(the MCP specification's MUST for URL elicitation); anyone else gets the same
404 as an unknown id. Forms carry CSRF tokens, and the site's CSP forbids
framing (`frame-ancestors 'none'`). gateway/elicitation.py maps each kind
of request to one of these pages (PAGE_OF_KIND).

- `calls/connect/<id>/`: a call needs an account of its tool's provider and the
  person has none usable for that client. The page connects one with the
  portal's own flows (an API key typed here, or the OAuth flow, which returns
  here), grants it to the service account and declares it on the person's
  delegation, then says the person can return to their client. The id names a
  short-lived ask (gateway/elicitation.py `ConnectAsk`), not a credential.
"""

from __future__ import annotations

from uuid import UUID

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods

from connections_app.models import Connection
from connections_app.oauth import oauth_flow_start
from connections_app.selectors import oauth_provider_list
from connections_app.services import connection_create_for_call, connection_declare_for_call
from core.crypto import CredentialError
from core.errors import AppError, add_app_error_to_form
from gateway.elicitation import ConnectAsk, connect_ask_done, connect_ask_get
from policies_app.approval_args import approval_args_view
from policies_app.models import ApprovalRequest, Approver, Delegation
from policies_app.selectors import (
    approval_by_id,
    approval_for_person,
    delegation_get,
    subject_id_of,
    tenant_owner_may_decide,
)
from policies_app.services import APPROVER_WORDS, approval_decide_as_subject
from portal.forms import CallConfirmForm, CallConnectionForm
from portal.tenancy import tenant_current, tenant_switch


@login_required
@never_cache
@require_http_methods(["GET", "POST"])
def call_confirm(request: HttpRequest, approval_id: UUID) -> HttpResponse:
    """Confirm / Decline one call made for the signed-in person; anyone else's call is not found."""
    approval = approval_for_person(approval_id=approval_id, user_id=request.user.pk)
    if approval is None:
        raise Http404("no such call")
    if approval.approver != Approver.SUBJECT:  # others decide this one: show where it stands
        return redirect("web:call-status", approval_id=approval.pk)
    form = CallConfirmForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        confirm = form.cleaned_data["decision"] == "confirm"
        if approval_decide_as_subject(approval=approval, user=request.user, approve=confirm):
            messages.success(
                request,
                "Confirmed. Return to your client: it runs the call when it tries again."
                if confirm
                else "Declined: the call will not run. You can return to your client.",
            )
        else:
            messages.info(request, "Nothing changed: this call was already decided, or it has expired.")
        return redirect("web:call-confirm", approval_id=approval.pk)
    status = approval.status_at(timezone.now())
    return render(
        request,
        "tenant/call_confirm.html",
        {
            "approval": approval,
            "status": status,
            "args": approval_args_view(approval),
            "can_decide": status == "pending",
            "form": form,
        },
        status=400 if request.method == "POST" else 200,
    )


@login_required
@never_cache
@require_GET
def call_status(request: HttpRequest, approval_id: UUID) -> HttpResponse:
    """Where a call that others approve stands, for its person; an owner who may decide it gets a link."""
    approval = approval_for_person(approval_id=approval_id, user_id=request.user.pk)
    may_decide = False
    if approval is None:  # not the person's call: an owner who may decide it sees it too, nobody else
        approval = approval_by_id(approval_id=str(approval_id))
        if approval is None or not tenant_owner_may_decide(approval=approval, user_id=request.user.pk):
            raise Http404("no such call")
        may_decide = True
    elif approval.approver == Approver.SUBJECT:
        return redirect("web:call-confirm", approval_id=approval.pk)
    return render(
        request,
        "tenant/call_status.html",
        {
            "approval": approval,
            "status": approval.status_at(timezone.now()),
            "who": APPROVER_WORDS.get(approval.approver, "an operator"),
            "may_decide": may_decide,
            "pending": ApprovalRequest.Status.PENDING,
        },
    )


# --- connecting an account for a call ---------------------------------------------------------


def _ask_for_person(request: HttpRequest, ask_id: UUID) -> tuple[ConnectAsk, Delegation]:
    """The ask and its delegation, when the signed-in person is the one the call is for; 404 for anyone else.

    The person's session is switched to the ask's tenant (they are a member, or
    it is a 404), so the OAuth flow started here returns to the same tenant.
    """
    ask = connect_ask_get(str(ask_id))
    if ask is None or ask.subject_id != subject_id_of(request.user.pk):
        raise Http404("no such call")
    if not tenant_switch(request, ask.tenant_id):
        raise Http404("no such call")
    delegation = delegation_get(tenant_id=ask.tenant_id, delegation_id=ask.delegation_id, user_id=request.user.pk)
    if delegation is None or delegation.revoked_at is not None:
        raise Http404("no such call")
    return ask, delegation


@login_required
@never_cache
@require_http_methods(["GET", "POST"])
def call_connect(request: HttpRequest, ask_id: UUID) -> HttpResponse:
    """Connect an account of the call's provider (a key here, or OAuth), for this client; then back to the client."""
    ask, delegation = _ask_for_person(request, ask_id)
    form = CallConnectionForm(request.POST if request.method == "POST" and ask.open else None, provider=ask.provider)
    if request.method == "POST" and ask.open and form.is_valid():
        try:
            connection = connection_create_for_call(
                delegation=delegation,
                user=request.user,
                provider=ask.provider,
                credential_type=Connection.CredentialType.API_KEY,
                credentials=form.credentials(),
                label=form.cleaned_data["label"],
                scopes=form.cleaned_data["scopes"],
                expires_at=form.cleaned_data["expires_at"],
            )
        except AppError as error:
            add_app_error_to_form(form, error)
        else:
            connect_ask_done(ask, connection_id=str(connection.pk))
            messages.success(request, f"Connected {connection.label or connection.provider}. {RETURN_TO_CLIENT}")
            return redirect("web:call-connect", ask_id=ask.ask_id)
    oauth = next((provider for provider in oauth_provider_list() if provider.name == ask.provider), None)
    return render(
        request,
        "tenant/call_connect.html",
        {
            "ask": ask,
            "delegation": delegation,
            "oauth_provider": oauth,
            "form": form,
            "return_to_client": RETURN_TO_CLIENT,
        },
        status=400 if request.method == "POST" and ask.open else 200,
    )


RETURN_TO_CLIENT = "You can return to your client: it runs the call when it tries again."


@login_required
@never_cache
@require_GET
def call_connect_oauth(request: HttpRequest, ask_id: UUID) -> HttpResponse:
    """Start the portal's OAuth flow for the call's provider; its callback comes back to the connect page."""
    ask, _delegation = _ask_for_person(request, ask_id)
    oauth = next((provider for provider in oauth_provider_list() if provider.name == ask.provider), None)
    current = tenant_current(request)
    if oauth is None or current is None or not ask.open:
        raise Http404("no such call")
    try:
        url = oauth_flow_start(
            session=request.session,
            provider=oauth,
            tenant=current.tenant,
            redirect_uri=request.build_absolute_uri(reverse("web:oauth-callback")),
            owner_id=request.user.pk,
            connect_ask=ask.ask_id,
        )
    except CredentialError:
        return render(
            request,
            "tenant/oauth_error.html",
            {"message": "This provider is not configured correctly. An operator has to fix it."},
            status=400,
        )
    return redirect(url)


def connected_for_call(request: HttpRequest, *, ask_id: str, connection: Connection) -> HttpResponse:
    """The OAuth callback of a flow started on a connect page: declare what it connected, back to that page."""
    ask = connect_ask_get(ask_id)
    delegation = None
    if ask is not None and ask.subject_id == subject_id_of(request.user.pk) and ask.open:
        delegation = delegation_get(tenant_id=ask.tenant_id, delegation_id=ask.delegation_id, user_id=request.user.pk)
    if ask is None or delegation is None or delegation.revoked_at is not None:
        messages.info(
            request,
            f"Connected {connection}, but the call's request has expired: choose it for your client on the "
            "Delegations page, or ask your client to make the call again.",
        )
        return redirect("web:connection-list")
    try:
        connection_declare_for_call(delegation=delegation, connection=connection, user=request.user)
    except AppError as error:
        messages.error(request, error.safe_message)
        return redirect("web:connection-list")
    connect_ask_done(ask, connection_id=str(connection.pk))
    messages.success(request, f"Connected {connection}. {RETURN_TO_CLIENT}")
    return redirect("web:call-connect", ask_id=ask.ask_id)
