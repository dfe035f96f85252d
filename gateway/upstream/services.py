"""Writes of the upstream MCP sources: registration, discovery, approval, effects, removal.

Discovery is one function (`mcp_server_discover`) whichever interface asks
(command, admin, beat). It lists the server outside any assumption of trust,
checks the whole listing against the bounds first, and only then writes, in
one transaction under the server's row lock: a listing that breaks a bound
changes nothing but the server's last error.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import environ
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from changes_app.services import change_record
from core.crypto import CredentialError, KeyRing
from core.errors import AppError
from core.key_rotation import RewrapOutcome
from core.netguard import UpstreamAddressRefused, check_url_now
from gateway.host.egress import AllowedHostInvalid, parse_allowed_hosts
from gateway.host.environment import DEFAULT_PATH, declared_name_problem
from gateway.host.packages import (
    PackageError,
    install,
    package_dir,
    parse_package,
    programs_of,
    version_of,
)
from gateway.host.sandbox import Bind, bind_problem, bind_rows, binds_from_rows, program_problem
from gateway.host.serve import hidden_trees, sandbox_expected
from gateway.host.spec import ServerConfig, encode_spec
from gateway.upstream.client import UpstreamError, UpstreamTarget, list_all_tools
from gateway.upstream.definitions import (
    SERVER_SLUG_MAX_LENGTH,
    SERVER_SLUG_PATTERN,
    DefinitionRefused,
    DiscoveryBounds,
    at_least_as_strict,
    canonical_definition,
    check_definition,
    definition_hash,
    pinned_schema_hash,
    safe_label,
    server_tool_id_prefix,
    stricter,
    suggested_effect,
    tool_ids_for,
)
from gateway.upstream.feature_services import FeatureReport, features_reconcile
from gateway.upstream.host_endpoint import host_target
from gateway.upstream.metrics import mcp_discovery_observed
from gateway.upstream.models import McpServer, McpTool
from gateway.upstream.vault import token_vault
from policies_app.governance import governance_bump
from policies_app.models import ToolPolicy
from policies_app.services import policy_save
from runner.pipeline import BackgroundLoop
from runner.types import ConsequenceLevel, ToolEffect
from tools_app.selectors import schema_hash_label, tools_by_id
from tools_app.services import mcp_tool_row_create, mcp_tool_row_gone, mcp_tool_row_mirror, tool_set_enabled

DISCOVER_TASK = "tools_app.upstream.discover_server"
MIN_DISCOVER_SECONDS = 10
PROVIDER_PATTERN = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
MAX_COMMAND_CHARS = 4000
MAX_ENV_VALUE_CHARS = 4000


class DiscoveryFailed(Exception):
    """A server could not be listed (or its listing was refused); nothing about its tools changed."""

    def __init__(self, slug: str, safe_message: str) -> None:
        super().__init__(f"{slug}: {safe_message}")
        self.slug = slug
        self.safe_message = safe_message


@dataclass
class DiscoveryReport:
    slug: str
    protocol_version: str = ""
    new: list[str] = field(default_factory=list)
    drifted: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    returned: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    features: FeatureReport = field(default_factory=FeatureReport)

    def summary(self) -> str:
        counts = ", ".join(
            f"{len(getattr(self, name))} {name}" for name in ("new", "drifted", "removed", "returned", "unchanged")
        )
        line = f"{self.slug}: ok ({self.protocol_version or 'unknown protocol'}): {counts}"
        features = self.features
        if features.new or features.drifted or features.removed or features.unchanged:
            line += (
                f"; resources and prompts: {len(features.new)} new, {len(features.drifted)} drifted, "
                f"{len(features.removed)} removed, {len(features.unchanged)} unchanged"
            )
        if features.skipped:
            line += f"; {len(features.skipped)} resource templates not served (the MCP log names them)"
        return line


# Operators (admin, commands, logs) see how to allow an upstream on their own network; tenants never do.
PRIVATE_NETWORKS_SETTING = "TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS"
PRIVATE_NETWORKS_HINT = (
    f" (an operator may set {PRIVATE_NETWORKS_SETTING}=true in .env, or the environment of every service, "
    "for upstreams on a private network, and restart web, worker and the MCP host)"
)


def allow_private_networks() -> bool:
    return bool(settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS)


def private_networks_only_here() -> str | None:
    """Why registering a private-address upstream here would leave the services refusing its calls, or None.

    On a development clone (DEBUG) every process started by `make run` reads
    the one `.env` file; a value exported in the operator's shell reaches this
    command only. Registration and discovery would pass, and then every call
    from the web server and the worker would be refused. A deployment
    (DEBUG off) sets one environment for all its services, so it is trusted.
    """
    if not settings.DEBUG or not allow_private_networks():
        return None
    if _dotenv_bool(settings.DOTENV_FILE, PRIVATE_NETWORKS_SETTING):
        return None
    return (
        f"{PRIVATE_NETWORKS_SETTING}=true is set in this shell only; the web server, the worker and the MCP "
        f"host read {settings.DOTENV_FILE} and would refuse every call to this server. Add the line "
        f"{PRIVATE_NETWORKS_SETTING}=true to {settings.DOTENV_FILE}, restart `make run`, then run this again"
    )


def _dotenv_bool(path: Path, name: str) -> bool:
    """The boolean `name` holds in the .env file at `path` alone (not the process environment)."""
    file_only = type("DotenvFileOnly", (environ.Env,), {"ENVIRON": {}})
    if path.is_file():
        file_only.read_env(path)
    return bool(file_only().bool(name, default=False))


# --- registration ---------------------------------------------------------------------------


def mcp_server_check(
    *,
    slug: str,
    url: str,
    provider: str,
    discover_seconds: int,
    command: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    secret_env_names: Sequence[str] = (),
    credential_env: str = "",
    allowed_hosts: Sequence[str] = (),
    trusted_unsandboxed: bool = False,
    npm_package: str = "",
    binds: Sequence[Bind] = (),
    pip_package: str = "",
) -> None:
    """Refuse, with a message for operators, what a server row must never hold (command and admin alike)."""
    if not SERVER_SLUG_PATTERN.match(slug) or len(slug) > SERVER_SLUG_MAX_LENGTH:
        raise AppError(
            "the slug must match [a-z][a-z0-9]*(_[a-z0-9]+)* and have at most 32 characters (e.g. linear, acme_docs)"
        )
    if discover_seconds < MIN_DISCOVER_SECONDS:
        raise AppError(f"the discovery interval must be at least {MIN_DISCOVER_SECONDS} seconds")
    if provider and not PROVIDER_PATTERN.match(provider):
        raise AppError("the provider must be a simple name such as github or linear")
    if url and command:
        raise AppError("--url and --command exclude each other: a server is reached over HTTP or run over stdio")
    if command:
        _check_stdio(command, env or {}, secret_env_names, provider=provider, credential_env=credential_env)
        _check_allowed_hosts(allowed_hosts)
        try:
            parse_package(npm=npm_package, pip=pip_package)
        except PackageError as exc:
            raise AppError(str(exc)) from None
        return
    stdio_only = {
        "--env": bool(env),
        "--secret-env NAME=VAR": any("=" in name for name in secret_env_names),
        "--credential-env": bool(credential_env),
        "--allow-host": bool(allowed_hosts),
        "--trusted-unsandboxed": trusted_unsandboxed,
        "--npm": bool(npm_package),
        "--pip": bool(pip_package),
        "--bind": bool(binds),
    }
    given = [option for option, present in stdio_only.items() if present]
    if given:
        raise AppError(f"{', '.join(given)}: for stdio servers (--command) only")
    if not url:
        raise AppError("give the server's --url (streamable HTTP) or its --command (stdio)")
    if len(url) > 2000:
        raise AppError("the URL is longer than 2000 characters")
    try:
        check_url_now(url, allow_private=allow_private_networks())
    except UpstreamAddressRefused as exc:
        raise AppError(f"URL refused: {exc}{PRIVATE_NETWORKS_HINT}") from None
    if allow_private_networks() and _needs_private_networks(url):
        problem = private_networks_only_here()
        if problem is not None:
            raise AppError(problem)


def _needs_private_networks(url: str) -> bool:
    try:
        check_url_now(url, allow_private=False)
    except UpstreamAddressRefused:
        return True
    return False


def _check_stdio(
    command: Sequence[str],
    env: Mapping[str, str],
    secret_env_names: Sequence[str],
    *,
    provider: str,
    credential_env: str,
) -> None:
    """A stdio server's argv and the environment it declares; Toolgate's own names are refused."""
    if not command[0].strip():
        raise AppError("the command names no program")
    if sum(len(part) for part in command) > MAX_COMMAND_CHARS:
        raise AppError(f"the command is longer than {MAX_COMMAND_CHARS} characters")
    if any("\x00" in part for part in command):
        raise AppError("the command holds a NUL character")
    names = [*env, *secret_env_names, *([credential_env] if credential_env else [])]
    for name in names:
        problem = declared_name_problem(name)
        if problem:
            raise AppError(f"environment refused: {problem}")
    if len(set(names)) != len(names):
        duplicate = next(name for name in names if names.count(name) > 1)
        raise AppError(f"environment refused: {duplicate} is declared twice")
    for value in env.values():
        if "\x00" in value or len(value) > MAX_ENV_VALUE_CHARS:
            raise AppError(f"an --env value holds a NUL character or is longer than {MAX_ENV_VALUE_CHARS} characters")
    if bool(provider) != bool(credential_env):
        raise AppError(
            "a stdio server with --provider needs --credential-env NAME (the variable that gets the "
            "connection's secret), and --credential-env needs --provider"
        )


def _check_allowed_hosts(allowed_hosts: Sequence[str]) -> None:
    """Each HOST:PORT well formed and not an address the egress guard refuses (judged now, and per connection)."""
    try:
        hosts = parse_allowed_hosts(allowed_hosts)
    except AllowedHostInvalid as exc:
        raise AppError(f"--allow-host refused: {exc}") from None
    for host in hosts:
        try:
            check_url_now(f"https://{host}/", allow_private=allow_private_networks())
        except UpstreamAddressRefused as exc:
            raise AppError(f"--allow-host {host} refused: {exc}{PRIVATE_NETWORKS_HINT}") from None


MAX_BINDS = 16


def _check_sandbox(
    slug: str, command: Sequence[str], *, npm_package: str, pip_package: str, binds: Sequence[Bind]
) -> None:
    """What the host could not run, refused now rather than failing at the first discovery.

    The server's package must be installed (at the pinned version) where the host looks, its
    bound folders must be bindable, and the program (and a script's interpreter) must be one
    the child can see: under bubblewrap, nothing under /tmp or in Toolgate's tree.
    """
    programs: list[str] = []
    try:
        package = parse_package(npm=npm_package, pip=pip_package)
    except PackageError as exc:
        raise AppError(str(exc)) from None
    if package is not None:
        directory = package_dir(Path(settings.TOOLGATE_MCP_HOST_DIR), slug)
        if version_of(package, directory) != package.version:
            raise AppError(f"{package.spec} is not installed in {directory}: add the server with --npm or --pip")
        programs = programs_of(package, directory)
    if len(binds) > MAX_BINDS:
        raise AppError(f"at most {MAX_BINDS} folders may be bound to a server")
    hidden = hidden_trees()
    for bind in binds:
        problem = bind_problem(bind, hidden=hidden)
        if problem:
            raise AppError(f"--bind {bind.label[:200]} refused: {problem}")
    sandboxes = [bind.sandbox for bind in binds]
    if len(set(sandboxes)) != len(sandboxes):
        raise AppError("two --bind folders share one sandbox path")
    problem = program_problem(
        command[0],
        search_path=os.environ.get("PATH") or DEFAULT_PATH,
        package_programs=programs,
        binds=binds,
        hidden=hidden,
        sandboxed=sandbox_expected(),
    )
    if problem:
        raise AppError(f"the command cannot run in the MCP host's sandbox: {problem}")


def mcp_server_install_package(*, slug: str, npm_package: str = "", pip_package: str = "") -> list[str]:
    """Install a stdio server's pinned npm or pip package where the host looks for it; its programs.

    Runs npm or pip (slowly, outside any transaction) before the row is written, so a server is
    never registered with a package that is not there.
    """
    if not SERVER_SLUG_PATTERN.match(slug) or len(slug) > SERVER_SLUG_MAX_LENGTH:
        raise AppError("the slug must match [a-z][a-z0-9]*(_[a-z0-9]+)* and have at most 32 characters")
    try:
        package = parse_package(npm=npm_package, pip=pip_package)
        if package is None:
            raise AppError("give the package to install: --npm PACKAGE@VERSION or --pip PACKAGE==VERSION")
        return install(package, package_dir(Path(settings.TOOLGATE_MCP_HOST_DIR), slug))
    except PackageError as exc:
        raise AppError(str(exc)) from None


@transaction.atomic
def mcp_server_register(
    *,
    slug: str,
    url: str = "",
    provider: str = "",
    operator_token: str | None = None,
    discover_seconds: int = 300,
    enabled: bool = True,
    command: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    secret_env: Mapping[str, str] | None = None,
    credential_env: str = "",
    allowed_hosts: Sequence[str] = (),
    trusted_unsandboxed: bool = False,
    npm_package: str = "",
    binds: Sequence[Bind] = (),
    pip_package: str = "",
) -> tuple[McpServer, bool]:
    """Upsert a server by slug; returns (server, created).

    An HTTP server has a `url` (its operator token, when given, replaces the stored one); a
    stdio server has a `command` (argv) run by the MCP host, plain `env` values,
    `secret_env` values sealed like tokens (when given, they replace the stored ones), the
    `allowed_hosts` its egress proxy carries (none: no network), and whether it may run
    without a sandbox in production (`trusted_unsandboxed`).
    """
    mcp_server_check(
        slug=slug,
        url=url,
        provider=provider,
        discover_seconds=discover_seconds,
        command=command,
        env=env,
        secret_env_names=list(secret_env or {}),
        credential_env=credential_env,
        allowed_hosts=allowed_hosts,
        trusted_unsandboxed=trusted_unsandboxed,
        npm_package=npm_package,
        binds=binds,
        pip_package=pip_package,
    )
    if command and operator_token:
        raise AppError("a stdio server takes its secrets as --secret-env NAME=VAR, not as a bearer token")
    server = McpServer.objects.select_for_update().filter(slug=slug).first()
    created = server is None
    rows = bind_rows(binds)
    runs = (list(command), npm_package, pip_package, rows)
    if command and (server is None or (server.command, server.npm_package, server.pip_package, server.binds) != runs):
        # What the host runs changed (or is new): refuse now what it could not run. An edit that keeps
        # it (the admin) is not checked again, from a process that may not see the host's files.
        _check_sandbox(slug, command, npm_package=npm_package, pip_package=pip_package, binds=binds)
    if server is None:
        server = McpServer(slug=slug)
    stdio = bool(command)
    server.transport = McpServer.Transport.STDIO if stdio else McpServer.Transport.HTTP
    server.url = "" if stdio else url
    server.command = list(command)
    server.env = dict(env or {})
    server.credential_env = credential_env
    server.allowed_hosts = parse_allowed_hosts(allowed_hosts) if stdio else []
    server.trusted_unsandboxed = stdio and trusted_unsandboxed
    server.npm_package = npm_package
    server.pip_package = pip_package
    server.binds = rows
    server.provider = provider
    server.discover_seconds = discover_seconds
    server.enabled = enabled
    server.removed_at = None
    server.save()
    if stdio:
        if server.operator_token_sealed:
            mcp_server_set_token(server=server, token="")
        if secret_env is not None:
            _set_secret_env(server, secret_env)
    else:
        if server.secret_env_sealed or server.secret_env_names:
            _set_secret_env(server, {})
        if operator_token is not None:
            mcp_server_set_token(server=server, token=operator_token)
    _sync_schedule(server)
    _refresh_tool_rows(server)
    governance_bump()
    return server, created


def mcp_server_set_token(*, server: McpServer, token: str) -> None:
    """Seal the operator token under the key ring, bound to this row ("" clears it)."""
    if token:
        blob, key_id = token_vault().seal(token, server_id=str(server.pk))
        server.operator_token_sealed, server.operator_token_key_id = blob, key_id
    else:
        server.operator_token_sealed, server.operator_token_key_id = None, ""
    server.save(update_fields=["operator_token_sealed", "operator_token_key_id", "updated_at"])


def _set_secret_env(server: McpServer, values: Mapping[str, str]) -> None:
    """Seal a stdio server's secret environment as one JSON object bound to this row ({} clears it)."""
    if values:
        blob, key_id = token_vault().seal(json.dumps(dict(values), sort_keys=True), server_id=str(server.pk))
        server.secret_env_sealed, server.secret_env_key_id = blob, key_id
    else:
        server.secret_env_sealed, server.secret_env_key_id = None, ""
    server.secret_env_names = sorted(values)
    server.save(update_fields=["secret_env_sealed", "secret_env_key_id", "secret_env_names", "updated_at"])


def mcp_server_token_rewrap(*, server: McpServer, ring: KeyRing) -> RewrapOutcome:
    """Re-encrypt a server's operator token under the ring's primary key (`rotate_encryption_keys`).

    Compare-and-swap like connection_rewrap: a token set meanwhile (`mcp_server
    add --secret-env`, the admin) is never overwritten, only skipped, and the
    next run picks it up if it still needs it.
    """
    return _sealed_column_rewrap(server, ring, "operator_token_sealed", "operator_token_key_id")


def mcp_server_secret_env_rewrap(*, server: McpServer, ring: KeyRing) -> RewrapOutcome:
    """Re-encrypt a stdio server's sealed environment under the ring's primary key, compare-and-swap."""
    return _sealed_column_rewrap(server, ring, "secret_env_sealed", "secret_env_key_id")


def _sealed_column_rewrap(server: McpServer, ring: KeyRing, blob_field: str, key_id_field: str) -> RewrapOutcome:
    """Reseal one column of the row as read; the UPDATE matches the envelope and key id that were read
    (one statement, its own transaction), and keeps the key id column in step with the envelope."""
    old_blob = bytes(getattr(server, blob_field))
    old_key_id = getattr(server, key_id_field)
    try:
        sealed = token_vault().reseal(old_blob, server_id=str(server.pk), ring=ring)
    except CredentialError as exc:
        return RewrapOutcome(False, str(exc), error=exc)
    updated = McpServer.objects.filter(pk=server.pk, **{blob_field: old_blob, key_id_field: old_key_id}).update(
        **{blob_field: sealed.blob, key_id_field: sealed.key_id}, updated_at=timezone.now()
    )
    if not updated:
        return RewrapOutcome(False, "changed concurrently")
    return RewrapOutcome(True)


def _sync_schedule(server: McpServer) -> None:
    """One beat entry per server, at its interval; a removed or disabled server has none."""
    name = f"mcp-discover:{server.slug}"
    if server.removed_at is not None or not server.enabled:
        PeriodicTask.objects.filter(name=name).delete()
        return
    interval, _ = IntervalSchedule.objects.get_or_create(every=server.discover_seconds, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.update_or_create(
        name=name,
        defaults={
            "task": DISCOVER_TASK,
            "interval": interval,
            "args": json.dumps([server.pk]),
            "enabled": True,
            "expires": None,
        },
    )


@transaction.atomic
def mcp_server_remove(*, slug: str) -> McpServer:
    """Mark the server and its tools removed (never deleted: audit rows keep their ids)."""
    server = McpServer.objects.select_for_update().filter(slug=slug).first()
    if server is None:
        raise AppError(f"no MCP server {slug!r}")
    now = timezone.now()
    server.removed_at = now
    server.enabled = False
    server.save(update_fields=["removed_at", "enabled", "updated_at"])
    for tool in McpTool.objects.select_for_update().filter(server=server).exclude(status=McpTool.Status.REMOVED):
        _mark_removed(tool, now)
    _sync_schedule(server)
    governance_bump()
    return server


@transaction.atomic
def mcp_server_allow_in_policy(
    *, slug: str, policy_pk: int, user: AbstractBaseUser | None = None
) -> tuple[ToolPolicy, str, bool]:
    """Allow every approved tool of a server under one policy: add its pattern `mcp__<slug>__*`.

    A pattern rather than today's approved ids: tools the server gains and an
    operator approves later are allowed with no second edit, and a tool that is
    pending, quarantined after drift, removed or switched off stays refused by
    its own gate, which the policy never overrides. Returns the policy, the
    pattern and whether it was added (False: the policy already held it, and
    nothing was written). Recorded in the change log like any policy edit.
    """
    server = McpServer.objects.filter(slug=slug, removed_at__isnull=True).first()
    if server is None:
        raise AppError(f"no MCP server {slug!r}")
    policy = ToolPolicy.objects.select_for_update().filter(pk=policy_pk).first()
    if policy is None:
        raise AppError("no such policy; choose one of the policies listed")
    pattern = server_tool_id_prefix(server.slug) + "*"
    if pattern in policy.allowed_tools:
        return policy, pattern, False
    policy.allowed_tools = sorted({*policy.allowed_tools, pattern})
    return policy_save(policy=policy, updated_by=_actor_fields(user)), pattern, True


# --- discovery ------------------------------------------------------------------------------

_process_locks: dict[int, threading.Lock] = {}
_process_locks_guard = threading.Lock()


def _process_lock(server_id: int) -> threading.Lock:
    """Beside the row lock: serialises discoveries within a process, where SQLite has no row locks."""
    with _process_locks_guard:
        return _process_locks.setdefault(server_id, threading.Lock())


def stdio_server_config(server: McpServer) -> ServerConfig:
    """What the MCP host needs to start the server's child, its sealed environment opened.

    Built here, where the database and the key ring are: the host has neither. Raises
    when the secrets cannot be opened (a missing key, a tampered blob).
    """
    secrets: dict[str, str] = {}
    if server.secret_env_sealed:
        secrets = json.loads(token_vault().open(bytes(server.secret_env_sealed), server_id=str(server.pk)))
    return ServerConfig(
        slug=server.slug,
        command=tuple(server.command),
        env=tuple(sorted((str(k), str(v)) for k, v in (server.env or {}).items())),
        secrets=tuple(sorted((str(k), str(v)) for k, v in secrets.items())),
        provider=server.provider,
        credential_env=server.credential_env,
        allowed_hosts=tuple(server.allowed_hosts or ()),
        trusted_unsandboxed=server.trusted_unsandboxed,
        npm_package=server.npm_package,
        binds=binds_from_rows(server.binds),
        pip_package=server.pip_package,
    )


def stdio_spec_header(server: McpServer) -> str:
    """The X-Toolgate-Spec value of a stdio server (callers build it once per row, not per call)."""
    return encode_spec(stdio_server_config(server))


def server_target(server: McpServer) -> UpstreamTarget:
    """Where to reach the server with its operator token (discovery and tenant-less calls)."""
    if server.is_stdio:  # through the MCP host; a --provider server is listed by a child without a credential
        return host_target(server_id=str(server.pk), slug=server.slug, spec=stdio_spec_header(server))
    headers: tuple[tuple[str, str], ...] = ()
    if server.operator_token_sealed:
        token = token_vault().open(bytes(server.operator_token_sealed), server_id=str(server.pk))
        headers = (("Authorization", f"Bearer {token}"),)
    return UpstreamTarget(
        server_id=str(server.pk), url=server.url, allow_private=allow_private_networks(), headers=headers
    )


def mcp_server_discover(*, server_id: int, bounds: DiscoveryBounds | None = None) -> DiscoveryReport:
    """List the server now and reconcile its tools; DiscoveryFailed (recorded on the row) otherwise."""
    bounds = bounds or DiscoveryBounds()
    with _process_lock(server_id):
        row = McpServer.objects.filter(pk=server_id).values_list("slug", "transport").first()
        slug, transport = row or (str(server_id), "")
        try:
            with transaction.atomic():
                server = McpServer.objects.select_for_update().get(pk=server_id)
                if server.removed_at is not None or not server.enabled:
                    raise AppError("the server is disabled or removed")
                listing = BackgroundLoop.shared().run(
                    list_all_tools(server_target(server), max_tools=bounds.max_tools, max_pages=bounds.max_pages),
                    timeout_s=bounds.total_timeout_s,
                )
                report = _reconcile(server, listing.tools, bounds)
                report.protocol_version = listing.protocol_version
                if not server.provider:  # a provider's reads would need a tenant's connection: not served
                    report.features = features_reconcile(
                        server=server,
                        resources=listing.resources,
                        prompts=listing.prompts,
                        templates=listing.templates,
                        bounds=bounds,
                    )
                    server.offers_completions = listing.completions
                server.last_discovery_at = timezone.now()
                server.last_discovery_status = McpServer.DiscoveryStatus.OK
                server.last_discovery_error = ""
                server.protocol_version = listing.protocol_version[:32]
                server.save()
                governance_bump()
            mcp_discovery_observed(server=slug, outcome="ok")
            return report
        except Exception as exc:  # every failure is recorded and named; none escapes as a traceback
            mcp_discovery_observed(server=slug, outcome="failed")
            message = _failure_message(exc, bounds)
            if transport == McpServer.Transport.STDIO and isinstance(exc, UpstreamError):
                message = _stdio_failure_message(exc, slug)
            elif transport == McpServer.Transport.STDIO and type(exc).__name__ == "ToolTimedOut":
                # The host keeps starting the child after the listing gives up, so the retry finds it up.
                message += (
                    "; a stdio server may still be starting (a first start can take a while): "
                    "run discover again shortly, the retry finds it started"
                )
            McpServer.objects.filter(pk=server_id).update(
                last_discovery_at=timezone.now(),
                last_discovery_status=McpServer.DiscoveryStatus.FAILED,
                last_discovery_error=message[:500],
            )
            raise DiscoveryFailed(slug, message) from None


def _stdio_failure_message(error: UpstreamError, slug: str) -> str:
    """What an operator needs when a stdio server could not be listed: the host, or its log."""
    if error.kind == UpstreamError.UNREACHABLE:
        return "the MCP host cannot be reached at TOOLGATE_MCP_HOST_URL (is `manage.py mcp_host` running?)"
    if error.kind == UpstreamError.AUTH:
        return "the MCP host refused the token, or TOOLGATE_MCP_HOST_TOKEN is not set here (it must match the host's)"
    return f"{error.safe_message}; the MCP host's log says why (lines tagged 'mcp server {slug}')"


def _failure_message(exc: BaseException, bounds: DiscoveryBounds) -> str:
    """For operators (admin, command, logs): a refused address says which setting allows it."""
    if isinstance(exc, UpstreamError):
        return exc.safe_message + (PRIVATE_NETWORKS_HINT if exc.kind == UpstreamError.REFUSED else "")
    if isinstance(exc, DefinitionRefused | AppError):
        return str(exc)
    if type(exc).__name__ == "ToolTimedOut":
        return f"the listing took longer than {bounds.total_timeout_s:g} s"
    if isinstance(exc, McpServer.DoesNotExist):
        return "no such server"
    return f"discovery failed ({type(exc).__name__})"


def _reconcile(server: McpServer, listed: list[dict[str, Any]], bounds: DiscoveryBounds) -> DiscoveryReport:
    """Check the whole listing, then write: new → pending, changed → drifted, gone → removed."""
    names = [raw.get("name") for raw in listed]
    for raw in listed:
        check_definition(raw, bounds)
    if len(set(names)) != len(names):
        duplicate = next(name for name in names if names.count(name) > 1)
        raise DefinitionRefused(f"the server lists the tool {safe_label(str(duplicate))} twice")
    ids = tool_ids_for(server.slug, [str(name) for name in names])
    own = set(McpTool.objects.filter(server=server, tool_id__in=ids.values()).values_list("tool_id", flat=True))
    foreign = sorted(set(tools_by_id(tool_ids=ids.values())) - own)
    for tool_id in foreign:
        owner = next(name for name, mapped in ids.items() if mapped == tool_id)
        raise DefinitionRefused(f"tool {safe_label(owner)} maps to {tool_id}, which another tool already has")

    now = timezone.now()
    report = DiscoveryReport(slug=server.slug)
    rows = McpTool.objects.select_for_update().select_related("tool").filter(server=server)
    existing = {tool.upstream_name: tool for tool in rows}
    taken_ids = {tool.tool_id for tool in existing.values()}
    for raw in listed:
        name = str(raw["name"])
        tool = existing.get(name)
        if tool is None:
            if ids[name] in taken_ids:  # a row of another name already holds the mapped id
                raise DefinitionRefused(f"tool {safe_label(name)} maps to {ids[name]}, which another tool already has")
            _create_tool(server, name, ids[name], canonical_definition(raw), now)
            report.new.append(ids[name])
        else:
            _update_tool(tool, server, canonical_definition(raw), now, report)
    listed_names = {str(name) for name in names}
    for name, tool in existing.items():
        if name not in listed_names and tool.status != McpTool.Status.REMOVED:
            _mark_removed(tool, now)
            report.removed.append(tool.tool_id)
    return report


def _update_tool(
    tool: McpTool, server: McpServer, definition: dict[str, Any], now: Any, report: DiscoveryReport
) -> None:
    """A listed tool we know: refresh the live copy, quarantine it if it no longer matches the approved one."""
    before = _review_snapshot(tool)
    live_hash = definition_hash(definition)
    tool.last_seen_at = now
    was_removed = tool.status == McpTool.Status.REMOVED
    changed = live_hash != tool.live_hash
    tool.live_definition, tool.live_hash = definition, live_hash
    tool.suggested_effect = suggested_effect(definition.get("annotations")).value
    if was_removed:
        tool.removed_at = None
        report.returned.append(tool.tool_id)
    if tool.approved_hash and live_hash != tool.approved_hash:
        if tool.status != McpTool.Status.DRIFTED:
            _quarantine(tool, now)
            report.drifted.append(tool.tool_id)
    elif tool.approved_hash:
        if tool.status == McpTool.Status.DRIFTED and tool.enabled_before_quarantine:
            tool.tool.is_enabled = True  # the upstream went back to exactly what was approved
        tool.status = McpTool.Status.APPROVED
        tool.enabled_before_quarantine = False
    else:
        tool.status = McpTool.Status.PENDING
    if not (changed or was_removed) and tool.tool_id not in report.drifted:
        report.unchanged.append(tool.tool_id)
    tool.save()
    _write_tool_row(tool, server, now=now, missing=False)
    if tool.tool_id in report.drifted:  # the switch went off without an operator: say who did it
        change_record(action="tool.quarantine", obj=tool, before=before, after=_review_snapshot(tool))


def _create_tool(server: McpServer, name: str, tool_id: str, definition: dict[str, Any], now: Any) -> McpTool:
    effect = ToolEffect.EXTERNAL_SIDE_EFFECT  # the most restrictive until an operator confirms the hints
    tool_row = mcp_tool_row_create(
        tool_id=tool_id,
        fields={
            "effect": effect.value,
            "schema_changed_at": now,
            # Like the effect: the most restrictive until an operator has looked; discovery never resets them.
            "consequence_level": ConsequenceLevel.HIGH.value,
            "tags": ["mcp", server.slug[:32].lower()],
            **_row_fields(tool_id, definition, effect.value, server),
        },
    )
    return McpTool.objects.create(
        server=server,
        tool=tool_row,
        upstream_name=name,
        status=McpTool.Status.PENDING,
        live_definition=definition,
        live_hash=definition_hash(definition),
        suggested_effect=suggested_effect(definition.get("annotations")).value,
        first_seen_at=now,
        last_seen_at=now,
    )


def _row_fields(tool_id: str, definition: dict[str, Any], effect: str, server: McpServer) -> dict[str, Any]:
    provider = server.provider or None
    title = definition.get("title")
    return {
        "description": spec_description(definition),
        "title": title if isinstance(title, str) else "",  # searched with the id's weight (migration 0012)
        "input_schema": definition.get("inputSchema") or {"type": "object"},
        "provider": server.provider,
        "requires_connection": bool(server.provider),
        "schema_hash": pinned_schema_hash(
            tool_id=tool_id,
            definition=definition,
            effect=effect,
            provider=provider,
            requires_connection=bool(server.provider),
        ),
    }


def spec_description(definition: dict[str, Any]) -> str:
    """What a model reads: the description, else the title, else the name (never empty)."""
    return str(definition.get("description") or definition.get("title") or definition.get("name") or "MCP tool")


def _write_tool_row(tool: McpTool, server: McpServer, *, now: Any, missing: bool) -> None:
    """Mirror the live definition into the catalog row (policy files pin its schema_hash)."""
    fields = _row_fields(tool.tool_id, tool.live_definition, tool.tool.effect, server)
    mcp_tool_row_mirror(tool.tool, fields=fields, now=now, missing=missing, runs=tool.status == McpTool.Status.APPROVED)


def _quarantine(tool: McpTool, now: Any) -> None:
    tool.enabled_before_quarantine = tool.tool.is_enabled
    tool.status = McpTool.Status.DRIFTED
    tool.drifted_at = now


def _mark_removed(tool: McpTool, now: Any) -> None:
    before = _review_snapshot(tool)
    tool.status = McpTool.Status.REMOVED
    tool.removed_at = now
    tool.save(update_fields=["status", "removed_at"])
    mcp_tool_row_gone(tool_id=tool.tool_id, now=now)
    tool.tool.is_enabled = False
    change_record(action="tool.remove", obj=tool, before=before, after=_review_snapshot(tool))


def _refresh_tool_rows(server: McpServer) -> None:
    """A changed provider changes every tool's definition as Toolgate offers it: re-hash the rows."""
    now = timezone.now()
    for tool in McpTool.objects.select_related("tool").filter(server=server):
        _write_tool_row(tool, server, now=now, missing=tool.status == McpTool.Status.REMOVED)


# --- review ----------------------------------------------------------------------------------


def _actor_fields(user: AbstractBaseUser | None) -> Any:
    return user if user is not None and user.is_authenticated else None


@transaction.atomic
def mcp_tool_approve(
    *,
    tool_id: str,
    user: AbstractBaseUser | None = None,
    via: str = "admin",
    expected_live_hash: str | None = None,
    expected_schema_hash: str | None = None,
    only_if_unapproved: bool = False,
) -> McpTool:
    """Pin the live definition as the approved one, recording who and when.

    A drifted tool that was enabled before its quarantine is switched back on;
    a new tool stays off until an operator enables it. `expected_live_hash`
    guards against approving a definition that changed while it was reviewed;
    `expected_schema_hash` (the "sha256:<hex>" an approve page showed, see
    `mcp_tool_approval_preview`) guards the definition and the effect it pins alike;
    `only_if_unapproved` leaves an already approved tool (and its record) alone.
    """
    tool = McpTool.objects.select_for_update().select_related("tool", "server").filter(tool_id=tool_id).first()
    if tool is None:
        raise AppError(f"no MCP tool {tool_id!r}")
    if only_if_unapproved and tool.status == McpTool.Status.APPROVED:
        return tool
    if tool.status == McpTool.Status.REMOVED:
        raise AppError(f"{tool_id} was removed upstream; there is no live definition to approve")
    if expected_live_hash is not None and expected_live_hash != tool.live_hash:
        raise AppError(f"{tool_id}: the live definition changed while it was being reviewed; review it again")
    if expected_schema_hash is not None and expected_schema_hash != mcp_tool_approval_preview(tool).schema_hash:
        raise AppError(f"{tool_id}: the live definition changed while it was being reviewed; review it again")
    was_drifted = tool.status == McpTool.Status.DRIFTED
    before = _review_snapshot(tool)
    now = timezone.now()
    tool.approved_definition = tool.live_definition
    tool.approved_hash = tool.live_hash
    tool.approved_at = now
    tool.approved_by = _actor_fields(user)
    tool.approved_via = via[:150]
    tool.status = McpTool.Status.APPROVED
    tool.drifted_at = None
    row = tool.tool
    # Hints of the new definition that ask for more caution raise the effect; none lower it.
    effect = stricter(ToolEffect(row.effect), ToolEffect(tool.suggested_effect))
    if was_drifted and tool.enabled_before_quarantine:
        row.is_enabled = True
    tool.enabled_before_quarantine = False
    tool.save()
    row.effect = effect.value
    _write_tool_row(tool, tool.server, now=now, missing=False)
    governance_bump()
    change_record(action="tool.approve_definition", obj=tool, before=before, after=_review_snapshot(tool))
    return tool


@transaction.atomic
def mcp_tool_set_effect(*, tool_id: str, effect: ToolEffect, user: AbstractBaseUser | None = None) -> McpTool:
    """Confirm the hints' effect or tighten it; loosening below what the hints suggest is refused."""
    tool = McpTool.objects.select_for_update().select_related("tool", "server").filter(tool_id=tool_id).first()
    if tool is None:
        raise AppError(f"no MCP tool {tool_id!r}")
    floor = ToolEffect(tool.suggested_effect)
    if not at_least_as_strict(effect, floor):
        raise AppError(
            f"{tool_id}: the upstream's hints suggest {floor.value}; "
            "an operator may confirm that or pick a stricter effect"
        )
    before = _review_snapshot(tool)
    tool.effect_confirmed_at = timezone.now()
    tool.effect_confirmed_by = _actor_fields(user)
    tool.save(update_fields=["effect_confirmed_at", "effect_confirmed_by"])
    row = tool.tool
    row.effect = effect.value
    _write_tool_row(tool, tool.server, now=timezone.now(), missing=tool.status == McpTool.Status.REMOVED)
    governance_bump()
    change_record(action="tool.confirm_effect", obj=tool, before=before, after=_review_snapshot(tool))
    return tool


@transaction.atomic
def mcp_tool_allow_asking(
    *, tool_id: str, elicitation: bool, sampling: bool, user: AbstractBaseUser | None = None
) -> McpTool:
    """Allow (or stop) calls of this tool asking the client mid-call, for its approved definition only.

    Only an approved definition can be allowed to ask: what an operator reviewed is
    what may put questions to a person. Approving a new definition allows neither
    again (`McpTool.asks_allowed`). Sampling still needs the caller's policy
    (`max_samples_per_call`).
    """
    tool = McpTool.objects.select_for_update().select_related("tool").filter(tool_id=tool_id).first()
    if tool is None:
        raise AppError(f"no MCP tool {tool_id!r}")
    if (elicitation or sampling) and tool.status != McpTool.Status.APPROVED:
        raise AppError(f"{tool_id} is {tool.get_status_display().lower()}; approve its definition first")
    before = _review_snapshot(tool)
    tool.elicitation_allowed, tool.sampling_allowed = elicitation, sampling
    tool.asking_hash = tool.approved_hash if elicitation or sampling else ""
    tool.save(update_fields=["elicitation_allowed", "sampling_allowed", "asking_hash"])
    governance_bump()
    change_record(action="tool.allow_asking", obj=tool, before=before, after=_review_snapshot(tool))
    return tool


def _review_snapshot(tool: McpTool) -> dict[str, Any]:
    """What an operator's review decides, for the change log: the pinned hash, status, effect and switch."""
    elicitation, sampling = tool.asks_allowed
    return {
        "status": tool.status,
        "approved_hash": tool.approved_hash,
        "approved_via": tool.approved_via,
        "effect": tool.tool.effect,
        "effect_confirmed": tool.effect_confirmed_at is not None,
        "is_enabled": tool.tool.is_enabled,
        "elicitation_allowed": elicitation,
        "sampling_allowed": sampling,
    }


def mcp_tools_enable_check(tool_ids: Iterable[str]) -> list[str]:
    """Problems with switching these MCP tools on: only an approved, present definition may run."""
    problems = []
    for tool in McpTool.objects.filter(tool_id__in=list(tool_ids)).order_by("tool_id"):
        if tool.status != McpTool.Status.APPROVED:
            problems.append(f"{tool.tool_id} is {tool.get_status_display().lower()}; approve its definition first")
    return problems


# --- one step from discovered to callable ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ApprovalPreview:
    """What approving a tool's live definition pins: the effect in force afterwards and the resulting
    `schema_hash` ("sha256:<hex>", what `policy export` will write for it)."""

    tool: McpTool
    effect: ToolEffect
    schema_hash: str


def mcp_tool_approval_preview(tool: McpTool, *, confirm_effect: bool = False) -> ApprovalPreview:
    """The effect and schema hash the tool will have once its live definition is approved.

    Approval alone keeps the effect in force, raised to what the new hints ask for
    (`mcp_tool_approve`); `confirm_effect` also confirms the hints' effect when no
    operator has confirmed one yet (an effect an operator set stays, raised likewise).
    The effect is part of the hash, so a page that shows this hash shows what is pinned.
    """
    suggested = ToolEffect(tool.suggested_effect)
    effect = stricter(ToolEffect(tool.tool.effect), suggested)
    if confirm_effect and tool.effect_confirmed_at is None:
        effect = suggested
    digest = _row_fields(tool.tool_id, tool.live_definition, effect.value, tool.server)["schema_hash"]
    return ApprovalPreview(tool=tool, effect=effect, schema_hash=schema_hash_label(digest))


@transaction.atomic
def mcp_tools_approve(
    *,
    expected: Mapping[str, str | None],
    enable: bool,
    user: AbstractBaseUser | None = None,
    via: str = "admin",
) -> list[ApprovalPreview]:
    """Approve each tool's live definition and confirm its effect, switching it on with `enable`: all or nothing.

    `expected` maps each tool id to the schema hash its operator was shown
    (`mcp_tool_approval_preview(..., confirm_effect=True)`), or None where nothing
    was shown to guard. A tool whose definition or effect moved since is refused,
    and with it the whole request. Returns what was pinned, by tool id.
    """
    tool_ids = sorted(expected)
    rows = {
        tool.tool_id: tool
        for tool in McpTool.objects.select_for_update(of=("self",))
        .select_related("tool", "server")
        .filter(tool_id__in=tool_ids)
    }
    problems = [f"no MCP tool {tool_id!r}" for tool_id in tool_ids if tool_id not in rows]
    previews = []
    for tool_id in tool_ids:
        tool = rows.get(tool_id)
        if tool is None:
            continue
        preview = mcp_tool_approval_preview(tool, confirm_effect=True)
        wanted = expected[tool_id]
        if tool.status == McpTool.Status.REMOVED:
            problems.append(f"{tool_id} was removed upstream; there is no live definition to approve")
        elif wanted is not None and wanted != preview.schema_hash:
            problems.append(
                f"{tool_id}: its definition or effect changed since it was shown (now {preview.schema_hash}); "
                "review it again"
            )
        previews.append(preview)
    if problems:
        raise AppError("nothing was approved: " + "; ".join(problems))
    for preview in previews:
        tool = mcp_tool_approve(tool_id=preview.tool.tool_id, user=user, via=via, only_if_unapproved=True)
        if tool.effect_confirmed_at is None or tool.tool.effect != preview.effect.value:
            mcp_tool_set_effect(tool_id=tool.tool_id, effect=preview.effect, user=user)
    if enable:
        tool_set_enabled(tool_ids=tool_ids, enabled=True)
    pinned = {tool_id: row.schema_hash for tool_id, row in tools_by_id(tool_ids=tool_ids).items()}
    for preview in previews:  # what was shown is what was pinned, or nothing is
        if schema_hash_label(pinned[preview.tool.tool_id]) != preview.schema_hash:
            raise AppError(f"nothing was approved: {preview.tool.tool_id} would not pin the hash shown")
    return previews


def approved_schema_hash(tool: McpTool) -> str | None:
    """The schema hash of the approved definition with the effect in force (the live one's is the Tool row's)."""
    if not tool.approved_definition:
        return None
    digest = _row_fields(tool.tool_id, tool.approved_definition, tool.tool.effect, tool.server)["schema_hash"]
    return schema_hash_label(digest)
