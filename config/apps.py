"""The project's own app config: registers the deployment checks (config/checks.py)."""

from __future__ import annotations

from django.apps import AppConfig
from django.core import checks

from config.checks import static_files_collected


class ToolgateConfig(AppConfig):
    name = "config"
    label = "toolgate"
    verbose_name = "Toolgate"

    def ready(self) -> None:
        checks.register(static_files_collected, checks.Tags.staticfiles, deploy=True)
