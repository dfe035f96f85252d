from django.apps import AppConfig


class ChangesAppConfig(AppConfig):
    """The governance change log: imported by every domain app, above only the kernel (core)."""

    name = "changes_app"
    verbose_name = "Change log"
