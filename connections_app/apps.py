from django.apps import AppConfig


class ConnectionsAppConfig(AppConfig):
    """Tenant connections to third-party accounts, their credentials, refresh and execution grants."""

    name = "connections_app"
    verbose_name = "Connections"

    def ready(self) -> None:
        # Model-importing modules load once the app registry is ready, hence here and not above.
        from connections_app.models import Connection, ExecutionGrant  # noqa: PLC0415
        from connections_app.selectors import CONNECTION_ROW, connection_label  # noqa: PLC0415
        from connections_app.tasks import approval_webhook_listener  # noqa: PLC0415
        from policies_app.connection_labels import install_connection_label  # noqa: PLC0415
        from policies_app.services import approval_listener_add  # noqa: PLC0415
        from policies_app.signals import cache_rows, govern  # noqa: PLC0415

        # Grants are governance: a grant or its connections changing reaches every process's cache.
        govern(ExecutionGrant)
        govern(ExecutionGrant.connections.through)
        # The broker caches connection rows one by one: a saved row (admin, OAuth re-authorisation) is
        # forgotten everywhere; the services that write with UPDATE (revoke, refresh, resume) say so themselves.
        cache_rows(Connection, kind=CONNECTION_ROW)

        approval_listener_add(approval_webhook_listener)  # tenants' webhooks hear of approvals
        install_connection_label(connection_label)  # the approvals admin names a call's connection
