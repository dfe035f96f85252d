"""Real upstream MCP servers for tests: the official SDK's MCPServer under uvicorn on loopback.

    with McpUpstream(legacy=True) as upstream:        # a 2025-11-25 server with sessions
        upstream.server.add_tool(add, annotations=ToolAnnotations(readOnlyHint=True))
        ... register upstream.url, discover, call ...
        assert upstream.calls("add") == 1
        assert upstream.authorizations() == ["Bearer tok"]

`legacy=True` serves sessions (stateful streamable HTTP) and answers the
2026-07-28 probe `server/discover` with "method not found", as servers built
on the 2025 SDKs do, so clients fall back to the `initialize` handshake.
`legacy=False` is a stateless 2026-07-28 server with JSON responses;
`legacy=True, stateless=True` a 2025-11-25 one without sessions.
Every HTTP request is recorded (method, JSON-RPC method and id, tool name,
`_meta`, Authorization) before it reaches the SDK. `refuse_plain = 406` answers
that status to Toolgate's plain-JSON calls (gateway/upstream/lean.py) before
they run; `stream_calls = True` answers every tools/call as an event stream; `content_encoding = "gzip"` (or "deflate")
compresses every answer; `json_response=False` lets the SDK answer event streams. `restart()` stops the server and
serves a fresh app (new session table) on the same port.
"""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import mcp_types as types
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

from gateway.upstream.lean import PLAIN_ID_BASE


class PagedMCPServer(MCPServer):
    """An MCPServer whose tools/list answers `page_size` tools per page (cursor = offset)."""

    page_size: int | None = None

    async def _handle_list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        tools = await self.list_tools()
        if not self.page_size:
            return types.ListToolsResult(tools=tools)
        start = int(params.cursor) if params is not None and params.cursor else 0
        end = start + self.page_size
        return types.ListToolsResult(tools=tools[start:end], next_cursor=str(end) if end < len(tools) else None)


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    http_method: str
    rpc_method: str | None
    tool: str | None
    authorization: str | None
    headers: dict[str, str]
    rpc_id: Any = None
    meta: Any = None

    @property
    def plain(self) -> bool:
        """Sent by Toolgate's plain-JSON path (its ids start at PLAIN_ID_BASE), not through the SDK client."""
        return isinstance(self.rpc_id, int) and self.rpc_id >= PLAIN_ID_BASE


class _Recorder:
    """ASGI middleware: records each request, plays the legacy server's answer to server/discover."""

    def __init__(self, owner: McpUpstream, app: Any) -> None:
        self._owner = owner
        self._app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        chunks = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        headers = {key.decode().lower(): value.decode() for key, value in scope["headers"]}
        try:
            payload = json.loads(body) if body else None
        except ValueError:
            payload = None
        rpc_method = payload.get("method") if isinstance(payload, dict) else None
        params = payload.get("params") if isinstance(payload, dict) else None
        tool = params.get("name") if rpc_method == "tools/call" and isinstance(params, dict) else None
        rpc_id = payload.get("id") if isinstance(payload, dict) else None
        meta = params.get("_meta") if isinstance(params, dict) else None
        request = UpstreamRequest(
            scope["method"], rpc_method, tool, headers.get("authorization"), headers, rpc_id=rpc_id, meta=meta
        )
        self._owner._record(request)
        if self._owner.refuse_plain is not None and request.plain:
            await send({"type": "http.response.start", "status": self._owner.refuse_plain, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        if self._owner.status_override is not None:
            status = self._owner.status_override
            await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"Traceback (most recent call last): secret-stack"})
            return
        if self._owner.legacy and rpc_method == "server/discover":
            answer = {
                "jsonrpc": "2.0",
                "id": payload.get("id"),
                "error": {"code": -32601, "message": "Method not found"},
            }
            raw = json.dumps(answer).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())],
                }
            )
            await send({"type": "http.response.body", "body": raw})
            return

        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        if self._owner.stream_calls and rpc_method == "tools/call":
            await self._app(scope, replay, _as_event_stream(send))
            return
        if self._owner.content_encoding is not None:
            await self._app(scope, replay, _compressed(send, self._owner.content_encoding))
            return
        await self._app(scope, replay, send)


def _compressed(send: Callable, coding: str) -> Callable:
    """Re-sends an answer whole in `coding` (gzip or deflate; any other name labels the plain body)."""
    start: dict = {}
    chunks: list[bytes] = []

    async def compressed(message: dict) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
            return
        chunks.append(message.get("body", b""))
        if message.get("more_body", False):
            return
        plain = b"".join(chunks)
        body = {"gzip": gzip.compress, "deflate": zlib.compress}.get(coding, lambda raw: raw)(plain)
        headers = [(name, value) for name, value in start.get("headers", []) if name.lower() != b"content-length"]
        headers += [(b"content-encoding", coding.encode()), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": start["status"], "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return compressed


def _as_event_stream(send: Callable) -> Callable:
    """Re-sends a JSON answer as one `message` event of a text/event-stream."""
    start: dict = {}
    chunks: list[bytes] = []

    async def streamed(message: dict) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
            return
        chunks.append(message.get("body", b""))
        if message.get("more_body", False):
            return
        body = b"event: message\r\ndata: " + b"".join(chunks) + b"\r\n\r\n"
        headers = [(b"content-type", b"text/event-stream"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": start["status"], "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return streamed


class McpUpstream:
    """An MCPServer served by uvicorn on 127.0.0.1:<free port>, in a thread."""

    def __init__(
        self, *, legacy: bool, name: str = "upstream", stateless: bool | None = None, json_response: bool = True
    ) -> None:
        self.legacy = legacy
        self.json_response = json_response  # False: the SDK answers event streams (progress, log messages)
        self.stateless = not legacy if stateless is None else stateless
        self.refuse_plain: int | None = None
        self.stream_calls = False
        self.content_encoding: str | None = None  # "gzip" or "deflate": every answer compressed so
        self.server = PagedMCPServer(name=name, warn_on_duplicate_tools=False)
        self.status_override: int | None = None
        self._lock = threading.Lock()
        self._requests: list[UpstreamRequest] = []
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self._uvicorn: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def _app(self) -> Any:
        security = TransportSecuritySettings(
            allowed_hosts=[f"127.0.0.1:{self.port}", f"localhost:{self.port}"],
            allowed_origins=[],
        )
        app = self.server.streamable_http_app(
            stateless_http=self.stateless, json_response=self.json_response, transport_security=security
        )
        return _Recorder(self, app)

    def start(self) -> None:
        config = uvicorn.Config(
            self._app(),
            host="127.0.0.1",
            port=self.port,
            log_level="critical",
            lifespan="on",
            access_log=False,
            timeout_graceful_shutdown=0.1,  # an SDK client's open event stream would hold the stop a whole second
        )
        self._uvicorn = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._uvicorn.run, name="mcp-upstream", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._uvicorn.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the upstream MCP server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        if self._uvicorn is not None and self._thread is not None:
            self._uvicorn.should_exit = True
            self._thread.join(timeout=10)
            self._uvicorn = None

    def restart(self) -> None:
        """Stop and serve a fresh app on the same port: a stateful server forgets its sessions."""
        self.stop()
        self.start()

    def _record(self, request: UpstreamRequest) -> None:
        with self._lock:
            self._requests.append(request)

    @property
    def requests(self) -> list[UpstreamRequest]:
        with self._lock:
            return list(self._requests)

    def calls(self, tool: str | None = None) -> int:
        """How many tools/call requests reached the server (for `tool` when given)."""
        return sum(1 for r in self.requests if r.rpc_method == "tools/call" and (tool is None or r.tool == tool))

    def authorizations(self) -> list[str | None]:
        return [r.authorization for r in self.requests if r.rpc_method == "tools/call"]

    def clear(self) -> None:
        with self._lock:
            self._requests.clear()

    def __enter__(self) -> McpUpstream:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
