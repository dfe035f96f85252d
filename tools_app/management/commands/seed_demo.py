"""manage.py seed_demo: the demo tenant, its people, an agent's API key and a policy (make run)."""

from __future__ import annotations

import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from celery import current_app
from django.conf import settings
from django.core.management.base import BaseCommand

from core.errors import command_errors
from tools_app.demo import DemoSeed, demo_seed

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
READY_TIMEOUT_S = 180.0
RULE = "=" * 78


class Command(BaseCommand):
    help = (
        "Seed the demo (idempotent) and print how to use it: admin and web-UI logins, the API key, a curl. "
        "Credentials live in a local 0600 file so every run prints the same ones."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--credentials-file",
            type=Path,
            default=None,
            help="where the demo's clear credentials are kept (default: var/demo_credentials.json)",
        )
        parser.add_argument(
            "--base-url", default=DEFAULT_BASE_URL, help=f"printed URLs start here ({DEFAULT_BASE_URL})"
        )
        parser.add_argument(
            "--when-ready",
            action="store_true",
            help=(
                "wait until the web server at --base-url answers /readyz and a Celery worker answers a ping, "
                "print the summary, then stay until interrupted (make run's last lines, Procfile.dev)"
            ),
        )

    def handle(
        self, *args, credentials_file: Path | None, base_url: str, when_ready: bool, verbosity: int, **options
    ) -> None:
        path = credentials_file or settings.VAR_DIR / "demo_credentials.json"
        base = base_url.rstrip("/")
        if when_ready:
            _services_awaited(base_url=base, timeout=READY_TIMEOUT_S)
        with command_errors():  # the seed's refusals say what to do
            demo = demo_seed(credentials_file=path)
        if verbosity >= 1:
            for change in demo.changes:
                self.stdout.write(change)
            if not demo.changes and not when_ready:
                self.stdout.write("demo already seeded; nothing created")
            self.stdout.write("\n".join(self._summary(demo, base=base, path=path, ready=when_ready)))
        if when_ready:
            _stay_until_stopped()

    def _summary(self, demo: DemoSeed, *, base: str, path: Path, ready: bool) -> list[str]:
        """Framed, so it stands out at the end of `make run`'s output; the curl runs as pasted."""
        curl = (
            f'curl -s -X POST {base}/api/v1/tools/exec -H "Authorization: Bearer {demo.api_key}" '
            '-H "Content-Type: application/json" '
            '-d \'{"tool_id": "core__get_current_time", "args": {"timezone": "UTC"}}\''
        )
        title = f"Toolgate demo{' is ready' if ready else ''} (tenant {demo.tenant_slug}); credentials kept in {path}"
        return [
            *([] if ready else [""]),
            RULE,
            self.style.SUCCESS(title),
            f"  admin:        {base}/admin/",
            f"                user {demo.operator_username}  password {demo.operator_password}",
            f"  tenant UI:    {base}/accounts/login/",
            f"                user {demo.user_username}  password {demo.user_password}",
            f"  API key of {demo.tenant_slug}/{demo.service_account}:",
            f"                {demo.api_key}",
            "  try it:",
            f"  {curl}",
            f"  MCP:          {base}/mcp  (this API key as the bearer, or add the URL alone to an MCP client",
            f"                that signs in, and log in as {demo.user_username})",
            RULE,
        ]


def _services_awaited(*, base_url: str, timeout: float) -> None:
    """Until the web server answers /readyz with 200 and a Celery worker answers a ping (or `timeout`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not _web_ready(base_url):
        time.sleep(0.5)
    while time.monotonic() < deadline and not current_app.control.ping(timeout=1.0):
        time.sleep(0.5)


def _web_ready(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/readyz", timeout=2) as response:  # noqa: S310 (our own server)
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _stay_until_stopped() -> None:
    """honcho stops every process once one exits: the summary's process waits for Ctrl-C or SIGTERM, quietly."""
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    stopped.wait()
