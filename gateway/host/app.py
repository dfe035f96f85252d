"""The host's endpoint: each stdio server as a stateless streamable-HTTP MCP server.

`POST /servers/<slug>/mcp` with `Authorization: Bearer <TOOLGATE_MCP_HOST_TOKEN>` and
`X-Toolgate-Spec` (the server's command, environment and opened secrets, sent by the
worker: the host reads no database, spec.py says why); for a server with a provider,
the worker adds `X-Toolgate-Connection` (the connection's id) and `X-Toolgate-Credential`
(its secret, resolved by the broker after grant ∩ declared). The request is answered by
that server's child for that connection, started on demand; `tools/list` and `tools/call`
(and `resources/list`, `resources/templates/list`, `resources/read`, `prompts/list`,
`prompts/get`, which a child that declares no resources or prompts answers with nothing) are
passed to it and its answers passed back as sent.

A `tools/call` whose `_meta` carries a `progressToken` (the worker's SDK client sends one
when its caller streams progress) or a log level (`io.modelcontextprotocol/logLevel`, sent
when its caller asked for log messages) is answered by the SDK's event-stream app instead of
the JSON one: the child's `notifications/progress` go back to the worker on that stream, keyed
to the worker's token, and its `notifications/message` at or above the level, and the worker's
SDK client reads them as it does any HTTP upstream's. A child's log message is passed on only
while that call is the only request in flight on the child (stdio carries no request id with
a notification; children.py says why), and never one that holds a declared secret.
Everything else stays plain JSON, which keeps the worker's lean JSON path. A worker that
cancels (or drops the stream) cancels the host's request, and the SDK's client then sends
the child `notifications/cancelled`.

A `tools/call` whose `_meta` declares elicitation or sampling (the worker's `call_asking`, for a
tool allowed to ask and a client that can answer) may be answered with an InputRequiredResult:
the child asked mid-call, the host holds that call, and the worker's retry (its answers and the
host's `requestState`) resumes it (questions.py). Any other call's questions are refused to the
child.

`POST /connections/<id>/stop` (same token) stops that connection's children at once: the
service that revokes a connection, or marks it for re-authorisation, calls it after its
commit. Anything else answers 401/404 before the MCP layer.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
from typing import Any

import mcp_types as types
from mcp import MCPError
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import DEFAULT_MAX_REQUEST_BODY_SIZE
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import LOG_LEVEL_META_KEY
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS

from gateway.asking import Asking
from gateway.host.children import ChildSpec, HostError, StdioChild, Supervisor, spec_fingerprint
from gateway.host.spec import MAX_SPEC_CHARS, SPEC_HEADER, SpecInvalid, decode_spec
from runner.progress import LOG_LEVELS
from runner.redaction import carries_credential, secret_fragments

logger = logging.getLogger(__name__)

SERVER_PATH = re.compile(r"^/servers/([a-z][a-z0-9_]{0,31})/mcp/?$")
STOP_PATH = re.compile(r"^/connections/([0-9A-Za-z-]{1,64})/stop/?$")
CONNECTION_HEADER = "x-toolgate-connection"
CREDENTIAL_HEADER = "x-toolgate-credential"
SCOPE_KEY = "toolgate.mcp_host"
MAX_HEADER_CHARS = 8192
PROGRESS_TOKEN = b'"progressToken"'
LOG_LEVEL_KEY = f'"{LOG_LEVEL_META_KEY}"'.encode()
OVERSIZED = b"\x00"  # stands for a spec header past MAX_SPEC_CHARS (never a base64url value)


class SpecResolver:
    """Request → ChildSpec, from the spec header the worker sent (decoded once per distinct value)."""

    def resolve(self, slug: str, connection_id: str, credential: str, spec_value: bytes) -> ChildSpec:
        if spec_value == OVERSIZED:
            raise HostError(f"the server spec is larger than {MAX_SPEC_CHARS} characters")
        try:
            config = decode_spec(spec_value)
        except SpecInvalid as exc:
            raise HostError(str(exc)) from None
        if config.slug != slug:
            raise HostError(f"the server spec is for another server than {slug}")
        env = dict(config.env) | dict(config.secrets)
        secret_values = [value for _name, value in config.secrets]
        if config.provider and connection_id:
            if not credential:
                raise HostError("the connection's credential is missing")
            env[config.credential_env] = credential
            secret_values.append(credential)
        else:
            connection_id = ""  # a server without a provider has one child for every caller
        return ChildSpec(
            slug=slug,
            connection_id=connection_id,
            command=config.command,
            env=env,
            secret_values=tuple(secret_values),
            allowed_hosts=config.allowed_hosts,
            trusted_unsandboxed=config.trusted_unsandboxed,
            npm_package=config.npm_package,
            pip_package=config.pip_package,
            binds=config.binds,
            fingerprint=spec_fingerprint(
                config.command,
                env,
                config.allowed_hosts,
                config.trusted_unsandboxed,
                config.npm_package,
                config.binds,
                config.pip_package,
            ),
        )


def _refused(slug: str, error: HostError) -> MCPError:
    """A host failure as the JSON-RPC error the worker classifies (its message is the host's own)."""
    logger.warning("mcp server %s: %s", slug, error)
    return MCPError(INTERNAL_ERROR, f"mcp host: {error}")


def slug_of(ctx: Any) -> str:
    return _request_info(ctx)[0]


def _request_info(ctx: Any) -> tuple[str, str, str, bytes]:
    info = ctx.request.scope.get(SCOPE_KEY) if ctx.request is not None else None
    if info is None:
        raise MCPError(INTERNAL_ERROR, "the request did not come through the host's router")
    return info


def build_server(supervisor: Supervisor, resolver: SpecResolver) -> Server[Any]:
    """The one MCP server of the host; each request is routed to its child by the path's slug."""

    async def child_for(ctx: Any) -> Any:
        slug, connection_id, credential, spec_value = _request_info(ctx)
        try:
            return await supervisor.child(resolver.resolve(slug, connection_id, credential, spec_value))
        except HostError as exc:
            raise _refused(slug_of(ctx), exc) from None

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        child = await child_for(ctx)
        try:
            return await child.list_tools(params.cursor if params is not None else None)
        except HostError as exc:
            raise _refused(slug_of(ctx), exc) from None

    async def call_tool(
        ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        child = await child_for(ctx)
        asking = _asking_declared(ctx)
        if asking is not None or params.request_state is not None or params.input_responses:
            return await _asking_round(ctx, child, params, asking=asking)
        relay_progress = _progress_relay(ctx, child.spec.secret_values)
        level = _log_level(ctx.meta)
        relay_log = _log_relay(ctx, level, child.spec.secret_values) if level is not None else None
        try:
            result = await child.relay_call(
                params.name, dict(params.arguments or {}), progress=relay_progress, log=relay_log, log_level=level
            )
        except HostError as exc:
            raise _refused(slug_of(ctx), exc) from None
        if _carries_secret(result, child.spec.secret_values):
            raise MCPError(INVALID_PARAMS, "mcp host: the answer carries a declared secret; it was withheld")
        return result

    async def relayed(ctx: Any, capability: str, send: Any, empty: Any) -> Any:
        """A resources or prompts request passed to the child; one that declared none lists nothing."""
        child = await child_for(ctx)
        try:
            if not child.offers(capability):
                return empty
            result = await child.relay(send)
        except HostError as exc:
            raise _refused(slug_of(ctx), exc) from None
        if _carries_secret(result, child.spec.secret_values):
            raise MCPError(INVALID_PARAMS, "mcp host: the answer carries a declared secret; it was withheld")
        return result

    async def list_resources(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        cursor = params.cursor if params is not None else None
        empty = types.ListResourcesResult(resources=[])
        return await relayed(ctx, "resources", lambda client: client.list_resources(cursor=cursor), empty)

    async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        empty = types.ReadResourceResult(contents=[])
        return await relayed(ctx, "resources", lambda client: client.read_resource(str(params.uri)), empty)

    async def list_resource_templates(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        cursor = params.cursor if params is not None else None
        empty = types.ListResourceTemplatesResult(resource_templates=[])
        return await relayed(ctx, "resources", lambda client: client.list_resource_templates(cursor=cursor), empty)

    async def list_prompts(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        cursor = params.cursor if params is not None else None
        empty = types.ListPromptsResult(prompts=[])
        return await relayed(ctx, "prompts", lambda client: client.list_prompts(cursor=cursor), empty)

    async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        empty = types.GetPromptResult(messages=[])
        return await relayed(ctx, "prompts", lambda client: client.get_prompt(params.name, params.arguments), empty)

    return Server(
        "toolgate-mcp-host",
        version="1",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_resource_templates,
        on_read_resource=read_resource,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )


async def _asking_round(
    ctx: Any, child: StdioChild, params: types.CallToolRequestParams, *, asking: Asking | None = None
) -> types.CallToolResult | types.InputRequiredResult:
    """A call that may ask (the child's first question is held), or the retry that answers a held one."""
    arguments = dict(params.arguments or {})
    try:
        if params.request_state is None and not params.input_responses and asking is not None:
            result = await child.call_asking(params.name, arguments, asking)
        else:
            result = await child.resume_asking(
                params.name, arguments, params.request_state, params.input_responses, asking=asking
            )
    except HostError as exc:
        raise _refused(slug_of(ctx), exc) from None
    if _carries_secret(result, child.spec.secret_values):
        raise MCPError(INVALID_PARAMS, "mcp host: the answer carries a declared secret; it was withheld")
    return result


def _progress_relay(ctx: Any, secret_values: tuple[str, ...]) -> Any:
    """Where a child's progress goes during one call (None: the worker asked for none)."""
    if _progress_token(ctx.meta) is None:
        return None

    async def relay_progress(progress: float, total: float | None, message: str | None) -> None:
        # The worker bounds, cuts and cleans what it passes on; the host keeps declared secrets out.
        if message is not None and _carries_secret_value(message, secret_values):
            message = None
        await ctx.session.report_progress(progress, total, message)

    return relay_progress


def _asking_declared(ctx: Any) -> Asking | None:
    """What the worker declared this call may ask (the tool's allowance ∩ its client's), from the request's `_meta`.

    The worker speaks 2026-07-28 to the host, so capabilities come with each request; a
    call that declares neither elicitation nor sampling is relayed as before, and any
    question its child asks is refused.
    """
    capabilities = ctx.session.client_capabilities
    if capabilities is None:
        return None
    asking = Asking(elicitation=capabilities.elicitation is not None, sampling=capabilities.sampling is not None)
    return asking if asking.elicitation or asking.sampling else None


def _progress_token(meta: Any) -> Any:
    """The caller's progress token in a request's parsed `_meta` (the SDK's snake_case key), else None."""
    if not meta:
        return None
    return meta.get("progress_token", meta.get("progressToken"))


def _log_relay(ctx: Any, level: str, secret_values: tuple[str, ...]) -> Any:
    """Where a child's log messages go during one call: at or above `level`, onto that call's stream.

    The worker bounds, cuts and cleans what it passes on; the host drops any message that holds
    a declared secret (a log line is never worth one), as it blanks a progress message's text.
    """
    floor = LOG_LEVELS.index(level)

    async def relay(entry: types.LoggingMessageNotificationParams) -> None:
        if LOG_LEVELS.index(entry.level) < floor or _carries_secret_value([entry.logger, entry.data], secret_values):
            return
        notification = types.LoggingMessageNotification(params=entry)
        await ctx.session.send_notification(notification, related_request_id=ctx.request_id)

    return relay


def _log_level(meta: Any) -> str | None:
    """The log level the worker asked for in a request's parsed `_meta`, else None."""
    level = meta.get(LOG_LEVEL_META_KEY) if meta else None
    return level if level in LOG_LEVELS else None


def _carries_secret_value(value: Any, secret_values: tuple[str, ...]) -> bool:
    fragments = secret_fragments(secret_values)
    return bool(fragments) and carries_credential(value, fragments)


def _carries_secret(result: Any, secret_values: tuple[str, ...]) -> bool:
    """A child that echoes an operator's secret (or the connection's) must not hand it to a model."""
    fragments = secret_fragments(secret_values)  # the runner's rule: base64 and space-split forms too
    return bool(fragments) and carries_credential(result.model_dump(mode="json", by_alias=True), fragments)


class HostApp:
    """ASGI: the token and the path are checked here; the SDK's stateless app does the MCP."""

    def __init__(self, *, supervisor: Supervisor, token: str, resolver: SpecResolver | None = None) -> None:
        if not token:
            raise ValueError("the MCP host needs a token")
        self._token = f"Bearer {token}".encode()
        self.supervisor = supervisor
        self.server = build_server(supervisor, resolver or SpecResolver())
        # Callers are authenticated by the token (a browser cannot send it), and the host
        # is reached by names of the deployment's choosing (127.0.0.1, a compose service).
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        self._inner = self.server.streamable_http_app(
            streamable_http_path="/mcp", stateless_http=True, json_response=True, transport_security=security
        )
        self._streamed = self.server.streamable_http_app(
            streamable_http_path="/mcp", stateless_http=True, json_response=False, transport_security=security
        )

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            # lifespan: the SDK's session managers run in it (the streamed app's entered here, in the same task)
            async with self._streamed.router.lifespan_context(self._streamed):
                await self._inner(scope, receive, send)
            return
        headers = {name.decode("latin-1").lower(): value for name, value in scope.get("headers", [])}
        if not hmac.compare_digest(headers.get("authorization", b""), self._token):
            await _plain(send, 401, b"unauthorized")
            return
        path = scope.get("path", "")
        stop = STOP_PATH.match(path)
        if stop is not None and scope.get("method") == "POST":
            stopped = await self.supervisor.stop_connection(stop.group(1))
            await _plain(send, 200, json.dumps({"stopped": stopped}).encode(), content_type=b"application/json")
            return
        match = SERVER_PATH.match(path)
        if match is None:
            await _plain(send, 404, b"no such server endpoint")
            return
        connection = headers.get(CONNECTION_HEADER, b"").decode("latin-1")[:MAX_HEADER_CHARS]
        credential = headers.get(CREDENTIAL_HEADER, b"").decode("utf-8", errors="replace")[:MAX_HEADER_CHARS]
        spec_value = headers.get(SPEC_HEADER, b"")
        if len(spec_value) > MAX_SPEC_CHARS:
            spec_value = OVERSIZED
        info = (match.group(1), connection, credential, spec_value)
        routed = {**scope, "path": "/mcp", "raw_path": b"/mcp", SCOPE_KEY: info}
        if scope.get("method") != "POST":
            await self._inner(routed, receive, send)
            return
        body, replay = await _read_body(receive)
        inner = self._streamed if _asks_stream(body, headers) else self._inner
        await inner(routed, replay, send)


async def _read_body(receive: Any) -> tuple[bytes, Any]:
    """The request's body (up to the SDK's bound), and a `receive` that hands it on, then the rest.

    Read here to choose the app; the SDK's own bound still refuses a larger body.
    """
    chunks: list[bytes] = []
    size, more = 0, True
    while more and size <= DEFAULT_MAX_REQUEST_BODY_SIZE:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        more = message.get("more_body", False)
    body = b"".join(chunks)
    pending = [{"type": "http.request", "body": body, "more_body": more}]

    async def replay() -> Any:
        return pending.pop() if pending else await receive()

    return body, replay


def _asks_stream(body: bytes, headers: dict[str, bytes]) -> bool:
    """A `tools/call` with a progress token or a log level, from a caller that reads event streams."""
    if (PROGRESS_TOKEN not in body and LOG_LEVEL_KEY not in body) or b"text/event-stream" not in headers.get(
        "accept", b""
    ):
        return False  # the usual call: two looks for a word, no second parse
    try:
        message = json.loads(body)
    except ValueError:
        return False
    if not isinstance(message, dict) or message.get("method") != "tools/call":
        return False
    meta = (message.get("params") or {}).get("_meta") if isinstance(message.get("params"), dict) else None
    if not isinstance(meta, dict):
        return False
    token = meta.get("progressToken")
    return (isinstance(token, str | int) and not isinstance(token, bool)) or meta.get(LOG_LEVEL_META_KEY) in LOG_LEVELS


async def _plain(send: Any, status: int, body: bytes, *, content_type: bytes = b"text/plain") -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", content_type)]})
    await send({"type": "http.response.body", "body": body})
