"""WSGI entry point (gunicorn sync workers in production, see docs/operating.md)."""

import os

from django.core.wsgi import get_wsgi_application

from config.checks import require_collected_static
from config.tracing import tracing_configure

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
tracing_configure()  # before the application loads its middleware; nothing unless OTEL_* asks for it
application = get_wsgi_application()
require_collected_static()  # DEBUG=False without collectstatic: refuse to start rather than 500 on every page
