"""Which tenant a web-UI request acts for.

The session remembers the tenant a user last chose, but only as a preference:
every request re-reads the user's memberships and falls back to their first
tenant when the remembered one is no longer theirs. Views never read a tenant
id from the request itself; they get `request.tenant` from `tenant_member_required`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from connections_app.selectors import Viewer
from policies_app.models import Tenant, TenantMembership

SESSION_KEY = "toolgate_tenant_id"


@dataclass(frozen=True, slots=True)
class CurrentTenant:
    """The tenant a request acts for, the user's role in it, and every tenant they may switch to."""

    tenant: Tenant
    role: str
    memberships: list[TenantMembership]


def memberships_of(user: Any) -> list[TenantMembership]:
    """The user's memberships with their tenants, in the order the switcher lists them (one query)."""
    return list(
        TenantMembership.objects.filter(user=user).select_related("tenant").order_by("tenant__name", "tenant__slug")
    )


def tenant_current(request: HttpRequest) -> CurrentTenant | None:
    """The remembered tenant if the user is still a member of it, else their first; None without membership."""
    memberships = memberships_of(request.user)
    if not memberships:
        return None
    remembered = request.session.get(SESSION_KEY)
    chosen = next((m for m in memberships if m.tenant_id == remembered), memberships[0])
    if remembered != chosen.tenant_id:
        request.session[SESSION_KEY] = chosen.tenant_id
    return CurrentTenant(tenant=chosen.tenant, role=chosen.role, memberships=memberships)


def tenant_switch(request: HttpRequest, tenant_id: object) -> bool:
    """Remember `tenant_id` for this session if the user is a member of it; False (nothing changed) if not."""
    member_of = {membership.tenant_id for membership in memberships_of(request.user)}
    chosen = next((tenant for tenant in member_of if str(tenant) == str(tenant_id)), None)
    if chosen is None:
        return False
    request.session[SESSION_KEY] = chosen
    return True


def tenant_member_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Log in, resolve the current tenant onto the request, and answer 403/404 pages in the UI's frame.

    A logged-in user without any membership gets a friendly 403 page rather than
    an empty UI. An Http404 raised by the view (another tenant's id, a malformed
    one) renders the same not-found page whatever the reason, so ids cannot be probed.
    """

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        current = tenant_current(request)
        if current is None:
            return render(request, "tenant/no_tenant.html", status=403)
        request.tenant = current.tenant
        request.tenant_role = current.role
        request.tenant_memberships = current.memberships
        try:
            return view(request, *args, **kwargs)
        except Http404:
            return render(request, "tenant/not_found.html", status=404)

    return login_required(wrapped)


def visible_to(request: HttpRequest) -> int | None:
    """Whose personal connections this user sees: an owner sees every row (None), a member only their own."""
    return None if request.tenant_role == TenantMembership.Role.OWNER else request.user.pk


def viewer_of(request: HttpRequest) -> Viewer:
    """Who looks at the tenant's calls (approvals, activity): this user, as an owner or a plain member."""
    return Viewer(user_id=request.user.pk, is_owner=request.tenant_role == TenantMembership.Role.OWNER)
