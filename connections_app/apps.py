from django.apps import AppConfig

from connections_app.mcp_tokens import KeyRingArgsVault, KeyRingTokenVault
from policies_app.approval_args import install_args_vault
from tools_app.upstream.host.connections import install_connection_check
from tools_app.upstream.vault import install_token_vault


class ConnectionsAppConfig(AppConfig):
    """Tenant connections to third-party accounts, their credentials, refresh and execution grants."""

    name = "connections_app"
    verbose_name = "Connections"

    def ready(self) -> None:
        # Model-importing modules load once the app registry is ready, hence here and not above.
        from connections_app.models import Connection, ExecutionGrant  # noqa: PLC0415
        from connections_app.selectors import connection_ids_usable  # noqa: PLC0415
        from connections_app.tasks import approval_webhook_listener  # noqa: PLC0415
        from policies_app.services import approval_listener_add  # noqa: PLC0415
        from policies_app.signals import govern  # noqa: PLC0415

        # Grants are governance: a grant or its connections changing reaches every process's cache.
        govern(ExecutionGrant)
        govern(ExecutionGrant.connections.through)
        # The broker caches connection rows too: a saved row (admin, OAuth re-authorisation) bumps the
        # generation; the services that write with UPDATE (revoke, refresh, resume) bump it themselves.
        govern(Connection)

        install_token_vault(KeyRingTokenVault())  # MCP servers' operator tokens, sealed like connections
        install_args_vault(KeyRingArgsVault())  # the call args kept for approvers while a request is pending
        approval_listener_add(approval_webhook_listener)  # tenants' webhooks hear of approvals
        install_connection_check(connection_ids_usable)  # the MCP host stops revoked connections' children
