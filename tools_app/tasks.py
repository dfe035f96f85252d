"""tools_app's Celery tasks (found by Celery's autodiscovery under this name)."""

from tools_app.upstream.tasks import discover_server

__all__ = ["discover_server"]
