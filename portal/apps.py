from django.apps import AppConfig


class PortalConfig(AppConfig):
    """The tenant web UI: the pages a tenant's people use (no models of its own)."""

    name = "portal"
    verbose_name = "Tenant portal"
