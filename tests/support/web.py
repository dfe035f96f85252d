"""Helpers shared by the tenant web UI tests (Django test client and browser)."""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.test import Client

from policies_app.models import Tenant, TenantMembership
from tests.factories import MembershipFactory, UserFactory
from tools_app.models import ToolInvocation

# What the CSP middleware must send on every UI page (settings.CONTENT_SECURITY_POLICY).
CSP_REQUIRED = ("default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'")


def member_client(tenant: Tenant, *, user: AbstractBaseUser | None = None) -> tuple[Client, AbstractBaseUser]:
    """A client logged in as a member of `tenant` (a new user unless one is given)."""
    user = user or UserFactory()
    if not TenantMembership.objects.filter(user=user, tenant=tenant).exists():
        MembershipFactory(user=user, tenant=tenant)
    client = Client()
    client.force_login(user)
    return client, user


def csp_of(response) -> str:
    return response.headers.get("Content-Security-Policy", "")


def invocation(tenant: Tenant, tool_id: str, started_at: datetime, *, ok: bool = True, **fields) -> ToolInvocation:
    """A finished audit row, as the pipeline would have written it."""
    return ToolInvocation.objects.create(
        tenant=tenant,
        tool_id=tool_id,
        tool_call_id=fields.pop("tool_call_id", f"call-{ToolInvocation.objects.count() + 1}"),
        decision="allow" if ok else "deny",
        ok=ok,
        executed=ok,
        error_code="" if ok else "policy_denied",
        started_at=started_at,
        ended_at=started_at,
        duration_ms=3,
        **fields,
    )
