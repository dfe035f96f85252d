"""Deployment checks of the web process: what would otherwise fail on every page, refused at start.

With DEBUG=False the pages name their static files through whitenoise's
manifest (collectstatic writes it); without it every admin or portal page is a
500. `manage.py check --deploy` reports it, and the WSGI entry point refuses to
start, so gunicorn's log says what to run instead of serving errors.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.staticfiles.storage import staticfiles_storage
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

STATIC_NOT_COLLECTED = "toolgate.E001"


def missing_static_manifest() -> str | None:
    """The manifest the static storage needs and does not find, or None."""
    manifest_name = getattr(staticfiles_storage, "manifest_name", None)
    if manifest_name is None or staticfiles_storage.exists(manifest_name):
        return None
    return str(staticfiles_storage.path(manifest_name))


def _not_collected_message(manifest: str) -> str:
    return (
        f"DEBUG=False but the static files were not collected ({manifest} is missing): "
        "run `python manage.py collectstatic --noinput` before starting the web server"
    )


def static_files_collected(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    manifest = missing_static_manifest()
    if manifest is None:
        return []
    return [checks.Error(_not_collected_message(manifest), id=STATIC_NOT_COLLECTED)]


def require_collected_static() -> None:
    """Refuse to serve in production mode without the static manifest (called by the WSGI entry point)."""
    if settings.DEBUG:
        return
    manifest = missing_static_manifest()
    if manifest is not None:
        raise ImproperlyConfigured(_not_collected_message(manifest))
