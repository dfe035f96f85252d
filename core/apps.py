from django.apps import AppConfig


class CoreConfig(AppConfig):
    """The shared kernel every Toolgate app builds on: errors, API plumbing, crypto, revocable rows (no tables)."""

    name = "core"
    verbose_name = "Core"
