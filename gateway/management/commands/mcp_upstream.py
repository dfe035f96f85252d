"""manage.py mcp_upstream add|list|remove|discover|approve|approve-features: upstream MCP servers, for runbooks."""

from __future__ import annotations

import os
import shlex

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import command_errors
from gateway.host.environment import is_toolgate_name
from gateway.host.sandbox import parse_bind
from gateway.upstream.definitions import safe_label
from gateway.upstream.feature_services import mcp_features_approve
from gateway.upstream.models import McpFeature, McpServer, McpTool
from gateway.upstream.services import (
    DiscoveryFailed,
    mcp_server_check,
    mcp_server_discover,
    mcp_server_install_package,
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
        add.add_argument("--url", default="", help="the server's streamable-HTTP endpoint")
        add.add_argument(
            "--command",
            default="",
            help="a stdio server: PROGRAM ARG... (split like a shell's, never run through one), run by the MCP host",
        )
        add.add_argument("--provider", default="", help="tools need a tenant connection of this provider")
        add.add_argument(
            "--secret-env",
            action="append",
            default=[],
            help="HTTP: VAR, the environment variable holding the operator's bearer token; stdio (repeatable): "
            "NAME=VAR hands the value of this command's VAR to the child as NAME (a bare VAR keeps its name)",
        )
        add.add_argument(
            "--env", action="append", default=[], help="stdio (repeatable): NAME=VALUE in the child's environment"
        )
        add.add_argument(
            "--credential-env", default="", help="stdio with --provider: the child's variable for the connection secret"
        )
        add.add_argument(
            "--allow-host",
            action="append",
            default=[],
            metavar="HOST:PORT",
            help="stdio (repeatable): a host the child may reach through the MCP host's egress proxy "
            "(default: no network at all); loopback and private addresses stay refused",
        )
        add.add_argument(
            "--trusted-unsandboxed",
            action="store_true",
            help="stdio: may run without bubblewrap when DEBUG=False (it then has the host's network and files)",
        )
        add.add_argument(
            "--npm",
            default="",
            metavar="PACKAGE@VERSION",
            help="stdio: install this exact npm package version now, into the MCP host's packages/SLUG/ (run this "
            "where the host's TOOLGATE_MCP_HOST_DIR is); its programs come first on the child's PATH, and "
            "--command defaults to its one program",
        )
        add.add_argument(
            "--pip",
            default="",
            metavar="PACKAGE==VERSION",
            help="stdio: like --npm for a Python package (wheels only), in a virtualenv of its own",
        )
        add.add_argument(
            "--bind",
            action="append",
            default=[],
            metavar="HOST_PATH[:SANDBOX_PATH][:ro|rw]",
            help="stdio (repeatable): bind a host folder into the child's sandbox, read-only unless :rw",
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
        features = commands.add_parser(
            "approve-features",
            help="approve resources' and prompts' live definitions (all pending and drifted by default)",
            description=(
                "Pins each resource's and prompt's live definition, all or nothing, and prints its name and "
                "hash. Callers still need a policy whose allowed_resources / allowed_prompts name them."
            ),
        )
        features.add_argument("slug")
        features.add_argument("names", nargs="*", metavar="NAME", help="Toolgate name or upstream URI/name")
        features.add_argument("--enable", action="store_true", help="also switch them on")

    def handle(self, *args: str, **options: object) -> None:
        action = options["action"]
        if action == "add":
            self._add(options)
        elif action == "list":
            self._list()
        elif action == "remove":
            self._remove(str(options["slug"]))
        elif action == "approve-features":
            names = [str(name) for name in options["names"]]  # type: ignore[attr-defined]
            self._approve_features(str(options["slug"]), names, enable=bool(options["enable"]))
        elif action == "approve":
            names = [str(tool) for tool in options["tools"]]  # type: ignore[attr-defined]
            self._approve(str(options["slug"]), names, enable=bool(options["enable"]))
        else:
            self._discover([str(slug) for slug in options["slugs"]])  # type: ignore[attr-defined]

    def _add(self, options: dict) -> None:
        slug = options["slug"]
        if options["url"] and options["command"]:
            raise CommandError("--url and --command exclude each other")
        if options["url"] and (options["npm"] or options["pip"]):
            raise CommandError("--npm and --pip are for stdio servers; an HTTP server has --url")
        if options["command"] or options["npm"] or options["pip"]:
            server, created = self._add_stdio(options)
            where = f"stdio: {shlex.join(server.command)[:200]}"
            if server.npm_package or server.pip_package:
                where += f", npm {server.npm_package}" if server.npm_package else f", pip {server.pip_package}"
            if server.binds:
                where += f", {len(server.binds)} bound folder(s)"
            secret_note = f", secret env {', '.join(server.secret_env_names)} stored encrypted"
            token_note = secret_note if server.secret_env_names else ""
            token_note += f", network: {', '.join(server.allowed_hosts) or 'none'}"
            token_note += ", may run unsandboxed" if server.trusted_unsandboxed else ""
        else:
            server, created = self._add_http(options)
            where = server.url
            token_note = ", operator token stored encrypted" if server.has_operator_token else ""
        if server.is_stdio and server.command[:1] in (["npx"], ["uvx"]):
            self.stdout.write(
                self.style.WARNING(
                    f"{server.command[0]} downloads the package when the child first starts (slowly, and not at all "
                    "without network): prefer --npm PACKAGE@VERSION or --pip PACKAGE==VERSION, installed now and pinned"
                )
            )
        action = "registered" if created else "updated"
        provider_note = f", tools need a {server.provider} connection" if server.provider else ""
        self.stdout.write(
            self.style.SUCCESS(
                f"{action} MCP server {server.slug} ({where}{provider_note}{token_note}); "
                f"run `manage.py mcp_upstream discover {slug}` to list its tools"
            )
        )

    def _add_http(self, options: dict) -> tuple[McpServer, bool]:
        token = None
        variables = options["secret_env"]
        if len(variables) > 1 or any("=" in variable for variable in variables):
            raise CommandError("an HTTP server takes one --secret-env VAR (its bearer token)")
        stdio_only = ("env", "credential_env", "allow_host", "trusted_unsandboxed", "bind")
        if any(options[name] for name in stdio_only):
            raise CommandError(
                "--env, --credential-env, --allow-host, --trusted-unsandboxed and --bind are for stdio servers "
                "(--command)"
            )
        if variables:
            token = _read_env(variables[0])
        with command_errors(f"mcp server {options['slug']!r}: "):
            return mcp_server_register(
                slug=options["slug"],
                url=options["url"],
                provider=options["provider"],
                operator_token=token,
                discover_seconds=options["discover_seconds"],
            )

    def _add_stdio(self, options: dict) -> tuple[McpServer, bool]:
        try:
            command = shlex.split(options["command"])
        except ValueError as exc:
            raise CommandError(f"--command cannot be split like a shell's: {exc}") from None
        if not command and not options["npm"] and not options["pip"]:
            raise CommandError("--command names no program")
        binds = []
        for text in options["bind"]:
            try:
                binds.append(parse_bind(text))
            except ValueError as exc:
                raise CommandError(str(exc)) from None
        env = {}
        for pair in options["env"]:
            name, sep, value = pair.partition("=")
            if not sep:
                raise CommandError(f"--env takes NAME=VALUE, not {name[:40]!r}")
            env[name] = value
        secrets = {}
        for pair in options["secret_env"]:
            name, _sep, variable = pair.partition("=")
            secrets[name] = _read_env(variable or name)
        fields = {
            "slug": options["slug"],
            "env": env,
            "provider": options["provider"],
            "credential_env": options["credential_env"],
            "discover_seconds": options["discover_seconds"],
            "npm_package": options["npm"],
            "pip_package": options["pip"],
            "binds": binds,
            "allowed_hosts": options["allow_host"],
            "trusted_unsandboxed": options["trusted_unsandboxed"],
        }
        with command_errors(f"mcp server {options['slug']!r}: "):
            if command:  # refuse a bad line before npm spends a minute on it
                mcp_server_check(url="", command=command, secret_env_names=list(secrets), **fields)
            package = options["npm"] or options["pip"]
            if package:
                tool = "npm (install scripts off)" if options["npm"] else "pip (wheels only)"
                self.stdout.write(f"installing {package} with {tool}...")
                programs = mcp_server_install_package(
                    slug=options["slug"], npm_package=options["npm"], pip_package=options["pip"]
                )
                if not command:
                    if len(programs) != 1:
                        found = ", ".join(programs) or "none"
                        raise CommandError(f"{package} has programs {found}: name one with --command")
                    command = programs
            return mcp_server_register(command=command, secret_env=secrets, **fields)

    def _list(self) -> None:
        for server in McpServer.objects.order_by("slug"):
            counts = dict.fromkeys(McpTool.Status.values, 0)
            for status in McpTool.objects.filter(server=server).values_list("status", flat=True):
                counts[status] += 1
            state = "removed" if server.removed_at else ("enabled" if server.enabled else "disabled")
            tools = " ".join(f"{status}={count}" for status, count in counts.items())
            last = server.last_discovery_at.isoformat() if server.last_discovery_at else "never"
            error = f" error={server.last_discovery_error!r}" if server.last_discovery_error else ""
            where = f"stdio:{shlex.join(server.command)[:120]}" if server.is_stdio else server.url
            if server.npm_package or server.pip_package:
                where += f" npm={server.npm_package}" if server.npm_package else f" pip={server.pip_package}"
            self.stdout.write(
                f"{server.slug} {state} {where} provider={server.provider or '-'} "
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

    def _approve_features(self, slug: str, names: list[str], *, enable: bool) -> None:
        server = McpServer.objects.filter(slug=slug).first()
        if server is None:
            raise CommandError(f"no MCP server {slug}")
        wanted = _features_to_approve(server, names)
        if not wanted:
            self.stdout.write(f"{slug}: no resource or prompt awaits approval")
            return
        with command_errors(f"mcp server {slug!r}: "):
            rows = mcp_features_approve(names=wanted, enable=enable, via="mcp_server approve-features")
        for row in rows:
            self.stdout.write(f"{row.kind} {row.name} hash=sha256:{row.approved_hash}")
        state = "approved and enabled" if enable else "approved (still off: add --enable or use admin)"
        self.stdout.write(self.style.SUCCESS(f"{slug}: {len(rows)} {state}"))

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


def _features_to_approve(server: McpServer, names: list[str]) -> list[str]:
    rows = McpFeature.objects.filter(server=server)
    if not names:
        return sorted(rows.filter(status__in=("pending", "drifted")).values_list("name", flat=True))
    by_name = {row.upstream_key: row.name for row in rows} | {row.name: row.name for row in rows}
    unknown = [name for name in names if name not in by_name]
    if unknown:
        raise CommandError(f"{server.slug} has no resource or prompt {', '.join(unknown)}")
    return sorted({by_name[name] for name in names})


def _read_env(variable: str) -> str:
    """A secret from this command's environment (never from argv); Toolgate's own are refused."""
    if is_toolgate_name(variable):
        raise CommandError(f"{variable} is one of Toolgate's own settings; it is never handed to an MCP server")
    value = os.environ.get(variable, "")
    if not value:
        raise CommandError(f"the environment variable {variable} is not set or empty")
    return value
