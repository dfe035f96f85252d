"""manage.py seed_demo: the demo tenant, its people, an agent's API key and a policy (make run)."""

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from policies_app.errors import command_errors
from tools_app.demo import demo_seed

DEFAULT_BASE_URL = "http://127.0.0.1:8000"


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

    def handle(self, *args, credentials_file: Path | None, base_url: str, **options) -> None:
        path = credentials_file or settings.VAR_DIR / "demo_credentials.json"
        with command_errors():  # the seed's refusals say what to do
            demo = demo_seed(credentials_file=path)
        base = base_url.rstrip("/")
        for change in demo.changes:
            self.stdout.write(change)
        if not demo.changes:
            self.stdout.write("demo already seeded; nothing created")
        curl = (
            f'curl -s -X POST {base}/api/v1/tools/exec -H "Authorization: Bearer {demo.api_key}" '
            '-H "Content-Type: application/json" '
            '-d \'{"tool_id": "core__get_current_time", "args": {"timezone": "UTC"}}\''
        )
        self.stdout.write(
            "\n".join(
                [
                    "",
                    self.style.SUCCESS(f"Toolgate demo (tenant {demo.tenant_slug}); credentials kept in {path}"),
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
                    "",
                ]
            )
        )
