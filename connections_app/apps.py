from django.apps import AppConfig

from connections_app.mcp_tokens import KeyRingTokenVault
from tools_app.upstream.vault import install_token_vault


class ConnectionsAppConfig(AppConfig):
    """Tenant connections to third-party accounts, their credentials and refresh."""

    name = "connections_app"
    verbose_name = "Connections"

    def ready(self) -> None:
        # Imported here: the collector reads models, which exist only once apps are ready.
        from prometheus_client import REGISTRY  # noqa: PLC0415

        from connections_app.metrics import RefreshCounters  # noqa: PLC0415

        REGISTRY.register(RefreshCounters())
        install_token_vault(KeyRingTokenVault())  # MCP servers' operator tokens, sealed like connections
