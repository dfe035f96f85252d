"""JSON-RPC 2.0 and MCP's two protocol eras, over whatever HTTP front hands it a parsed body.

Eras (see the protocol specification, docs/specification/<revision>/ of modelcontextprotocol):
- handshake (2025-06-18, 2025-11-25): `initialize` negotiates the version, then
  every request carries `MCP-Protocol-Version`. No server session exists; an
  `Mcp-Session-Id` issued is self-contained (`Sessions`: what the client
  declared at `initialize`, sealed) and any process reads it, or (where logging
  is served) the key its `logging/setLevel` is kept under in the shared cache
  (`LogLevels`). A request without the header is taken for this era, as the
  SDK's own server does.
- modern (2026-07-28): no handshake; every request carries the version and the
  client's capabilities in `params._meta`, and the headers `MCP-Protocol-Version`,
  `Mcp-Method` and (for tools/call) `Mcp-Name` must agree with the body. The
  SDK's own ladder (`classify_inbound_request`) checks that, so Toolgate and
  the reference server refuse exactly the same requests.

Nothing here knows about Django or the runner: the caller's catalog and its
calls come through `Backend`, which the view binds to the caller.

HTTP statuses: errors of the message itself (unparseable, not a request, an
unsupported version, headers that disagree with the body) are 400. Method-level
errors are HTTP 200 in the handshake era, where clients (the 1.x SDK among
them) read JSON-RPC errors only from a 200, and the SDK's table (404 for an
unknown method, 400 for bad params) in the modern era, which requires them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    MCP_PROTOCOL_VERSION_HEADER,
    InboundLadderRejection,
    classify_inbound_request,
)
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    LOG_LEVEL_META_KEY,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    PROTOCOL_VERSION_META_KEY,
    SERVER_INFO_META_KEY,
    UNSUPPORTED_PROTOCOL_VERSION,
)

from gateway.elicitation import PersonNeeded
from gateway.inbound.asking import (
    NOTHING_DECLARED,
    PLAIN_CALL,
    CallEnvelope,
    Declared,
    InputNeeded,
    UrlElicitationRequired,
    declared_by,
    modern_declared,
    person_needed_answer,
)
from gateway.inbound.wire import (
    CALL_META_FIELDS,
    META_PREFIX,
    call_result,
    decode_cursor,
    encode_cursor,
    page_after,
    tool_entry,
)
from runner.progress import LOG_LEVELS
from runner.types import ToolExecResult, ToolSpec
from runner.wording import JSON_STRING_HINT, is_json_object_text

HANDSHAKE_VERSIONS: Final = ("2025-06-18", "2025-11-25")
MODERN_VERSIONS: Final = ("2026-07-28",)
SUPPORTED_VERSIONS: Final = (*HANDSHAKE_VERSIONS, *MODERN_VERSIONS)
SERVER_INFO: Final = {"name": "toolgate", "version": "1.0.0"}
CAPABILITIES: Final = {"tools": {"listChanged": False}}
INSTRUCTIONS: Final = (
    f"Tools governed by Toolgate. Out-of-band ids travel in params._meta: {', '.join(CALL_META_FIELDS)}; "
    f"a person's subject token in {META_PREFIX}subject (or the X-Toolgate-Subject header) makes the call, "
    "and the list, one on their behalf."
)
PAGE_SIZE = 100  # tools per tools/list page
MAX_ID_LENGTH: Final = 256  # a JSON-RPC id is echoed back: bound what we echo

SESSION_HEADER: Final = "mcp-session-id"

OK: Final = 200
ACCEPTED: Final = 202
BAD_REQUEST: Final = 400


@dataclass(frozen=True, slots=True)
class Reply:
    """What the HTTP front sends: a status, a JSON body (None: no body) and extra headers."""

    status: int
    body: dict[str, Any] | None
    headers: Mapping[str, str] = field(default_factory=dict)


class Backend(Protocol):
    """The caller's view of Toolgate: its catalog and the runner."""

    def list_tools(self, meta: Mapping[str, Any] | None = None) -> Sequence[ToolSpec]:
        """The caller's catalog, exactly as `GET /api/v1/tools` derives it (`meta`: the list's toolgate/ keys)."""
        ...

    def run_tool(
        self, name: str, arguments: dict[str, Any], meta: Mapping[str, Any], envelope: CallEnvelope = PLAIN_CALL
    ) -> ToolExecResult | PersonNeeded | InputNeeded | None:
        """Run one call through the runner; None when `name` is not in the caller's catalog.

        `PersonNeeded` when the call waits on its person (a confirmation, an approval);
        `InputNeeded` when its upstream asks the client (2026-07-28).
        """
        ...

    def may_ask_client(self, name: str) -> bool:
        """Whether calls of `name` may ask the client mid-call (a 2025-era client's then stream)."""
        ...


class FeatureBackend(Protocol):
    """Resources and prompts for one caller; a backend without these methods serves neither.

    `kind` is "resource", "template" (listed only; a template is read as a resource) or "prompt".
    Entries are the protocol's list shapes (a resource's `uri`, a template's `uriTemplate`, a
    prompt's `name`, as Toolgate names them); a refused read raises `Refused`.
    """

    def list_features(self, kind: str, meta: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]: ...

    def fetch_feature(
        self, kind: str, name: str, arguments: Mapping[str, Any], meta: Mapping[str, Any]
    ) -> dict[str, Any]: ...

    def feature_capabilities(self, meta: Mapping[str, Any]) -> Mapping[str, bool]: ...

    def complete_prompt(self, name: str, request: Mapping[str, Any], meta: Mapping[str, Any]) -> dict[str, Any]: ...


FEATURE_KEYS: Final = {
    "resource": ("resources", "uri"),
    "prompt": ("prompts", "name"),
    "template": ("resourceTemplates", "uriTemplate"),
}


class Sessions(Protocol):
    """Self-contained session ids: what a handshake-era client declared at `initialize`, sealed.

    The server keeps no sessions, yet only `initialize` carries the client's
    capabilities in 2025-11-25; the id hands them back on every later request.
    """

    def issue(self, declared: Declared) -> str | None:
        """The `Mcp-Session-Id` for a client that declared this (None: no id needed)."""
        ...

    def declared(self, session_id: str | None) -> Declared:
        """What the id says the client declared, if it is one of ours for this caller (else nothing)."""
        ...


class LogLevels(Protocol):
    """Where a handshake-era client's `logging/setLevel` is kept (logs.py): per session, no server session.

    Bound to the request's caller and its `Mcp-Session-Id`; 2026-07-28 needs none of it
    (the level travels in each request's `_meta`).
    """

    def issue(self) -> str:
        """A session id for a client that may set a level (given when `initialize` issues no other)."""
        ...

    def set_level(self, level: str) -> bool:
        """Keep the session's level; False when the request names no session."""
        ...


class _Refused(Exception):
    """A JSON-RPC error for the request being handled; the message is safe to send."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


Refused = _Refused  # what a backend raises for a refused read or fetch


def error_reply(
    status: int,
    code: int,
    message: str,
    *,
    request_id: Any = None,
    data: Any = None,
    headers: Mapping[str, str] | None = None,
) -> Reply:
    """A JSON-RPC error object; also used by the view for HTTP-level refusals (401, 405, 413...).

    `request_id` stays None (JSON null) when the request's id is unknown or
    unusable, as JSON-RPC 2.0 §5 asks for parse errors and invalid requests.
    """
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return Reply(status, {"jsonrpc": "2.0", "id": request_id, "error": error}, dict(headers or {}))


def internal_error_reply() -> Reply:
    """An unexpected failure: a generic error, never the exception's text."""
    return error_reply(500, INTERNAL_ERROR, "internal error")


def parse_error_reply(message: str) -> Reply:
    return error_reply(BAD_REQUEST, PARSE_ERROR, message)


def not_a_request_reply(message: str) -> Reply:
    return error_reply(BAD_REQUEST, INVALID_REQUEST, message)


def handle(
    message: Mapping[str, Any],
    headers: Mapping[str, str],
    backend: Backend,
    sessions: Sessions | None = None,
    logs: LogLevels | None = None,
) -> Reply:
    """Answer one JSON-RPC message (already parsed to an object).

    `headers` maps lower-case names to values (at least the MCP routing headers
    and `mcp-session-id`); `sessions` seals what a handshake-era client declared;
    `logs` keeps its log level (without it, a handshake-era client is offered no logging).
    """
    admitted = admit(message, headers, sessions)
    if isinstance(admitted, Reply):
        return admitted
    return answer(message, admitted, backend, sessions, logs)


def admit(
    message: Mapping[str, Any], headers: Mapping[str, str], sessions: Sessions | None = None
) -> Reply | CallEnvelope:
    """The refusal (or a notification's 202) a message gets before any method runs, else how to answer it.

    Separate from `answer` so that a call answered as an event stream is refused
    with the same HTTP status as a JSON one, before the stream's 200 is sent.
    """
    envelope_problem = _envelope_problem(message)
    if envelope_problem is not None:
        request_id = message.get("id") if _valid_id(message.get("id")) else None
        return error_reply(BAD_REQUEST, INVALID_REQUEST, envelope_problem, request_id=request_id)
    version_header = headers.get(MCP_PROTOCOL_VERSION_HEADER)
    if "id" not in message:  # a notification: nothing to answer, whatever its method
        if version_header is not None and version_header not in SUPPORTED_VERSIONS:
            return _unsupported(version_header, None)
        return Reply(ACCEPTED, None)
    request_id = message["id"]
    params: Mapping[str, Any] = message.get("params") or {}
    meta = params.get("_meta")
    modern = version_header in MODERN_VERSIONS or (isinstance(meta, Mapping) and PROTOCOL_VERSION_META_KEY in meta)
    if modern:
        verdict = classify_inbound_request(message, headers=headers, supported_modern_versions=MODERN_VERSIONS)
        if isinstance(verdict, InboundLadderRejection):
            status = ERROR_CODE_HTTP_STATUS.get(verdict.code, BAD_REQUEST)
            return error_reply(status, verdict.code, verdict.message, request_id=request_id, data=verdict.data)
        return CallEnvelope(
            modern=True,
            declared=modern_declared(meta),
            request_state=_request_state(params),
            input_responses=params.get("inputResponses"),
        )
    if version_header is not None and version_header not in HANDSHAKE_VERSIONS and message["method"] != "initialize":
        return _unsupported(version_header, request_id)
    return CallEnvelope(
        declared=sessions.declared(headers.get(SESSION_HEADER)) if sessions is not None else NOTHING_DECLARED
    )


def answer(
    message: Mapping[str, Any],
    envelope: CallEnvelope,
    backend: Backend,
    sessions: Sessions | None = None,
    logs: LogLevels | None = None,
) -> Reply:
    """Run an admitted request's method and answer it (`admit` said how)."""
    request_id = message["id"]
    method: str = message["method"]
    params: Mapping[str, Any] = message.get("params") or {}
    modern = envelope.modern
    reply_headers: dict[str, str] = {}
    try:
        if modern:
            _check_log_level(params)
        result = _dispatch(method, params, backend, envelope, logs)
    except _Refused as refused:
        status = ERROR_CODE_HTTP_STATUS.get(refused.code, OK) if modern else OK
        return error_reply(status, refused.code, refused.message, request_id=request_id, data=refused.data)
    if method == "initialize":
        session_id = None
        if sessions is not None:
            session_id = sessions.issue(declared_by(params.get("capabilities")))
        if session_id is None and logs is not None and "logging" in result["capabilities"]:
            session_id = logs.issue()  # the key its logging/setLevel is kept under
        if session_id is not None:
            reply_headers["Mcp-Session-Id"] = session_id
    if modern:
        result = {"resultType": "complete", **result}  # an InputRequiredResult keeps its own
    return Reply(OK, {"jsonrpc": "2.0", "id": request_id, "result": result}, reply_headers)


def _request_state(params: Mapping[str, Any]) -> str | None:
    """The echoed `requestState` of a 2026-07-28 retry; anything but a string is no state."""
    state = params.get("requestState")
    return state if isinstance(state, str) else None


def _envelope_problem(message: Mapping[str, Any]) -> str | None:
    """Why `message` is not a JSON-RPC 2.0 request or notification MCP accepts, or None."""
    if message.get("jsonrpc") != "2.0":
        return 'not a JSON-RPC 2.0 message: "jsonrpc" must be "2.0"'
    if "method" not in message:
        return "not a request: no method (responses and batches are not accepted)"
    if not isinstance(message["method"], str) or not message["method"]:
        return "method must be a non-empty string"
    if "id" in message and not _valid_id(message["id"]):
        return f"id must be a string or an integer of at most {MAX_ID_LENGTH} characters"
    if "params" in message and message["params"] is not None and not isinstance(message["params"], Mapping):
        return "params must be an object"
    return None


def _valid_id(value: Any) -> bool:
    """MCP ids are strings or integers, never null; a bool is not an integer here. Both are echoed: both bounded."""
    if isinstance(value, str):
        return len(value) <= MAX_ID_LENGTH
    return isinstance(value, int) and not isinstance(value, bool) and len(str(value)) <= MAX_ID_LENGTH


def _unsupported(requested: str, request_id: Any) -> Reply:
    return error_reply(
        BAD_REQUEST,
        UNSUPPORTED_PROTOCOL_VERSION,
        "unsupported protocol version",
        request_id=request_id,
        data={"supported": list(SUPPORTED_VERSIONS), "requested": requested[:64]},
    )


def _dispatch(
    method: str, params: Mapping[str, Any], backend: Backend, envelope: CallEnvelope, logs: LogLevels | None = None
) -> dict[str, Any]:
    modern = envelope.modern
    if method == "ping":
        return {}
    if method == "logging/setLevel" and not modern and logs is not None and _serves_logs(backend, params):
        return _set_level(params, logs)
    if method == "tools/list":
        return _list_tools(params, backend, modern=modern)
    if method == "tools/call":
        return _call_tool(params, backend, envelope)
    feature = _feature_method(method, params, backend, modern=modern)
    if feature is not None:
        return feature
    if method == "initialize" and not modern:
        return _initialize(params, _capabilities(backend, params, logging=logs is not None))
    if method == "server/discover" and modern:
        return {
            "supportedVersions": list(MODERN_VERSIONS),
            "capabilities": _capabilities(backend, params, logging=True),
            "instructions": INSTRUCTIONS,
            "ttlMs": 0,
            "cacheScope": "private",
            "_meta": {SERVER_INFO_META_KEY: SERVER_INFO},
        }
    raise _Refused(METHOD_NOT_FOUND, "method not found")


def _initialize(params: Mapping[str, Any], capabilities: Mapping[str, Any] = CAPABILITIES) -> dict[str, Any]:
    """The handshake: echo a version we speak, else offer our newest (the client decides)."""
    requested = params.get("protocolVersion")
    if not isinstance(requested, str):
        raise _Refused(INVALID_PARAMS, "protocolVersion must be a string")
    version = requested if requested in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1]
    return {
        "protocolVersion": version,
        "capabilities": capabilities,
        "serverInfo": SERVER_INFO,
        "instructions": INSTRUCTIONS,
    }


def _list_tools(params: Mapping[str, Any], backend: Backend, *, modern: bool) -> dict[str, Any]:
    cursor = params.get("cursor")
    after = None
    if cursor is not None:
        after = decode_cursor(cursor) if isinstance(cursor, str) else None
        if after is None:
            raise _Refused(INVALID_PARAMS, "invalid cursor")
    meta = params.get("_meta")
    toolgate_meta = (
        {key: value for key, value in meta.items() if key.startswith(META_PREFIX)} if isinstance(meta, Mapping) else {}
    )
    page, next_cursor = page_after(backend.list_tools(toolgate_meta), after, PAGE_SIZE)
    result: dict[str, Any] = {"tools": [tool_entry(spec) for spec in page]}
    if next_cursor is not None:
        result["nextCursor"] = next_cursor
    if modern:
        # Per caller, and a kill switch must reach the next list: never cached, never shared.
        result.update(ttlMs=0, cacheScope="private")
    return result


def _call_tool(params: Mapping[str, Any], backend: Backend, envelope: CallEnvelope) -> dict[str, Any]:
    name = params.get("name")
    if not isinstance(name, str) or not name:
        raise _Refused(INVALID_PARAMS, "name must be a non-empty string")
    arguments = params.get("arguments")
    if arguments is None:
        arguments = {}
    if is_json_object_text(arguments):
        raise _Refused(INVALID_PARAMS, f"arguments {JSON_STRING_HINT}")
    if not isinstance(arguments, dict):
        raise _Refused(INVALID_PARAMS, "arguments must be an object")
    meta = params.get("_meta")
    if meta is None:
        meta = {}
    if not isinstance(meta, Mapping):
        raise _Refused(INVALID_PARAMS, "_meta must be an object")
    toolgate_meta = {key: value for key, value in meta.items() if key.startswith(META_PREFIX)}
    result = backend.run_tool(name, arguments, toolgate_meta, envelope)
    if result is None:
        raise _Refused(INVALID_PARAMS, "unknown tool")
    if isinstance(result, PersonNeeded):
        try:
            return person_needed_answer(result, envelope)
        except UrlElicitationRequired as required:
            raise _Refused(required.code, required.message, required.data) from None
    if isinstance(result, InputNeeded):
        return result.answer()
    return call_result(result)


# --- log messages --------------------------------------------------------------------------


def _serves_logs(backend: Backend, params: Mapping[str, Any]) -> bool:
    """Whether this caller's calls can carry log messages (its backend says; one without the method: no)."""
    serves = getattr(backend, "serves_logs", None)
    return serves is not None and bool(serves(_toolgate_meta(params)))


def _check_log_level(params: Mapping[str, Any]) -> None:
    """A 2026-07-28 request's `_meta` log level, when it names one, must be a level (else -32602)."""
    meta = params.get("_meta")
    if isinstance(meta, Mapping) and LOG_LEVEL_META_KEY in meta and meta[LOG_LEVEL_META_KEY] not in LOG_LEVELS:
        raise _Refused(INVALID_PARAMS, f"{LOG_LEVEL_META_KEY} must be one of: {', '.join(LOG_LEVELS)}")


def _set_level(params: Mapping[str, Any], logs: LogLevels) -> dict[str, Any]:
    """`logging/setLevel` (2025-11-25): kept for the session `initialize` issued, read by its next calls."""
    level = params.get("level")
    if level not in LOG_LEVELS:
        raise _Refused(INVALID_PARAMS, f"level must be one of: {', '.join(LOG_LEVELS)}")
    if not logs.set_level(str(level)):
        raise _Refused(INVALID_REQUEST, "logging/setLevel needs the Mcp-Session-Id that initialize answered")
    return {}


# --- resources and prompts -----------------------------------------------------------------


def _toolgate_meta(params: Mapping[str, Any]) -> dict[str, Any]:
    meta = params.get("_meta")
    return (
        {key: value for key, value in meta.items() if key.startswith(META_PREFIX)} if isinstance(meta, Mapping) else {}
    )


def _capabilities(backend: Backend, params: Mapping[str, Any], *, logging: bool = False) -> dict[str, Any]:
    """Tools always; resources and prompts only when this caller (and its person) can see any.

    `logging` only when it is served: `logging` (the era can carry a level) and this caller's
    catalog holds a tool that can log (an upstream MCP tool). Subscriptions and list-changed
    notifications are not served (no stream to send them on).
    """
    capabilities: dict[str, Any] = dict(CAPABILITIES)
    if logging and _serves_logs(backend, params):
        capabilities["logging"] = {}
    features = getattr(backend, "feature_capabilities", None)
    if features is None:
        return capabilities
    visible = features(_toolgate_meta(params))
    if visible.get("resource"):
        capabilities["resources"] = {"subscribe": False, "listChanged": False}
    if visible.get("prompt"):
        capabilities["prompts"] = {"listChanged": False}
    if visible.get("completion"):
        capabilities["completions"] = {}
    return capabilities


_FEATURE_METHODS: Final = {
    "resources/list": ("resource", False),
    "resources/read": ("resource", True),
    "resources/templates/list": ("template", False),
    "prompts/list": ("prompt", False),
    "prompts/get": ("prompt", True),
}


def _feature_method(method: str, params: Mapping[str, Any], backend: Backend, *, modern: bool) -> dict[str, Any] | None:
    """The answer to a resources/prompts method, or None when `method` is not one of them."""
    if method == "completion/complete" and hasattr(backend, "complete_prompt"):
        return _complete(params, backend)  # type: ignore[arg-type]
    if method not in _FEATURE_METHODS:
        return None
    if not hasattr(backend, "list_features"):
        raise _Refused(METHOD_NOT_FOUND, "method not found")
    features: FeatureBackend = backend  # type: ignore[assignment]
    kind, fetch = _FEATURE_METHODS[method]
    list_key, name_key = FEATURE_KEYS[kind]
    meta = _toolgate_meta(params)
    if fetch:
        name = params.get(name_key)
        if not isinstance(name, str) or not name:
            raise _Refused(INVALID_PARAMS, f"{name_key} must be a non-empty string")
        arguments = params.get("arguments") if kind == "prompt" else None
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, Mapping):
            raise _Refused(INVALID_PARAMS, "arguments must be an object")
        return features.fetch_feature(kind, name, arguments, meta)
    cursor = params.get("cursor")
    after = None
    if cursor is not None:
        after = decode_cursor(cursor) if isinstance(cursor, str) else None
        if after is None:
            raise _Refused(INVALID_PARAMS, "invalid cursor")
    entries = sorted(features.list_features(kind, meta), key=lambda entry: str(entry[name_key]))
    remaining = [entry for entry in entries if after is None or str(entry[name_key]) > after]
    page = remaining[:PAGE_SIZE]
    result: dict[str, Any] = {list_key: page}
    if len(remaining) > PAGE_SIZE:
        result["nextCursor"] = encode_cursor(str(page[-1][name_key]))
    if modern:
        result.update(ttlMs=0, cacheScope="private")
    return result


def _complete(params: Mapping[str, Any], backend: FeatureBackend) -> dict[str, Any]:
    """`completion/complete` for a prompt's argument; a resource template's arguments are not completed."""
    ref = params.get("ref")
    if not isinstance(ref, Mapping) or ref.get("type") not in ("ref/prompt", "ref/resource"):
        raise _Refused(INVALID_PARAMS, "ref must be a ref/prompt or ref/resource object")
    if ref["type"] == "ref/resource":
        raise _Refused(INVALID_PARAMS, "completion of resource template arguments is not served")
    name = ref.get("name")
    if not isinstance(name, str) or not name:
        raise _Refused(INVALID_PARAMS, "ref.name must be a non-empty string")
    request = {"argument": params.get("argument"), "context": params.get("context")}
    return backend.complete_prompt(name, request, _toolgate_meta(params))
