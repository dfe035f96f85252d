from django.apps import AppConfig

from tools_app.registry import code_registry


class ToolsAppConfig(AppConfig):
    """Tool modules, the code registry, the Tool catalog and the audit log."""

    name = "tools_app"
    verbose_name = "Tools"

    def ready(self) -> None:
        code_registry()  # an id collision or a bad schema stops startup here
