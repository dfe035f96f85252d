"""manage.py mcp_server add|list|remove|discover|approve: upstream MCP servers for operators' runbooks."""

from __future__ import annotations

import os

from django.core.management.base import BaseCommand, CommandError, CommandParser

from policies_app.errors import command_errors
from tools_app.upstream.definitions import safe_label
from tools_app.upstream.models import McpServer, McpTool
from tools_app.upstream.services import (
    DiscoveryFailed,
    mcp_server_discover,
    mcp_server_register,
    mcp_server_remove,
    mcp_tools_approve,
)


class Command(BaseCommand):
    help = (
        "Register (add), list, remove and discover upstream MCP servers. Discovered tools arrive disabled "
        "and pending review; an operator approves each definition (approve, admin, or policy import with its "
        "schema_hash)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(dest="action", required=True)
        add = commands.add_parser("add", help="register or update a server (upsert by SLUG)")
        add.add_argument("slug")
        add.add_argument("--url", required=True)
        add.add_argument("--provider", default="", help="tools need a tenant connection of this provider")
        add.add_argument(
            "--secret-env", default="", help="name of an environment variable holding the operator's bearer token"
        )
        add.add_argument("--discover-seconds", type=int, default=300)
        commands.add_parser("list", help="one line per server")
        remove = commands.add_parser("remove", help="mark a server and its tools removed")
        remove.add_argument("slug")
        discover = commands.add_parser("discover", help="list the servers' tools now (all servers by default)")
        discover.add_argument("slugs", nargs="*")
        approve = commands.add_parser(
            "approve",
            help="approve tools' live definitions and confirm their effects (all pending and drifted by default)",
            description=(
                "Pins each tool's live definition and confirms the effect its hints suggest (an effect an operator "
                "set stays); prints each tool's id, upstream name, effect and schema hash (what policy export "
                "writes). All or nothing. Callers still need a policy that allows the tool ids."
            ),
        )
        approve.add_argument("slug")
        approve.add_argument("tools", nargs="*", metavar="TOOL", help="upstream name or tool id (default: all pending)")
        approve.add_argument("--enable", action="store_true", help="also switch the tools on")

    def handle(self, *args: str, **options: object) -> None:
        action = options["action"]
        if action == "add":
            self._add(options)
        elif action == "list":
            self._list()
        elif action == "remove":
            self._remove(str(options["slug"]))
        elif action == "approve":
            names = [str(tool) for tool in options["tools"]]  # type: ignore[attr-defined]
            self._approve(str(options["slug"]), names, enable=bool(options["enable"]))
        else:
            self._discover([str(slug) for slug in options["slugs"]])  # type: ignore[attr-defined]

    def _add(self, options: dict) -> None:
        token = None
        variable = options["secret_env"]
        if variable:
            token = os.environ.get(variable, "")
            if not token:
                raise CommandError(f"the environment variable {variable} is not set or empty")
        with command_errors(f"mcp server {options['slug']!r}: "):
            server, created = mcp_server_register(
                slug=options["slug"],
                url=options["url"],
                provider=options["provider"],
                operator_token=token,
                discover_seconds=options["discover_seconds"],
            )
        action = "registered" if created else "updated"
        token_note = ", operator token stored encrypted" if server.has_operator_token else ""
        provider_note = f", tools need a {server.provider} connection" if server.provider else ""
        self.stdout.write(
            self.style.SUCCESS(
                f"{action} MCP server {server.slug} ({server.url}{provider_note}{token_note}); "
                f"run `manage.py mcp_server discover {server.slug}` to list its tools"
            )
        )

    def _list(self) -> None:
        for server in McpServer.objects.order_by("slug"):
            counts = dict.fromkeys(McpTool.Status.values, 0)
            for status in McpTool.objects.filter(server=server).values_list("status", flat=True):
                counts[status] += 1
            state = "removed" if server.removed_at else ("enabled" if server.enabled else "disabled")
            tools = " ".join(f"{status}={count}" for status, count in counts.items())
            last = server.last_discovery_at.isoformat() if server.last_discovery_at else "never"
            error = f" error={server.last_discovery_error!r}" if server.last_discovery_error else ""
            self.stdout.write(
                f"{server.slug} {state} {server.url} provider={server.provider or '-'} "
                f"every={server.discover_seconds}s last={last} status={server.last_discovery_status} {tools}{error}"
            )

    def _remove(self, slug: str) -> None:
        with command_errors():
            server = mcp_server_remove(slug=slug)
        self.stdout.write(self.style.SUCCESS(f"removed MCP server {server.slug}; its tools are marked removed"))

    def _discover(self, slugs: list[str]) -> None:
        servers = McpServer.objects.filter(removed_at__isnull=True, enabled=True).order_by("slug")
        if slugs:
            servers = McpServer.objects.filter(slug__in=slugs).order_by("slug")
            unknown = sorted(set(slugs) - {server.slug for server in servers})
            if unknown:
                raise CommandError(f"no MCP server {', '.join(unknown)}")
        failed = []
        for server in servers:
            try:
                report = mcp_server_discover(server_id=server.pk)
            except DiscoveryFailed as failure:
                failed.append(failure.slug)
                self.stdout.write(f"{failure.slug}: FAILED: {failure.safe_message}")
                continue
            self.stdout.write(report.summary())
        if failed:
            raise CommandError(f"could not list: {', '.join(failed)}")

    def _approve(self, slug: str, names: list[str], *, enable: bool) -> None:
        server = McpServer.objects.filter(slug=slug).first()
        if server is None:
            raise CommandError(f"no MCP server {slug}")
        tools = McpTool.objects.filter(server=server)
        if names:
            by_name = {tool.upstream_name: tool.tool_id for tool in tools}
            by_name |= {tool.tool_id: tool.tool_id for tool in tools}
            unknown = [name for name in names if name not in by_name]
            if unknown:
                raise CommandError(f"{slug} has no tool {', '.join(unknown)}")
            tool_ids = sorted({by_name[name] for name in names})
        else:
            pending = (McpTool.Status.PENDING, McpTool.Status.DRIFTED)
            tool_ids = sorted(tools.filter(status__in=pending).values_list("tool_id", flat=True))
            if not tool_ids:
                self.stdout.write(f"{slug}: no tool awaits approval")
                return
        with command_errors(f"mcp server {slug!r}: "):
            previews = mcp_tools_approve(expected=dict.fromkeys(tool_ids), enable=enable, via="mcp_server approve")
        for preview in previews:
            self.stdout.write(
                f"{preview.tool.tool_id} name={safe_label(preview.tool.upstream_name)} effect={preview.effect.value} "
                f"schema_hash={preview.schema_hash}"
            )
        state = "approved and enabled" if enable else "approved (still disabled: add --enable or use admin)"
        self.stdout.write(
            self.style.SUCCESS(f"{slug}: {len(previews)} tool(s) {state}; callers need a policy that allows these ids")
        )
