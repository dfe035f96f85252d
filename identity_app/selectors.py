"""What the sign-in pages offer."""

from __future__ import annotations

from django.db.models import Count, QuerySet

from identity_app.models import IdentityProvider


def providers_for_login(*, audience: str) -> QuerySet[IdentityProvider]:
    """The enabled providers a sign-in page shows: admin only the deployment's, the portal tenants' own too."""
    providers = (
        IdentityProvider.objects.filter(is_enabled=True).select_related("tenant").order_by("display_name", "slug")
    )
    if audience == "admin":
        providers = providers.filter(tenant__isnull=True)
    return providers


def identity_providers_to_rewrap(*, primary_key_id: str, after: str | None, limit: int) -> list[IdentityProvider]:
    """The next batch of providers whose client secret is not under the primary key, by slug after `after`."""
    rows = IdentityProvider.objects.exclude(encryption_key_id=primary_key_id)
    if after is not None:
        rows = rows.filter(slug__gt=after)
    return list(rows.order_by("slug")[:limit])


def identity_provider_key_usage() -> dict[str, int]:
    """How many identity providers' client secrets each key id encrypts (for rotation reports)."""
    rows = IdentityProvider.objects.order_by("encryption_key_id").values_list("encryption_key_id")
    return dict(rows.annotate(n=Count("pk")))
