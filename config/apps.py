"""The project's own app config: the deployment checks (config/checks.py) and the folders development needs."""

from __future__ import annotations

from pathlib import Path

from django.apps import AppConfig
from django.conf import settings
from django.core import checks

from config.checks import static_files_collected


class ToolgateConfig(AppConfig):
    name = "config"
    label = "toolgate"
    verbose_name = "Toolgate"

    def ready(self) -> None:
        checks.register(static_files_collected, checks.Tags.staticfiles, deploy=True)
        development_folders_made()


def development_folders_made() -> None:
    """Make the folders the embedded default writes to, once settings are loaded (never at their import).

    In development whitenoise looks at STATIC_ROOT (and warns on every request
    while it is missing); production fills it with collectstatic. The embedded
    Celery broker keeps its messages in folders that kombu does not create.
    """
    if settings.DEBUG:
        Path(settings.STATIC_ROOT).mkdir(parents=True, exist_ok=True)
    if settings.CELERY_BROKER_URL.startswith("filesystem://"):
        options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
        for folder in {options["data_folder_in"], options["data_folder_out"], options["control_folder"]}:
            Path(folder).mkdir(parents=True, exist_ok=True)
