from django.apps import AppConfig


class GatewayConfig(AppConfig):
    """The MCP gateway: the `/mcp` server, upstream MCP servers and the stdio host's settings."""

    name = "gateway"
    verbose_name = "MCP gateway"

    def ready(self) -> None:
        # Model-importing modules load once the app registry is ready, hence here and not above.
        from gateway.upstream.feature_audit import FEATURE_READS  # noqa: PLC0415
        from gateway.upstream.selectors import mcp_server_providers, mcp_server_tool_id_prefixes  # noqa: PLC0415
        from gateway.upstream.services import mcp_tools_enable_check  # noqa: PLC0415
        from policies_app.catalog import install_server_prefixes  # noqa: PLC0415
        from tools_app.audit_kinds import install_audit_kind  # noqa: PLC0415
        from tools_app.sources import install_tool_sources  # noqa: PLC0415

        install_server_prefixes(mcp_server_tool_id_prefixes)  # what a policy's `mcp__<server>__*` may name
        install_tool_sources(providers=mcp_server_providers, enable_problems=mcp_tools_enable_check)
        install_audit_kind(FEATURE_READS)  # `audit export --kind feature-reads`, pruned with the invocations
