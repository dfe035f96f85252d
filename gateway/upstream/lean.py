"""`tools/call` as one plain HTTP POST, for upstreams that answer JSON without a session.

Why: through the SDK client a pooled call crosses its dispatcher, memory
streams, task groups and a per-request writer task: about half of the gateway's
CPU per proxied call went there, for what is one POST and one JSON answer when
the upstream is stateless and answers `application/json` (the SDK's own
`stateless_http=True, json_response=True`, and the MCP host's stdio servers).

A `JsonCaller` is made by a pooled session once the SDK has negotiated: it
posts over its own keep-alive HTTP/1.1 connections (`http11.Http11Pool`) to the
address the session checked, with the session's credential headers and the same
response cap, stamped as the SDK
stamps a request of the negotiated era (2025-11-25: the `MCP-Protocol-Version`
header; 2026-07-28: `params._meta` plus `MCP-Protocol-Version`, `Mcp-Method`,
`Mcp-Name` and any `Mcp-Param-*` the pinned input schema declares), and reads
the answer into the SDK's own `CallToolResult`. The same request goes out either
from the session's event loop (`call`) or, for a sync web worker, from the
worker's own thread on blocking sockets (`call_blocking`, the runner's fast
path: no hop to the loop thread and back, see runner.contracts.BlockingExecuteFn).

What the SDK keeps: discovery, sessions (an upstream that issued an
`Mcp-Session-Id` never gets a caller), event streams, and every upstream that
refuses a plain POST. An answer that says the request did not run (404, 405,
406, 415, or a 400 whose JSON-RPC error, if any, is in REFUSED_BEFORE_DISPATCH)
raises `NotRun`: the session then drops its caller and sends the same call
through the SDK. A request that may have run is never sent twice; an
event-stream answer is read here (it is the call's answer) and the session goes
back to the SDK for the next calls.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import httpx2
import mcp_types as types
from mcp.shared.inbound import (
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    encode_header_value,
    mcp_param_headers,
    x_mcp_header_map,
)
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY
from mcp_types.jsonrpc import INVALID_REQUEST
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from gateway.upstream.errors import UpstreamError
from gateway.upstream.http11 import Answer, Http11Pool, MalformedAnswer, ResponseTooLarge, UnsendableRequest

# Statuses with which a server refuses a POST before dispatching it (unknown endpoint or
# session, method, Accept or media type): the call did not run and may go through the SDK.
NOT_RUN_STATUSES = frozenset({404, 405, 406, 415})
# A 400 with no JSON-RPC error, with "invalid request" (the SDK's "Missing session ID") or with
# a header that disagrees with the body (-32020) was refused before dispatch as well.
REFUSED_BEFORE_DISPATCH = frozenset({None, INVALID_REQUEST, -32020})
AUTH_STATUSES = frozenset({401, 403})
JSON = "application/json"
EVENT_STREAM = "text/event-stream"
ACCEPT = f"{JSON}, {EVENT_STREAM}"
# Ids of their own (a stateless upstream correlates nothing across requests), far above the SDK's.
PLAIN_ID_BASE = 1 << 30
# As httpx2 writes the SDK's requests: compact, and no NaN/Infinity (not JSON; a ValueError here).
# One encoder for every call: json.dumps with options builds a new one each time.
_REQUEST_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class NotRun(Exception):
    """The upstream refused the plain POST before running anything: send the call the SDK's way."""


class SwitchToSdk(Exception):
    """Wraps the call's answer when the upstream streamed it: later calls should use the SDK."""

    def __init__(self, result: types.CallToolResult) -> None:
        super().__init__("event stream")
        self.result = result


class JsonCaller:
    """Plain-JSON `tools/call` over a pooled session's HTTP client, in the era that session negotiated."""

    def __init__(self, *, http: Http11Pool, protocol_version: str, client_info: types.Implementation) -> None:
        self._http = http
        self._version = protocol_version
        self._modern = protocol_version in MODERN_PROTOCOL_VERSIONS
        self._meta = {
            PROTOCOL_VERSION_META_KEY: protocol_version,
            CLIENT_INFO_META_KEY: client_info.model_dump(by_alias=True, mode="json", exclude_none=True),
            # The pooled SDK client registers no sampling, elicitation or roots callbacks: it
            # advertises no capabilities, and neither does this path.
            CLIENT_CAPABILITIES_META_KEY: {},
        }
        self._ids = itertools.count(PLAIN_ID_BASE)
        self._per_tool: dict[str, _ToolHeaders] = {}

    def _headers(self, pinned: types.Tool, arguments: Mapping[str, Any]) -> list[tuple[bytes, bytes]]:
        """The call's headers, encoded: the tool's fixed ones, then any `Mcp-Param-*` its arguments fill."""
        known = self._tool_headers(pinned)
        headers = list(known.fixed)
        if known.param_map:
            headers += _encoded(mcp_param_headers(known.param_map, arguments))
        return headers

    def _tool_headers(self, pinned: types.Tool) -> _ToolHeaders:
        """What every call of the PINNED definition sends alike, computed once per definition.

        `Mcp-Param-*` mirrors are those the pinned input schema declares; a
        re-pinned definition (another object) is computed anew.
        """
        known = self._per_tool.get(pinned.name)
        if known is not None and known.pinned is pinned:
            return known
        fixed = {"accept": ACCEPT, "content-type": JSON, MCP_PROTOCOL_VERSION_HEADER: self._version}
        param_map: dict[tuple[str, ...], str] = {}
        if self._modern:
            fixed[MCP_METHOD_HEADER] = "tools/call"
            fixed[MCP_NAME_HEADER] = encode_header_value(pinned.name)
            param_map = x_mcp_header_map(pinned.input_schema)
        known = self._per_tool[pinned.name] = _ToolHeaders(pinned, tuple(_encoded(fixed)), param_map)
        return known

    def close(self) -> None:
        self._http.close()

    def _request(
        self, pinned: types.Tool, arguments: Mapping[str, Any]
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """The call's JSON-RPC id, headers and body, stamped as the SDK stamps them in this era."""
        request_id = next(self._ids)
        params: dict[str, Any] = {"name": pinned.name, "arguments": dict(arguments)}
        if self._modern:
            params["_meta"] = self._meta
        message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
        body = _REQUEST_ENCODER.encode(message)
        return request_id, self._headers(pinned, arguments), body.encode()

    async def call(self, pinned: types.Tool, arguments: Mapping[str, Any]) -> types.CallToolResult:
        request_id, headers, body = self._request(pinned, arguments)
        with _wire_errors():
            response = await self._http.post(headers, body)
        return _answer(response, request_id)

    def call_blocking(
        self, pinned: types.Tool, arguments: Mapping[str, Any], *, deadline: float
    ) -> types.CallToolResult:
        """`call` on the calling thread's blocking socket, answered before `deadline` (time.monotonic())."""
        request_id, headers, body = self._request(pinned, arguments)
        with _wire_errors():
            response = self._http.post_blocking(headers, body, deadline=deadline)
        return _answer(response, request_id)


class _ToolHeaders(NamedTuple):
    pinned: types.Tool
    fixed: tuple[tuple[bytes, bytes], ...]
    param_map: dict[tuple[str, ...], str]


def _encoded(headers: Mapping[str, str]) -> Iterator[tuple[bytes, bytes]]:
    return ((name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items())


@contextlib.contextmanager
def _wire_errors() -> Iterator[None]:
    """What the HTTP client raises that is ours to word (the rest the session classifies)."""
    try:
        yield
    except ResponseTooLarge:
        raise UpstreamError(UpstreamError.TOO_LARGE, "the upstream's answer is too large") from None
    except MalformedAnswer:
        raise UpstreamError(UpstreamError.PROTOCOL, "the upstream's answer could not be understood") from None
    except UnsendableRequest:  # a header value we will not send (a control character)
        raise UpstreamError(UpstreamError.PROTOCOL, "the request could not be written") from None


def _answer(response: Answer, request_id: int) -> types.CallToolResult:
    """The upstream's answer to a plain POST: the call's result, NotRun, SwitchToSdk or an UpstreamError."""
    content_type = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    status = response.status
    if status in AUTH_STATUSES:
        raise UpstreamError(UpstreamError.AUTH, "the upstream refused the credentials (HTTP 401/403)")
    if status in NOT_RUN_STATUSES:
        raise NotRun(status)
    if status >= 300:
        error = _jsonrpc_error(response.body) if content_type == JSON else None
        if status == 400 and error in REFUSED_BEFORE_DISPATCH:  # a session required, a header it wants
            raise NotRun(status)
        if error is not None:
            raise UpstreamError(UpstreamError.PROTOCOL, f"the upstream answered a protocol error ({error})")
        raise UpstreamError(UpstreamError.HTTP, "the upstream answered with an HTTP error")
    if content_type == JSON:
        return _result(_message(response.body), request_id)
    if content_type == EVENT_STREAM and status == 200:
        raise SwitchToSdk(_streamed_result(response, request_id))
    raise UpstreamError(UpstreamError.PROTOCOL, "the upstream's answer could not be understood")


def _message(raw: bytes | str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        raise UpstreamError(UpstreamError.PROTOCOL, "the upstream's answer could not be understood") from None


def _jsonrpc_error(raw: bytes) -> int | None:
    try:
        message = json.loads(raw)
    except ValueError:
        return None
    error = message.get("error") if isinstance(message, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def _result(message: Any, request_id: int) -> types.CallToolResult:
    """The JSON-RPC answer to `request_id` as the SDK's CallToolResult (its validation, by alias only)."""
    if not isinstance(message, dict) or message.get("id") != request_id:
        raise UpstreamError(UpstreamError.PROTOCOL, "the upstream's answer could not be understood")
    error = message.get("error")
    if isinstance(error, dict):
        code = error.get("code")
        shown = int(code) if isinstance(code, int) and not isinstance(code, bool) else 0
        raise UpstreamError(UpstreamError.PROTOCOL, f"the upstream answered a protocol error ({shown})")
    try:
        return types.CallToolResult.model_validate(message.get("result"), by_name=False)
    except ValidationError:
        raise UpstreamError(UpstreamError.PROTOCOL, "the upstream's answer could not be understood") from None


def _streamed_result(answer: Answer, request_id: int) -> types.CallToolResult:
    """The answer to `request_id` among the events of a stream (already read, within the response cap).

    The events are parsed by httpx2's EventSource, the parser the SDK reads its
    own streams with: one SSE parser for every stream Toolgate reads, so a
    plain call and an SDK call read the same bytes the same way.
    """
    response = httpx2.Response(
        answer.status,
        headers=[(name.decode("latin-1"), value.decode("latin-1")) for name, value in answer.raw_headers],
        content=answer.body,
        request=httpx2.Request("POST", "http://upstream.invalid/"),  # EventSource names it in its errors
    )
    try:
        events = [(event.event, event.data) for event in httpx2.EventSource(response)]
    except httpx2.SSEError:  # an event past the SDK's size limit, or not an event stream
        raise UpstreamError(UpstreamError.PROTOCOL, "the upstream's answer could not be understood") from None
    for event, data in events:
        if event != "message" or not data:
            continue
        message = _message(data)
        if isinstance(message, dict) and message.get("id") == request_id and "method" not in message:
            return _result(message, request_id)
    raise UpstreamError(UpstreamError.PROTOCOL, "the upstream's answer could not be understood")
