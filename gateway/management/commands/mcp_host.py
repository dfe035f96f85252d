"""manage.py mcp_host: run the stdio MCP servers and serve them to workers (beside web, worker, beat)."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from gateway.host.serve import (
    bind_address,
    build_host,
    host_config,
    protect_host_process,
    uvicorn_server,
)


class Command(BaseCommand):
    help = (
        "Run Toolgate's MCP host: it starts each registered stdio MCP server as a child (scrubbed environment, "
        "resource limits, bubblewrap with no network but the hosts an operator allowed; without a sandbox only "
        "--trusted-unsandboxed servers when DEBUG=False) and serves it on TOOLGATE_MCP_HOST_URL to web and workers."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--bind", default="", help="ADDRESS:PORT to listen on (default: the host and port of TOOLGATE_MCP_HOST_URL)"
        )

    def handle(self, *args: object, **options: object) -> None:
        if not settings.DEBUG and settings.USING_DEV_MCP_HOST_TOKEN:
            raise CommandError("DEBUG=False: set TOOLGATE_MCP_HOST_TOKEN (the web and worker processes need it too)")
        address, port = bind_address(settings.TOOLGATE_MCP_HOST_URL)
        if options["bind"]:
            address, _, port_text = str(options["bind"]).rpartition(":")
            if not address or not port_text.isdigit():
                raise CommandError("--bind takes ADDRESS:PORT")
            port = int(port_text)
        if not protect_host_process():
            self.stderr.write("could not make the host's process non-dumpable: its environment stays readable")
        try:
            config = host_config()
            host = build_host(config)
        except Exception as exc:  # ImproperlyConfigured and friends: one line, no traceback
            raise CommandError(str(exc)) from None
        if config.bwrap:
            sandbox = "bubblewrap, no network but their --allow-host names"
        elif config.require_sandbox:
            sandbox = (
                f"REFUSED without a sandbox ({config.no_sandbox_reason}): only servers added with "
                "--trusted-unsandboxed start; install bubblewrap (apt-get install bubblewrap)"
            )
        else:
            sandbox = f"no sandbox ({config.no_sandbox_reason}); they run with the host's network and files"
        self.stdout.write(f"mcp host on {address}:{port}; children: {sandbox}, at most {config.max_children}")
        uvicorn_server(host, address=address, port=port).run()
