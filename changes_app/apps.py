from django.apps import AppConfig


class ChangesAppConfig(AppConfig):
    """The governance change log: the lowest app, imported by every domain app and importing none."""

    name = "changes_app"
    verbose_name = "Change log"
