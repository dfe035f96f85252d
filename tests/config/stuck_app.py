"""A WSGI application for the gunicorn watchdog test: `/` names the worker, `/sleep/<s>` takes that long."""

from __future__ import annotations

import os
import time


def application(environ, start_response):
    path = environ["PATH_INFO"]
    if path.startswith("/sleep/"):
        time.sleep(float(path.removeprefix("/sleep/")))
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [str(os.getpid()).encode()]
