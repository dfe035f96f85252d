from django.apps import AppConfig


class ConnectionsAppConfig(AppConfig):
    """Tenant connections to third-party accounts, their credentials and refresh."""

    name = "connections_app"
    verbose_name = "Connections"
