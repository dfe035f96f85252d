"""The change log's vocabulary, importable before Django's app registry is ready (Celery wiring needs it)."""

from __future__ import annotations

from django.db import models


class Origin(models.TextChoices):
    """Which interface the write came through."""

    ADMIN = "admin", "Admin"
    TENANT_UI = "tenant_ui", "Tenant UI"
    REST = "rest", "REST API"
    COMMAND = "command", "Command"
    TASK = "task", "Task"


class ActorKind(models.TextChoices):
    """Who made the write: a Django user, a service account's API key, or a process."""

    USER = "user", "User"
    SERVICE_ACCOUNT = "service_account", "Service account"
    COMMAND = "command", "Command (OS user)"
    TASK = "task", "Task"
