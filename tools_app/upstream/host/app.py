"""The host's endpoint: each stdio server as a stateless streamable-HTTP MCP server.

`POST /servers/<slug>/mcp` with `Authorization: Bearer <TOOLGATE_MCP_HOST_TOKEN>` and
`X-Toolgate-Spec` (the server's command, environment and opened secrets, sent by the
worker: the host reads no database, spec.py says why); for a server with a provider,
the worker adds `X-Toolgate-Connection` (the connection's id) and `X-Toolgate-Credential`
(its secret, resolved by the broker after grant ∩ declared). The request is answered by
that server's child for that connection, started on demand; `tools/list` and `tools/call`
(and `resources/list`, `resources/read`, `prompts/list`, `prompts/get`, which a child that
declares no resources or prompts answers with nothing) are passed to it and its answers
passed back as sent.

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
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS

from runner.redaction import carries_credential, secret_fragments
from tools_app.upstream.host.children import ChildSpec, HostError, Supervisor, spec_fingerprint
from tools_app.upstream.host.spec import MAX_SPEC_CHARS, SPEC_HEADER, SpecInvalid, decode_spec

logger = logging.getLogger(__name__)

SERVER_PATH = re.compile(r"^/servers/([a-z][a-z0-9_]{0,31})/mcp/?$")
STOP_PATH = re.compile(r"^/connections/([0-9A-Za-z-]{1,64})/stop/?$")
CONNECTION_HEADER = "x-toolgate-connection"
CREDENTIAL_HEADER = "x-toolgate-credential"
SCOPE_KEY = "toolgate.mcp_host"
MAX_HEADER_CHARS = 8192
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

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        child = await child_for(ctx)
        try:
            result = await child.relay_call(params.name, dict(params.arguments or {}))
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
        on_read_resource=read_resource,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )


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
        self._inner = self.server.streamable_http_app(
            streamable_http_path="/mcp",
            stateless_http=True,
            json_response=True,
            # Callers are authenticated by the token (a browser cannot send it), and the host
            # is reached by names of the deployment's choosing (127.0.0.1, a compose service).
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._inner(scope, receive, send)  # lifespan: the SDK's session manager runs in it
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
        await self._inner(routed, receive, send)


async def _plain(send: Any, status: int, body: bytes, *, content_type: bytes = b"text/plain") -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", content_type)]})
    await send({"type": "http.response.body", "body": body})
