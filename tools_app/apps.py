from django.apps import AppConfig

from policies_app.catalog import install_tool_catalog
from tools_app.registry import code_registry


class ToolsAppConfig(AppConfig):
    """Tool modules, the code registry, the Tool catalog, toolsets, search and the audit log."""

    name = "tools_app"
    verbose_name = "Tools"

    def ready(self) -> None:
        code_registry()  # an id collision or a bad schema stops startup here
        # Model-importing modules load once the app registry is ready, hence here and not above.
        from policies_app.signals import govern  # noqa: PLC0415
        from tools_app.models import Tool, Toolset  # noqa: PLC0415
        from tools_app.selectors import enabled_tool_ids, tool_ids_known  # noqa: PLC0415

        govern(Tool)  # a kill switch is a governance change: every process's cache drops on the next call
        govern(Toolset)  # an edit made anywhere (admin, shell) narrows the next call
        install_tool_catalog(known=tool_ids_known, enabled=enabled_tool_ids)  # the policy admin's choices
