"""Helpers shared by policies_app's management commands (interfaces only: no rules here)."""

from __future__ import annotations

from django.core.management.base import CommandError

from policies_app.models import Tenant


def tenant_or_error(slug: str) -> Tenant:
    """The tenant named on the command line, or a CommandError that names it."""
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        raise CommandError(f"no tenant {slug!r} (create it with: manage.py create_tenant {slug})")
    return tenant
