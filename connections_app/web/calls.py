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
framing (`frame-ancestors 'none'`). tools_app/mcp_server/person.py maps each kind
of request to one of these pages (PAGE_OF_KIND).
"""

from __future__ import annotations

from uuid import UUID

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods

from connections_app.web.forms import CallConfirmForm
from policies_app.approval_args import approval_args_view
from policies_app.models import ApprovalRequest, Approver
from policies_app.selectors import approval_by_id, approval_for_person, tenant_owner_may_decide
from policies_app.services import APPROVER_WORDS, approval_decide_as_subject


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
