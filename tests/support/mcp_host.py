"""Toolgate's MCP host for tests: the real HostApp under uvicorn on loopback, in a thread.

    with McpHostThread(host_config(sandbox="none", root=tmp_path)) as host:
        settings.TOOLGATE_MCP_HOST_URL, settings.TOOLGATE_MCP_HOST_TOKEN = host.url, host.token
        ... register a stdio server, discover, call through the pipeline ...
        host.children()   # the running children

The host reads no database (the worker sends each server's spec with the request); the
pipeline and discovery that call it do, from other threads: use `transactional_db`.
"""

from __future__ import annotations

import secrets
import socket
import threading
import time
from types import TracebackType

from gateway.host.children import HostConfig, StdioChild
from gateway.host.serve import build_host, uvicorn_server

SCRIPT_TOOLS = ("add", "can_read", "can_write", "crash", "environment", "leak", "process", "shout")


class McpHostThread:
    def __init__(self, config: HostConfig) -> None:
        self.token = secrets.token_urlsafe(24)
        self.app = build_host(config, token=self.token)
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self._server = uvicorn_server(self.app, address="127.0.0.1", port=self.port)
        self._server.config.log_level = "critical"
        self._thread = threading.Thread(target=self._server.run, name="mcp-host", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def children(self) -> list[StdioChild]:
        return [child for child in self.app.supervisor.children() if not child.dead]

    def wait_for(self, condition, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError("the MCP host did not reach the expected state in time")
            time.sleep(0.05)

    def __enter__(self) -> McpHostThread:
        self._thread.start()
        self.wait_for(lambda: self._server.started or not self._thread.is_alive())
        if not self._server.started:
            raise RuntimeError("the MCP host did not start")
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)
