"""What the sign-in pages offer."""

from __future__ import annotations

from django.db.models import QuerySet

from identity_app.models import IdentityProvider


def providers_for_login(*, audience: str) -> QuerySet[IdentityProvider]:
    """The enabled providers a sign-in page shows: admin only the deployment's, the portal tenants' own too."""
    providers = (
        IdentityProvider.objects.filter(is_enabled=True).select_related("tenant").order_by("display_name", "slug")
    )
    if audience == "admin":
        providers = providers.filter(tenant__isnull=True)
    return providers
