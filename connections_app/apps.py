from django.apps import AppConfig

from connections_app.mcp_tokens import KeyRingTokenVault
from tools_app.upstream.vault import install_token_vault


class ConnectionsAppConfig(AppConfig):
    """Tenant connections to third-party accounts, their credentials and refresh."""

    name = "connections_app"
    verbose_name = "Connections"

    def ready(self) -> None:
        install_token_vault(KeyRingTokenVault())  # MCP servers' operator tokens, sealed like connections
