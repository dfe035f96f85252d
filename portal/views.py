"""Views of the tenant web UI (docs/getting-started.md, "The tenant web UI").

Thin by design: each view parses a form, calls one service or selector scoped
to `request.tenant`, and renders. Every object is fetched through a selector
that takes the tenant, so another tenant's id is simply not found (404).
Revocations are two steps: GET shows what will happen, POST does it (one helper: web/revoking.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from uuid import UUID

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.views import LoginView
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from connections_app.models import Connection, ExecutionGrant
from connections_app.selectors import (
    Viewer,
    approval_seen_by,
    approvals_seen_by,
    change_entries_named,
    changes_seen_by,
    connection_events,
    connection_get,
    connection_label,
    connection_list,
    connection_visible_to,
    grant_get,
    grant_list,
    grant_list_for_connection,
    invocations_seen_by,
    oauth_provider_list,
    webhook_of_tenant,
)
from connections_app.services import connection_create, connection_revoke, grant_create, grant_revoke
from connections_app.webhooks import webhook_remove, webhook_set
from core.errors import AppError, add_app_error_to_form
from gateway.upstream.feature_audit import feature_reads_seen_by
from policies_app.approval_args import approval_args_view
from policies_app.models import Approver, ServiceAccount, TenantMembership
from policies_app.selectors import (
    service_account_get,
    service_account_list,
    subject_id_of,
    tenant_owner_may_decide,
    tenant_subjects,
)
from policies_app.services import (
    approval_decide_as_tenant_owner,
    service_account_create,
    service_account_revoke,
)
from portal.activity import CHART_DAYS, activity_chart, activity_per_day, chart_days
from portal.forms import (
    CONNECTION_FORMS,
    ActivityFilterForm,
    ApprovalDecisionForm,
    GrantForm,
    LoginForm,
    ServiceAccountForm,
    WebhookForm,
)
from portal.revoking import RevokeWords, revoke_confirm
from portal.tenancy import tenant_member_required, tenant_switch, viewer_of, visible_to
from tools_app.selectors import tool_ids_known, tool_providers

ACTIVITY_PAGE_SIZE = 50
CHANGES_PAGE_SIZE = 50
APPROVALS_PAGE_SIZE = 50
NO_FILTERS = {"tool_id": "", "ok": None, "run_id": "", "subject_id": ""}


class TenantLoginView(LoginView):
    """The portal's sign-in page: identity providers' buttons, and the password form unless switched off."""

    template_name = "accounts/login.html"
    redirect_authenticated_user = True
    form_class = LoginForm

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.TOOLGATE_LOCAL_LOGIN:
            return HttpResponseForbidden("local passwords are switched off: sign in with your identity provider")
        return super().post(request, *args, **kwargs)


@tenant_member_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    return redirect("web:connection-list")


@tenant_member_required
@require_POST
def switch_tenant(request: HttpRequest) -> HttpResponse:
    """Remember another of the user's tenants; a tenant they are not a member of is not found."""
    if not tenant_switch(request, request.POST.get("tenant")):
        raise Http404("not a tenant of this user")
    return redirect("web:connection-list")


# --- connections ------------------------------------------------------------------------


@tenant_member_required
@require_GET
def connections(request: HttpRequest) -> HttpResponse:
    rows = connection_list(tenant=request.tenant, visible_to_user_id=visible_to(request))
    return render(
        request,
        "tenant/connection_list.html",
        {
            "section": "connections",
            "connections": rows,
            "now": timezone.now(),
            "oauth_providers": oauth_provider_list(),
        },
    )


@tenant_member_required
@never_cache
@require_http_methods(["GET", "POST"])
def connection_new(request: HttpRequest) -> HttpResponse:
    credential_type = request.GET.get("type", Connection.CredentialType.API_KEY)
    if credential_type not in CONNECTION_FORMS:
        raise Http404("no such credential type")
    form_class, heading = CONNECTION_FORMS[credential_type]
    form = form_class(request.POST or None, providers=tool_providers())
    if request.method == "POST" and form.is_valid():
        try:
            connection = connection_create(
                tenant=request.tenant,
                provider=form.cleaned_data["provider"],
                credential_type=credential_type,
                credentials=form.credentials(),
                scopes=form.cleaned_data["scopes"],
                expires_at=form.cleaned_data["expires_at"],
                label=form.cleaned_data["label"],
                created_by=request.user,
                owner=request.user if form.cleaned_data["personal"] else None,
            )
        except AppError as error:
            add_app_error_to_form(form, error)
        else:
            messages.success(request, f"Connection “{connection.label or connection.provider}” added.")
            return redirect("web:connection-list")
    return render(
        request,
        "tenant/connection_form.html",
        {"section": "connections", "form": form, "heading": heading, "credential_type": credential_type},
    )


def _connection_or_404(request: HttpRequest, connection_id: object) -> Connection:
    connection = connection_get(
        tenant=request.tenant, connection_id=connection_id, visible_to_user_id=visible_to(request)
    )
    if connection is None:
        raise Http404("no such connection")
    return connection


@tenant_member_required
@require_GET
def connection_detail(request: HttpRequest, connection_id: UUID) -> HttpResponse:
    connection = _connection_or_404(request, connection_id)
    return render(
        request,
        "tenant/connection_detail.html",
        {
            "section": "connections",
            "connection": connection,
            "events": connection_events(tenant=request.tenant, connection_id=connection.pk)[:100],
            "grants": grant_list_for_connection(tenant_id=request.tenant.pk, connection_id=connection.pk),
            "now": timezone.now(),
        },
    )


@tenant_member_required
@require_http_methods(["GET", "POST"])
def connection_revoke_confirm(request: HttpRequest, connection_id: UUID) -> HttpResponse:
    connection = _connection_or_404(request, connection_id)
    name = connection.label or connection.provider
    return revoke_confirm(
        request,
        connection,
        revoke=lambda: connection_revoke(connection=connection, revoked_by=request.user),
        words=RevokeWords(
            section="connections",
            kind="connection",
            name=name,
            consequence="Tools stop using it on their next call. Revocation cannot be undone.",
            revoked=f"Connection “{name}” revoked.",
            back_to=reverse("web:connection-list"),
            cancel_url=reverse("web:connection-detail", args=[connection.pk]),
        ),
        details=lambda: _connection_details(request, connection),
    )


def _connection_details(request: HttpRequest, connection: Connection) -> list[tuple[str, str]]:
    grants = grant_list_for_connection(tenant_id=request.tenant.pk, connection_id=connection.pk)
    return [
        ("Provider", connection.provider),
        ("Type", connection.get_credential_type_display()),
        ("Used by grants", str(sum(1 for grant in grants if not grant.is_revoked))),
    ]


# --- grants ---------------------------------------------------------------------------------


@tenant_member_required
@require_GET
def grants(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "tenant/grant_list.html",
        {
            "section": "grants",
            "grants": _grants_as_seen(request, grant_list(tenant_id=request.tenant.pk)),
            "now": timezone.now(),
        },
    )


@tenant_member_required
@require_http_methods(["GET", "POST"])
def grant_new(request: HttpRequest) -> HttpResponse:
    form = GrantForm(
        request.POST or None,
        service_accounts=service_account_list(tenant_id=request.tenant.pk, include_revoked=False),
        connections=connection_list(
            tenant=request.tenant, include_revoked=False, visible_to_user_id=visible_to(request)
        ),
    )
    if request.method == "POST" and form.is_valid():
        try:
            grant_create(
                tenant=request.tenant,
                service_account=form.cleaned_data["service_account"],
                connections=form.cleaned_data["connections"],
                expires_at=form.cleaned_data["expires_at"],
                created_by=request.user,
            )
        except AppError as error:
            add_app_error_to_form(form, error)
        else:
            messages.success(request, f"Grant for “{form.cleaned_data['service_account'].name}” created.")
            return redirect("web:grant-list")
    return render(request, "tenant/grant_form.html", {"section": "grants", "form": form})


@tenant_member_required
@require_http_methods(["GET", "POST"])
def grant_revoke_confirm(request: HttpRequest, grant_id: UUID) -> HttpResponse:
    grant = grant_get(tenant_id=request.tenant.pk, grant_id=grant_id)
    if grant is None:
        raise Http404("no such grant")
    return revoke_confirm(
        request,
        grant,
        revoke=lambda: grant_revoke(grant=grant, revoked_by=request.user),
        words=RevokeWords(
            section="grants",
            kind="grant",
            name=f"for {grant.service_account.name}",
            consequence="The service account can no longer use these connections. This cannot be undone.",
            revoked=f"Grant for “{grant.service_account.name}” revoked.",
            back_to=reverse("web:grant-list"),
        ),
        details=lambda: _grant_details(grant, viewer_of(request)),
    )


def _grants_as_seen(
    request: HttpRequest, grants: Iterable[ExecutionGrant]
) -> list[tuple[ExecutionGrant, list[tuple[Connection, bool]]]]:
    """Each grant with (connection, visible) pairs: another member's personal connection is shown unnamed."""
    viewer = viewer_of(request)
    return [
        (grant, [(c, connection_visible_to(connection=c, viewer=viewer)) for c in grant.connections.all()])
        for grant in grants
    ]


def _grant_details(grant: ExecutionGrant, viewer: Viewer) -> list[tuple[str, str]]:
    names = ", ".join(
        (connection.label or connection.provider)
        if connection_visible_to(connection=connection, viewer=viewer)
        else "another member's personal connection"
        for connection in grant.connections.all()
    )
    return [("Service account", grant.service_account.name), ("Connections", names)]


# --- approvals ----------------------------------------------------------------------------


@tenant_member_required
@require_GET
def approvals(request: HttpRequest) -> HttpResponse:
    """Requests waiting for a decision first (soonest expiry first), then the history, paginated.

    Only the requests this user may see: another person's on-behalf calls are not listed.
    A plain member's page is read-only: no "Review…" (owners decide) and no "Webhook…" (owners set it);
    each request still opens its details.
    """
    viewer = viewer_of(request)
    waiting, history = approvals_seen_by(tenant_id=request.tenant.pk, viewer=viewer)
    page = Paginator(history, APPROVALS_PAGE_SIZE).get_page(request.GET.get("page"))
    return render(
        request,
        "tenant/approval_list.html",
        {
            "section": "approvals",
            "waiting": waiting,
            "history": page,
            "is_owner": viewer.is_owner,
            "owner_approver": Approver.TENANT_OWNER.value,
        },
    )


@tenant_member_required
@require_http_methods(["GET", "POST"])
def approval_detail(request: HttpRequest, approval_id: UUID) -> HttpResponse:
    """What a call would do and its args; owners decide here when the policy lets them (POST).

    A request this user may not see is not found, for a look and for a decision alike.
    """
    approval = approval_seen_by(tenant_id=request.tenant.pk, viewer=viewer_of(request), approval_id=approval_id)
    if approval is None:
        raise Http404("no such approval request")
    may_decide = tenant_owner_may_decide(approval=approval, user_id=request.user.pk)
    form = ApprovalDecisionForm(request.POST if request.method == "POST" else None)
    if request.method == "POST":
        if not may_decide:
            return render(request, "tenant/approval_forbidden.html", {"section": "approvals"}, status=403)
        if form.is_valid():
            approve = form.cleaned_data["decision"] == "approve"
            if approval_decide_as_tenant_owner(
                approval=approval, user=request.user, approve=approve, reason=form.cleaned_data["reason"]
            ):
                messages.success(request, f"{'Approved' if approve else 'Denied'}: {approval.tool_id}.")
            else:
                messages.info(request, "Nothing was decided: the request is no longer pending, or it has expired.")
            return redirect("web:approval-detail", approval_id=approval.pk)
    now = timezone.now()
    return render(
        request,
        "tenant/approval_detail.html",
        {
            "section": "approvals",
            "approval": approval,
            "status": approval.status_at(now),
            "args": approval_args_view(approval),
            "connection": connection_label(tenant_id=request.tenant.pk, connection_id=approval.connection_id),
            "can_decide": may_decide and approval.status_at(now) == "pending",
            "form": form,
        },
        status=400 if request.method == "POST" else 200,
    )


@tenant_member_required
@never_cache
@require_http_methods(["GET", "POST"])
def webhook(request: HttpRequest) -> HttpResponse:
    """The tenant's approval webhook: members look, owners set it (the secret is shown once) or remove it."""
    is_owner = request.tenant_role == TenantMembership.Role.OWNER
    form = WebhookForm(request.POST if request.method == "POST" and "url" in request.POST else None)
    context = {"section": "approvals", "is_owner": is_owner, "form": form}
    if request.method == "POST":
        if not is_owner:
            return render(request, "tenant/webhook_forbidden.html", {"section": "approvals"}, status=403)
        if "remove" in request.POST:
            if webhook_remove(tenant=request.tenant):
                messages.success(request, "Webhook removed: no more approval events are sent.")
            return redirect("web:webhook")
        if form.is_valid():
            try:
                secret = webhook_set(tenant=request.tenant, url=form.cleaned_data["url"], user=request.user)
            except AppError as error:
                add_app_error_to_form(form, error, field="url")
            else:
                return render(
                    request, "tenant/webhook_secret.html", {"section": "approvals", "secret": secret}, status=201
                )
    webhook_row, deliveries = webhook_of_tenant(tenant_id=request.tenant.pk)
    context.update(webhook=webhook_row, deliveries=deliveries)
    return render(request, "tenant/webhook.html", context, status=400 if form.errors else 200)


# --- service accounts --------------------------------------------------------------------


@tenant_member_required
@require_GET
def service_accounts(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "tenant/service_account_list.html",
        {"section": "service-accounts", "accounts": service_account_list(tenant_id=request.tenant.pk)},
    )


def _owners_only(request: HttpRequest) -> HttpResponse | None:
    """The 403 page for a plain member, None for an owner.

    A service account's key can hold more than any member may do in the portal
    (every call record of the tenant, every connection and grant over REST), so
    only owners create, scope and revoke accounts; members see the list.
    """
    if request.tenant_role == TenantMembership.Role.OWNER:
        return None
    return render(request, "tenant/owner_only.html", {"section": "service-accounts"}, status=403)


@tenant_member_required
@never_cache
@require_http_methods(["GET", "POST"])
def service_account_new(request: HttpRequest) -> HttpResponse:
    """Create an account; its key goes straight into this response and nowhere else (no session, no message)."""
    refused = _owners_only(request)
    if refused is not None:
        return refused
    form = ServiceAccountForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            account, key = service_account_create(
                tenant=request.tenant,
                name=form.cleaned_data["name"],
                scopes=form.cleaned_data["scopes"],
                created_by=request.user,
            )
        except AppError as error:
            add_app_error_to_form(form, error)
        else:
            return render(
                request,
                "tenant/service_account_created.html",
                {"section": "service-accounts", "account": account, "key": key},
                status=201,
            )
    return render(request, "tenant/service_account_form.html", {"section": "service-accounts", "form": form})


@tenant_member_required
@require_http_methods(["GET", "POST"])
def service_account_revoke_confirm(request: HttpRequest, account_id: UUID) -> HttpResponse:
    account = service_account_get(tenant_id=request.tenant.pk, account_id=account_id)
    if account is None:
        raise Http404("no such service account")
    refused = _owners_only(request)
    if refused is not None:
        return refused
    return revoke_confirm(
        request,
        account,
        revoke=lambda: service_account_revoke(account=account, revoked_by=request.user),
        words=RevokeWords(
            section="service-accounts",
            kind="service account",
            name=account.name,
            consequence="Its API key stops working on the next call. This cannot be undone.",
            revoked=f"Service account “{account.name}” revoked.",
            back_to=reverse("web:service-account-list"),
        ),
        details=lambda: _account_details(account),
    )


def _account_details(account: ServiceAccount) -> list[tuple[str, str]]:
    last_used = timezone.localtime(account.last_used_at).strftime("%Y-%m-%d %H:%M") if account.last_used_at else "never"
    return [("Scopes", ", ".join(account.scopes) or "none"), ("Last used", last_used)]


# --- activity --------------------------------------------------------------------------------


@tenant_member_required
@require_GET
def activity(request: HttpRequest) -> HttpResponse:
    """The tenant's finished calls, filtered and paginated, over a chart of the last 14 days; then its
    resource reads and prompt fetches (`reads_page`), paginated apart, under the outcome and person filters.

    A plain member sees the calls made for nobody and their own; another person's on-behalf
    calls (or calls naming their personal connection) are neither listed nor counted.
    """
    people = tenant_subjects(tenant_id=request.tenant.pk)
    known_tool_ids = tool_ids_known()
    form = ActivityFilterForm(request.GET or None, tool_ids=known_tool_ids, people=people)
    filters = form.filters() if request.GET else NO_FILTERS
    viewer = viewer_of(request)
    page = Paginator(
        invocations_seen_by(tenant_id=request.tenant.pk, viewer=viewer, **filters), ACTIVITY_PAGE_SIZE
    ).get_page(request.GET.get("page"))
    names = dict(people)
    for call in page.object_list:
        call.person = names.get(call.subject_id, call.subject_id)  # a former member: their id
    reads = None
    if not (filters["tool_id"] or filters["run_id"]):  # a read has neither a tool nor a run
        person = None if viewer.is_owner else subject_id_of(viewer.user_id)
        reads = Paginator(
            feature_reads_seen_by(
                tenant_id=request.tenant.pk, person=person, ok=filters["ok"], subject_id=filters["subject_id"]
            ),
            ACTIVITY_PAGE_SIZE,
        ).get_page(request.GET.get("reads_page"))
        for read in reads.object_list:
            read.person = names.get(read.subject_id, read.subject_id)
    days = chart_days(today=timezone.localdate())
    counts = activity_per_day(tenant_id=request.tenant.pk, viewer=viewer, since=days[0], **filters)
    return render(
        request,
        "tenant/activity.html",
        {
            "section": "activity",
            "form": form,
            "page": page,
            "reads": reads,
            "chart": activity_chart(counts=counts, days=days, known_tool_ids=frozenset(known_tool_ids)),
            "chart_days": CHART_DAYS,
            "filtered": filters != NO_FILTERS,
        },
    )


@tenant_member_required
@require_GET
def changes(request: HttpRequest) -> HttpResponse:
    """Who changed this tenant's connections, grants, accounts, policies and approvals. Any member may read it.

    Decisions on approval requests this user may not see are left out, like the requests.
    """
    page = Paginator(
        changes_seen_by(tenant_id=request.tenant.pk, viewer=viewer_of(request)), CHANGES_PAGE_SIZE
    ).get_page(request.GET.get("page"))
    entries = change_entries_named(page.object_list)  # names for the ids they hold, the ids on hover
    return render(request, "tenant/change_list.html", {"section": "changes", "page": page, "entries": entries})
