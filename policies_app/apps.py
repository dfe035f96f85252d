from django.apps import AppConfig


class PoliciesAppConfig(AppConfig):
    """Tenants, service accounts, tool policies, approvals, delegations and the governance cache."""

    name = "policies_app"
    verbose_name = "Policies"

    def ready(self) -> None:
        from policies_app import signals  # noqa: PLC0415 - models must be loaded before receivers connect

        signals.connect()
