from django.apps import AppConfig


class PoliciesAppConfig(AppConfig):
    """Tenants, service accounts, tool policies and execution grants."""

    name = "policies_app"
    verbose_name = "Policies"
