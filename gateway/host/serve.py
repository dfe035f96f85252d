"""Building and running the MCP host from settings (`manage.py mcp_host`, and tests)."""

from __future__ import annotations

import asyncio
import ctypes
import logging
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import uvicorn
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from gateway.host.app import HostApp
from gateway.host.children import HostConfig, Supervisor
from gateway.host.sandbox import Limits, bwrap_problem, find_bwrap

logger = logging.getLogger(__name__)
SANDBOX_MODES = ("auto", "bwrap", "none")


def _allow_private_networks() -> bool:
    return bool(settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS)


def choose_bwrap(mode: str) -> tuple[str | None, str]:
    """(bubblewrap's path when children run under it, why not otherwise); `bwrap` mode refuses to run without it."""
    if mode not in SANDBOX_MODES:
        raise ImproperlyConfigured(f"TOOLGATE_MCP_HOST_SANDBOX must be one of {', '.join(SANDBOX_MODES)}")
    if mode == "none":
        return None, "TOOLGATE_MCP_HOST_SANDBOX=none"
    path = find_bwrap()
    problem = bwrap_problem(path)
    if problem is None:
        return path, ""
    if mode == "bwrap":
        raise ImproperlyConfigured(f"TOOLGATE_MCP_HOST_SANDBOX=bwrap, but {problem}")
    if not settings.TOOLGATE_MCP_HOST_REQUIRE_SANDBOX:
        logger.warning("stdio MCP servers run without bubblewrap: %s", problem)
    else:
        logger.error(
            "stdio MCP servers cannot be sandboxed (%s): only servers registered with --trusted-unsandboxed "
            "are started (TOOLGATE_MCP_HOST_REQUIRE_SANDBOX, on when DEBUG=False)",
            problem,
        )
    return None, problem


PR_SET_DUMPABLE = 4


def protect_host_process() -> bool:
    """Make the host's process non-dumpable: same-user processes can no longer read its /proc files.

    The host's environment holds its token (and, on a development machine, whatever else the
    shell exported); an unsandboxed child runs as the same user and could read it from
    /proc/<pid>/environ.
    A non-dumpable process's /proc entries belong to root. Children are unaffected (exec
    makes a process dumpable again). False where the call is not available (not Linux).
    """
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


def outermost(paths: Iterable[Path]) -> tuple[Path, ...]:
    """The paths not inside another one of them (hiding a directory hides what is in it)."""
    resolved = sorted({path.resolve() for path in paths}, key=lambda path: len(path.parts))
    kept: list[Path] = []
    for path in resolved:
        if not any(path.is_relative_to(parent) for parent in kept):
            kept.append(path)
    return tuple(kept)


def hidden_trees() -> tuple[Path, ...]:
    """What a sandboxed child must not see: Toolgate's tree, var/ and the host's directory."""
    return outermost([Path(settings.BASE_DIR), Path(settings.VAR_DIR), Path(settings.TOOLGATE_MCP_HOST_DIR)])


def sandbox_expected() -> bool:
    """Whether the host runs children under bubblewrap, as far as this process can tell."""
    mode = settings.TOOLGATE_MCP_HOST_SANDBOX
    if mode == "auto":
        return bwrap_problem(find_bwrap()) is None
    return mode != "none"


def host_config(*, sandbox: str | None = None, **overrides: Any) -> HostConfig:
    root = Path(settings.TOOLGATE_MCP_HOST_DIR)
    mib = 1024 * 1024
    bwrap, no_sandbox_reason = choose_bwrap(sandbox or settings.TOOLGATE_MCP_HOST_SANDBOX)
    values: dict[str, Any] = {
        "root": root,
        "hidden": hidden_trees(),
        "limits": Limits(
            cpu_seconds=settings.TOOLGATE_MCP_CHILD_CPU_SECONDS,
            memory_bytes=settings.TOOLGATE_MCP_CHILD_MEMORY_MB * mib,
            open_files=settings.TOOLGATE_MCP_CHILD_OPEN_FILES,
            processes=settings.TOOLGATE_MCP_CHILD_PROCESSES,
        ),
        "bwrap": bwrap,
        "require_sandbox": settings.TOOLGATE_MCP_HOST_REQUIRE_SANDBOX,
        "no_sandbox_reason": no_sandbox_reason,
        "allow_private": _allow_private_networks,  # read at every egress connection, like the URL guard
        "max_children": settings.TOOLGATE_MCP_HOST_MAX_CHILDREN,
        "idle_timeout_s": float(settings.TOOLGATE_MCP_HOST_IDLE_SECONDS),
    }
    values.update(overrides)
    return HostConfig(**values)


def build_host(config: HostConfig, *, token: str | None = None) -> HostApp:
    token = settings.TOOLGATE_MCP_HOST_TOKEN if token is None else token
    if not token:
        raise ImproperlyConfigured("TOOLGATE_MCP_HOST_TOKEN is not set (required when DEBUG=False)")
    supervisor = Supervisor(config)
    return HostApp(supervisor=supervisor, token=token)


def bind_address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ImproperlyConfigured("TOOLGATE_MCP_HOST_URL must be http://HOST:PORT")
    return parts.hostname, parts.port or 80


class _Lifespan:
    """ASGI wrapper: the supervisor's sweep runs while the app runs; children stop with it."""

    def __init__(self, host: HostApp) -> None:
        self.host = host

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await self.host(scope, receive, send)
            return
        supervisor = self.host.supervisor
        sweep = asyncio.get_running_loop().create_task(supervisor.sweep_forever(), name="mcp-host-sweep")

        async def receive_then_stop_children() -> Any:
            message = await receive()
            if message["type"] == "lifespan.shutdown":  # before the server may cancel what still runs
                sweep.cancel()
                await supervisor.stop_all()
            return message

        try:
            await self.host(scope, receive_then_stop_children, send)
        finally:
            sweep.cancel()


def uvicorn_server(host: HostApp, *, address: str, port: int) -> uvicorn.Server:
    config = uvicorn.Config(
        _Lifespan(host),
        host=address,
        port=port,
        lifespan="on",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    return uvicorn.Server(config)
