"""Talking to upstream MCP servers: one-shot listing for discovery, pooled sessions for calls.

Everything here runs on the runner's background event loop (see
`runner.pipeline.BackgroundLoop`). An SDK client must be entered and exited in
the same task, so each pooled session has an owner task that holds it open
until it is closed (idle, lost, or replaced); calls from other tasks on the
loop share it (MCP multiplexes requests over one session). When the session's
negotiation shows a stateless upstream answering JSON, its calls go out as
plain POSTs instead (`lean.JsonCaller`, on keep-alive connections of its own
to the same checked address); the SDK client stays for discovery, sessions,
event streams and as the fallback. Once such a session is open, a web worker's
thread calls through it without the loop (`plain_session`, `UpstreamSession.call_blocking`):
the first call of a process opens and negotiates it on the loop.

Failures become `UpstreamError`s with a kind and a message written here:
nothing an upstream says (error text, stack traces, bodies) is passed on.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import os
import time
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx2
import mcp_types as types
from django.conf import settings
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp_types import LOG_LEVEL_META_KEY
from mcp_types.jsonrpc import CONNECTION_CLOSED, INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from core.netguard import (
    PinnedTransport,
    UnaskedContentEncoding,
    UpstreamAddressRefused,
    parse_endpoint,
    resolve_checked,
)
from gateway.asking import Asking, HeldAsk, MidCallQuestions, ask_refused, responses_of, vetted_ask
from gateway.hidden_characters import visible_text
from gateway.mcp_sdk import absorb_tool_listing
from gateway.upstream.errors import UpstreamError
from gateway.upstream.http11 import Http11Pool
from gateway.upstream.lean import JsonCaller, NotRun, SwitchToSdk
from runner.asking import ClientInput, InputAsk
from runner.progress import ProgressSink
from runner.redaction import carries_credential
from runner.strict_json import strings_are_clean

logger = logging.getLogger(__name__)

CLIENT_INFO = types.Implementation(name="toolgate", version="1")
CONNECT_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 300.0
CLOSE_TIMEOUT_S = 5.0
SESSION_TERMINATED = "Session terminated"
# A flood of `notifications/tools/list_changed` from one server within this window is reported once.
LIST_CHANGED_WINDOW_S = 0.5
# An upstream's progress message reaches the agent cut at this length.
PROGRESS_MESSAGE_MAX_CHARS = 500
# An upstream's log message: its logger name cut at this length, its data as JSON text at most this long
# (longer data reaches the agent as that text, cut), nested at most this deep.
LOG_LOGGER_MAX_CHARS = 128
LOG_DATA_MAX_CHARS = 4000
LOG_DATA_MAX_DEPTH = 16
NESTED_TOO_DEEP = "[nested too deep]"


@dataclass(frozen=True, slots=True)
class UpstreamTarget:
    """Where to connect and with which credential headers (never printed, never logged)."""

    server_id: str
    url: str
    allow_private: bool
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    # The tenant whose call this is ("" for discovery): an operator's credential is the same for
    # every tenant, and a session (its connections included) must never carry two tenants' calls.
    tenant_id: str = ""

    @property
    def pool_key(self) -> tuple[str, str, str, str]:
        """One pooled session per tenant, server and credential: the digest tells credentials apart."""
        digest = hashlib.sha256(repr(sorted(self.headers)).encode()).hexdigest()
        return (self.tenant_id, self.server_id, self.url, digest)


async def pinned_transport(target: UpstreamTarget) -> PinnedTransport:
    """A transport bound to the address the URL's host resolves to now, once checked."""
    endpoint = parse_endpoint(target.url)
    address = await resolve_checked(endpoint, allow_private=target.allow_private)
    return PinnedTransport(address=address, hostname=endpoint.host)


MessageHandler = Callable[[Any], Any]
LoggingCallback = Callable[[types.LoggingMessageNotificationParams], Any]


@contextlib.asynccontextmanager
async def connected(
    target: UpstreamTarget,
    transport: PinnedTransport,
    *,
    message_handler: MessageHandler | None = None,
    elicitation_callback: Any = None,
    sampling_callback: Any = None,
    logging_callback: LoggingCallback | None = None,
) -> AsyncIterator[Client]:
    """An initialised SDK client over `transport` (enter and exit in one task).

    A callback makes the SDK declare its capability (elicitation, sampling) to the
    upstream; without one (every pooled session) it declares none.
    """
    timeout = httpx2.Timeout(CONNECT_TIMEOUT_S, read=300.0)
    async with httpx2.AsyncClient(transport=transport, headers=dict(target.headers), timeout=timeout) as http:
        client = Client(
            streamable_http_client(target.url, http_client=http),
            mode="auto",
            cache=None,
            client_info=CLIENT_INFO,
            message_handler=message_handler,
            elicitation_callback=elicitation_callback,
            sampling_callback=sampling_callback,
            logging_callback=logging_callback,
        )
        async with client:
            yield client


def counters(transport: PinnedTransport) -> tuple[int, int, int, int]:
    return (transport.auth_rejections, transport.oversized, transport.not_found, transport.framing_errors)


def classify(
    exc: BaseException, transport: PinnedTransport | None, before: tuple[int, int, int, int] = (0, 0, 0, 0)
) -> UpstreamError:
    """Turn whatever the SDK or httpx2 raised into an UpstreamError with a message of ours."""
    leaf = _leaf(exc)
    if isinstance(leaf, UpstreamError):
        return leaf
    if isinstance(leaf, UpstreamAddressRefused):
        return UpstreamError(UpstreamError.REFUSED, str(leaf))
    if _caused_by(exc, UnaskedContentEncoding):  # the SDK folds it into a generic error, but keeps the chain
        return UpstreamError(UpstreamError.PROTOCOL, UnaskedContentEncoding.MESSAGE)
    anomaly = _transport_anomaly(transport, before)
    if anomaly is not None:
        return anomaly
    if isinstance(leaf, MCPError):
        session_gone = transport is not None and transport.not_found > before[2]
        if leaf.code == INVALID_REQUEST and (session_gone or leaf.error.message == SESSION_TERMINATED):
            return UpstreamError(UpstreamError.LOST, "the upstream no longer knows the session")
        if leaf.code == CONNECTION_CLOSED:
            return UpstreamError(UpstreamError.UNREACHABLE, "the connection to the upstream closed")
        if leaf.code == INTERNAL_ERROR and leaf.error.message == "Server returned an error response":
            return UpstreamError(UpstreamError.HTTP, "the upstream answered with an HTTP error")
        return UpstreamError(UpstreamError.PROTOCOL, f"the upstream answered a protocol error ({int(leaf.code)})")
    if isinstance(leaf, httpx2.TimeoutException | TimeoutError):
        return UpstreamError(UpstreamError.TIMEOUT, "the upstream did not answer in time")
    if isinstance(leaf, httpx2.ConnectError | ConnectionError | OSError):
        return UpstreamError(UpstreamError.UNREACHABLE, "the upstream cannot be reached")
    if isinstance(leaf, httpx2.HTTPError):
        return UpstreamError(UpstreamError.UNREACHABLE, "the connection to the upstream failed")
    return UpstreamError(UpstreamError.PROTOCOL, "the upstream's answer could not be understood")


def _transport_anomaly(transport: PinnedTransport | None, before: tuple[int, int, int, int]) -> UpstreamError | None:
    """What the transport counted during the exchange (its counters now against `before`), as the cause."""
    if transport is None:
        return None
    if transport.auth_rejections > before[0]:
        return UpstreamError(UpstreamError.AUTH, "the upstream refused the credentials (HTTP 401/403)")
    if transport.oversized > before[1]:
        return UpstreamError(UpstreamError.TOO_LARGE, "the upstream's answer is too large")
    if transport.framing_errors > before[3]:
        return UpstreamError(
            UpstreamError.PROTOCOL,
            "the upstream's HTTP answer was framed ambiguously (two answers, or two lengths); "
            "its connection was closed",
        )
    return None


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    """Whether `kind` is in the exception's groups, causes or contexts (each looked at once)."""
    pending: list[BaseException | None] = [exc]
    seen: set[int] = set()
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        if isinstance(current, kind):
            return True
        seen.add(id(current))
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        pending.extend((current.__cause__, current.__context__))
    return False


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


# --- discovery: one short-lived session ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class Listing:
    tools: list[dict[str, Any]]
    protocol_version: str
    # The server's resources, resource templates and prompts, when it declares those capabilities (else empty).
    resources: list[dict[str, Any]] = field(default_factory=list)
    prompts: list[dict[str, Any]] = field(default_factory=list)
    templates: list[dict[str, Any]] = field(default_factory=list)
    completions: bool = False  # the server declares `completions` (argument suggestions for its prompts)


async def list_all_tools(target: UpstreamTarget, *, max_tools: int, max_pages: int) -> Listing:
    """Every page of `tools/list`, as plain JSON (camelCase), refusing more than the bounds allow."""
    transport: PinnedTransport | None = None
    try:
        transport = await pinned_transport(target)
        async with connected(target, transport) as client:
            tools: list[dict[str, Any]] = []
            cursor: str | None = None
            for _page in range(max_pages):
                page = await client.list_tools(cursor=cursor)
                tools.extend(tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in page.tools)
                if len(tools) > max_tools:
                    raise UpstreamError(UpstreamError.TOO_LARGE, f"the server lists more than {max_tools} tools")
                cursor = page.next_cursor
                if not cursor:
                    resources, prompts, templates = await _list_features(
                        client, max_items=max_tools, max_pages=max_pages
                    )
                    return Listing(
                        tools=tools,
                        protocol_version=str(client.protocol_version or ""),
                        resources=resources,
                        prompts=prompts,
                        templates=templates,
                        completions=client.server_capabilities.completions is not None,
                    )
            raise UpstreamError(UpstreamError.TOO_LARGE, f"the listing goes past {max_pages} pages")
    except Exception as exc:
        raise classify(exc, transport) from None


async def _list_features(
    client: Client, *, max_items: int, max_pages: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Every page of `resources/list`, `resources/templates/list` and `prompts/list`, when the server declares it."""
    capabilities = client.server_capabilities
    resources: list[dict[str, Any]] = []
    prompts: list[dict[str, Any]] = []
    templates: list[dict[str, Any]] = []
    if capabilities.resources is not None:
        resources = await _all_pages(client.list_resources, "resources", max_items=max_items, max_pages=max_pages)
        try:
            templates = await _all_pages(
                client.list_resource_templates, "resource_templates", max_items=max_items, max_pages=max_pages
            )
        except MCPError as error:  # `resources` declared, templates not served (an older or partial server)
            if error.code != METHOD_NOT_FOUND:
                raise
    if capabilities.prompts is not None:
        prompts = await _all_pages(client.list_prompts, "prompts", max_items=max_items, max_pages=max_pages)
    return resources, prompts, templates


async def _all_pages(
    list_page: Callable[..., Any], key: str, *, max_items: int, max_pages: int
) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    cursor: str | None = None
    for _page in range(max_pages):
        page = await list_page(cursor=cursor)
        entries.extend(item.model_dump(mode="json", by_alias=True, exclude_none=True) for item in getattr(page, key))
        if len(entries) > max_items:
            raise UpstreamError(UpstreamError.TOO_LARGE, f"the server lists more than {max_items} {key}")
        cursor = page.next_cursor
        if not cursor:
            return entries
    raise UpstreamError(UpstreamError.TOO_LARGE, f"the {key} listing goes past {max_pages} pages")


# --- calls: pooled sessions -------------------------------------------------------------


class ListChangedSignal:
    """Coalesces upstreams' `notifications/tools/list_changed` into one report per server and window.

    A session's message handler calls `notice` on the event loop; the first
    notice of a server opens a short window, and when it closes `report(server_id)`
    runs once in a worker thread (it may block: it queues a discovery). Notices
    during the window are absorbed; one after it opens the next window, so a
    change announced while a discovery already runs is not lost.
    """

    def __init__(self, report: Callable[[str], None], *, window_s: float = LIST_CHANGED_WINDOW_S) -> None:
        self._report = report
        self._window_s = window_s
        self._open: set[str] = set()

    def notice(self, server_id: str) -> None:
        if server_id in self._open:
            return
        self._open.add(server_id)
        asyncio.get_running_loop().call_later(self._window_s, self._close, server_id)

    def _close(self, server_id: str) -> None:
        self._open.discard(server_id)
        asyncio.get_running_loop().run_in_executor(None, self._report_safely, server_id)

    def _report_safely(self, server_id: str) -> None:
        try:
            self._report(server_id)
        except Exception as exc:  # the next interval discovers anyway; never kill the loop's thread pool
            logger.warning("mcp server %s: list change not reported (%s)", server_id, type(exc).__name__)


_list_changed_report: list[Callable[[str], None]] = []


def on_tools_list_changed(report: Callable[[str], None]) -> None:
    """Set what pooled sessions do when an upstream says its tools changed (the composition root does)."""
    _list_changed_report[:] = [report]


class UpstreamSession:
    """One live session, held open by its owner task until closed.

    An upstream that keeps a session (2025-06-18 / 2025-11-25 with `Mcp-Session-Id`)
    can push `notifications/tools/list_changed` on it; they go to `list_changed`.
    A stateless upstream, or one answering plain JSON, has no channel to push on,
    and a 2026-07-28 upstream announces changes only on a `subscriptions/listen`
    stream, which is not held open: their changes are found at the next discovery.
    """

    def __init__(self, target: UpstreamTarget, *, list_changed: ListChangedSignal | None = None) -> None:
        self.target = target
        self._list_changed = list_changed
        self.client: Client | None = None
        self.transport: PinnedTransport | None = None
        self.json_caller: JsonCaller | None = None
        self.dead = False
        self.last_used = time.monotonic()
        self._absorbed: set[str] = set()
        self._ready = asyncio.Event()
        self._closing = asyncio.Event()
        self._error: UpstreamError | None = None
        self._task: asyncio.Task[None] | None = None

    async def open(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._own(), name=f"mcp-session-{self.target.server_id}")
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                await self._ready.wait()
        except TimeoutError:
            self.close_soon()
            raise UpstreamError(UpstreamError.TIMEOUT, "connecting to the upstream timed out") from None
        if self._error is not None:
            raise self._error

    async def _own(self) -> None:
        transport: PinnedTransport | None = None
        try:
            transport = await pinned_transport(self.target)
            async with connected(self.target, transport, message_handler=self._on_message) as client:
                self.client, self.transport = client, transport
                self.json_caller = plain_json_caller(self.target, client, transport)
                if self.json_caller is not None:
                    _plain_sessions[self.target.pool_key] = self
                self._ready.set()
                await self._closing.wait()
        except Exception as exc:
            self._error = classify(exc, transport)
            logger.debug("mcp session for server %s ended: %s", self.target.server_id, self._error.kind)
        finally:
            self.dead = True
            if _plain_sessions.get(self.target.pool_key) is self:
                del _plain_sessions[self.target.pool_key]
            if self.json_caller is not None:
                self.json_caller.close()
            self._ready.set()

    async def _on_message(self, message: Any) -> None:
        if self._list_changed is not None and isinstance(message, types.ToolListChangedNotification):
            self._list_changed.notice(self.target.server_id)

    def close_soon(self) -> None:
        self.dead = True
        self._closing.set()

    async def close(self) -> None:
        self.close_soon()
        if self._task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await asyncio.shield(self._task)

    async def call(
        self,
        pinned: types.Tool,
        arguments: Mapping[str, Any],
        *,
        progress: ProgressSink | None = None,
        secrets: frozenset[str] = frozenset(),
    ) -> types.CallToolResult:
        """`tools/call` of a pinned tool: a plain POST when the upstream allows, else the SDK's way.

        With a `progress` sink the call goes the SDK's way (it asks the upstream for
        progress and reads its event stream), and the sink can stop it. A progress
        message holding one of `secrets` (the call's credential) arrives without its text.
        """
        client, transport = self.client, self.transport
        if client is None or transport is None or self.dead:
            raise UpstreamError(UpstreamError.LOST, "the session is closed")
        self.last_used = time.monotonic()
        try:
            if self.json_caller is not None and progress is None:
                result = await self._call_plain(self.json_caller, pinned, arguments)
                if result is not None:
                    return result
            return await self._call_sdk(client, transport, pinned, arguments, progress=progress, secrets=secrets)
        finally:
            self.last_used = time.monotonic()

    async def _call_plain(
        self, caller: JsonCaller, pinned: types.Tool, arguments: Mapping[str, Any]
    ) -> types.CallToolResult | None:
        """The plain-JSON call, or None when the upstream refused it unrun (the SDK then sends it)."""
        try:
            return await caller.call(pinned, arguments)
        except Exception as exc:
            return self._plain_failed(caller, exc, deadline=math.inf)

    def _plain_failed(self, caller: JsonCaller, exc: Exception, *, deadline: float) -> types.CallToolResult | None:
        """What a plain call's exception means, alike on the session's loop and on a caller's thread.

        None: the upstream refused the POST unrun (later calls go through the SDK);
        the streamed answer's result (later calls go through the SDK); else raised:
        a TimeoutError at `deadline` (the caller's budget) as it is, anything else
        as an UpstreamError (LOST when the session itself died: nothing ran).
        """
        if isinstance(exc, NotRun):
            logger.info("mcp server %s: plain JSON calls refused; calls go through the SDK", self.target.server_id)
            self._drop_plain(caller)
            return None
        if isinstance(exc, SwitchToSdk):
            logger.info("mcp server %s answers event streams; calls go through the SDK", self.target.server_id)
            self._drop_plain(caller)
            return exc.result
        if isinstance(exc, TimeoutError) and time.monotonic() >= deadline:
            raise exc
        # The plain path does not go through the SDK's transport: its counters say nothing of this call.
        error = classify(exc, None)
        if self.dead and error.kind == UpstreamError.UNREACHABLE:
            error = UpstreamError(UpstreamError.LOST, error.safe_message)
        raise error from None

    def _drop_plain(self, caller: JsonCaller) -> None:
        """Later calls go through the SDK; the dropped caller's connections are closed on the session's loop."""
        if self.json_caller is caller:
            self.json_caller = None
        if self._task is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: so are its connections
                self._task.get_loop().call_soon_threadsafe(caller.close)

    def call_blocking(
        self, pinned: types.Tool, arguments: Mapping[str, Any], *, deadline: float
    ) -> types.CallToolResult | None:
        """The plain-JSON call on the calling thread (not the session's loop), or None when it cannot be.

        None means nothing ran: the session has no plain caller (any more), or the
        upstream refused the plain POST unrun (later calls then go through the SDK,
        as on the loop). A TimeoutError at `deadline` passes through: the runner
        reports the call's timeout. Thread-safe: the caller's blocking connections
        are one thread's at a time, and dropping the caller is one attribute write.
        """
        caller = self.json_caller
        if caller is None or self.dead:
            return None
        self.last_used = time.monotonic()
        try:
            return caller.call_blocking(pinned, arguments, deadline=deadline)
        except Exception as exc:
            return self._plain_failed(caller, exc, deadline=deadline)
        finally:
            self.last_used = time.monotonic()

    async def _call_sdk(
        self,
        client: Client,
        transport: PinnedTransport,
        pinned: types.Tool,
        arguments: Mapping[str, Any],
        *,
        progress: ProgressSink | None = None,
        secrets: frozenset[str] = frozenset(),
    ) -> types.CallToolResult:
        """`tools/call` through the SDK client; it validates nothing against a live listing."""
        if pinned.name not in self._absorbed:
            _absorb_pinned(client, pinned)
            self._absorbed.add(pinned.name)
        before = counters(transport)
        try:
            if progress is None:
                return await client.call_tool(pinned.name, dict(arguments))
            return await _call_with_progress(client, pinned.name, dict(arguments), progress, secrets=secrets)
        except Exception as exc:
            error = classify(exc, transport, before)
            if self.dead and error.kind == UpstreamError.UNREACHABLE:
                # The session itself died (restart, connection refused): the request never ran.
                error = UpstreamError(UpstreamError.LOST, error.safe_message)
            raise error from None


def _absorb_pinned(client: Client, pinned: types.Tool) -> None:
    """The SDK lists tools after a first call to validate output against the *live* schema.

    Absorbing the pinned definition (without its output schema: Toolgate validates
    against the pinned one itself) means it never fetches or trusts the live listing.
    """
    absorb_tool_listing(client, [pinned.model_copy(update={"output_schema": None})])


async def _call_with_progress(
    client: Client,
    name: str,
    arguments: dict[str, Any],
    progress: ProgressSink,
    *,
    secrets: frozenset[str] = frozenset(),
    meta: dict[str, Any] | None = None,
) -> types.CallToolResult:
    """The SDK's call with a progress callback, in a task the sink's reader can cancel.

    Cancelling the task is how the SDK stops a request: it sends the upstream
    `notifications/cancelled` for it. The cancellation surfaces as an UpstreamError
    of kind CANCELLED (not asyncio's CancelledError, which would read as the budget's cut).
    Without progress asked for (a client that wants only log messages) no token is sent.
    """

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        # Upstream text, shown to the agent: hidden characters written out as for descriptions, and
        # bounded; a value JSON cannot carry (NaN, infinity) is not passed on, nor a credential's text.
        if not math.isfinite(value) or (total is not None and not math.isfinite(total)):
            return
        if message is not None and secrets and carries_credential(message, secrets):
            message = None
        shown = visible_text(message[:PROGRESS_MESSAGE_MAX_CHARS]) if message is not None else None
        progress.report(value, total, shown)

    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(
        client.call_tool(name, arguments, progress_callback=on_progress if progress.wants_progress else None, meta=meta)
    )
    progress.on_cancel(lambda: loop.call_soon_threadsafe(task.cancel))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.cancel()
        if progress.cancelled.is_set() and task.cancelled():
            raise UpstreamError(UpstreamError.CANCELLED, "the call was cancelled by the client") from None
        raise


# --- calls that may ask the client (gateway/asking.py) ------------------------------------


async def call_asking(
    target: UpstreamTarget,
    pinned: types.Tool,
    arguments: Mapping[str, Any],
    *,
    asking: Asking,
    client: ClientInput,
    held: HeldAsk | None = None,
) -> types.CallToolResult | InputAsk:
    """`tools/call` through a session that declares `asking`; the upstream's result, or its vetted questions.

    A session of its own, not the pooled one: the SDK declares capabilities per
    session (from its callbacks), and a pooled session's must stay "none". A
    handshake-era upstream (2025-11-25) asks mid-call, on the call's stream, and
    waits on that connection: `MidCallQuestions` answers it, through `held` when
    the call is held for a 2026-07-28 client's retry (upstream/held.py).
    """
    transport = None
    questions = MidCallQuestions(asking, client, held)
    try:
        transport = await pinned_transport(target)
        async with connected(
            target,
            transport,
            elicitation_callback=questions.elicitation if asking.elicitation else None,
            sampling_callback=questions.sampling if asking.sampling else None,
        ) as session_client:
            result = await session_client.session.call_tool(
                pinned.name,
                dict(arguments),
                input_responses=responses_of(client),
                request_state=client.upstream_state,
                allow_input_required=True,
            )
    except Exception as exc:
        if questions.problem is not None:  # the upstream asked, was not answered, and failed the call for it
            raise ask_refused(questions.problem) from None
        raise classify(exc, transport) from None
    if isinstance(result, types.InputRequiredResult):
        return vetted_ask(result, asking)
    if not isinstance(result, types.CallToolResult):
        raise UpstreamError(UpstreamError.PROTOCOL, "the upstream's answer could not be understood")
    return result


def shown_log(
    params: types.LoggingMessageNotificationParams, secrets: frozenset[str] = frozenset()
) -> tuple[str | None, Any] | None:
    """An upstream's log message as the agent may see it (logger, data); None when it must not pass at all.

    Untrusted upstream text, under the rules of progress messages and descriptions: hidden
    characters written out as `[U+XXXX]` (in keys too), bounded (data whose JSON is longer than
    LOG_DATA_MAX_CHARS reaches the agent as that JSON text, cut; deeper than LOG_DATA_MAX_DEPTH
    is cut too). A message that holds NUL or a lone surrogate, or gives the call's credential away
    (whole, base64, or split by whitespace), is dropped: a log line is never worth a secret.
    """
    logger_name = params.logger if isinstance(params.logger, str) else None
    raw = [logger_name, params.data]
    if not strings_are_clean(raw) or (secrets and carries_credential(raw, secrets)):
        return None
    data = _visible(params.data, depth=0)
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    if len(text) > LOG_DATA_MAX_CHARS:
        data = (data if isinstance(data, str) else text)[:LOG_DATA_MAX_CHARS] + " [cut]"
    shown_logger = visible_text(logger_name[:LOG_LOGGER_MAX_CHARS]) if logger_name else None
    return shown_logger, data


def _visible(value: Any, *, depth: int) -> Any:
    """A JSON value with every string shown as `visible_text` shows it; numbers JSON cannot carry become null."""
    if isinstance(value, str):
        return visible_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict | list) and depth >= LOG_DATA_MAX_DEPTH:
        return NESTED_TOO_DEEP
    if isinstance(value, dict):
        return {visible_text(str(key)): _visible(item, depth=depth + 1) for key, item in value.items()}
    if isinstance(value, list):
        return [_visible(item, depth=depth + 1) for item in value]
    return value


async def call_alone(
    target: UpstreamTarget,
    pinned: types.Tool,
    arguments: Mapping[str, Any],
    progress: ProgressSink,
    *,
    secrets: frozenset[str] = frozenset(),
) -> types.CallToolResult:
    """A call whose client asked for log messages, on a session of its own, closed when it answers.

    Why not the pooled session: the SDK hands every `notifications/message` of a session to
    one session-wide callback, with nothing saying which request it came with, and a pooled
    session carries other callers' calls at the same time. On a session of its own every log
    message is this call's. The cost (a connection and a handshake, tens of milliseconds) is
    paid only by calls that asked for logs. The upstream is told the level: in `_meta` on the
    call (`io.modelcontextprotocol/logLevel`, how 2026-07-28 asks, harmless before), and by
    `logging/setLevel` on this session when a 2025-era upstream declares `logging`; whatever it
    sends is filtered again by the sink.
    """
    level = progress.log_level

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        if not progress.wants_log(params.level):
            return
        shown = shown_log(params, secrets)
        if shown is not None:
            progress.log(params.level, *shown)

    transport: PinnedTransport | None = None
    try:
        transport = await pinned_transport(target)
        async with connected(target, transport, logging_callback=on_log) as client:
            _absorb_pinned(client, pinned)
            if level is not None and client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
                await _set_level(client, level, server_id=target.server_id)
            meta = {LOG_LEVEL_META_KEY: level} if level is not None else None
            before = counters(transport)
            try:
                return await _call_with_progress(
                    client, pinned.name, dict(arguments), progress, secrets=secrets, meta=meta
                )
            except UpstreamError:
                raise
            except Exception as exc:
                raise classify(exc, transport, before) from None
    except UpstreamError:
        raise
    except Exception as exc:
        raise classify(exc, transport) from None


async def _set_level(client: Client, level: str, *, server_id: str) -> None:
    """`logging/setLevel` on a 2025-era session, when the upstream declares `logging`; a refusal changes nothing."""
    if client.server_capabilities.logging is None:
        return
    request = types.SetLevelRequest(params=types.SetLevelRequestParams(level=level))  # type: ignore[arg-type]
    try:
        await client.session.send_request(request, types.EmptyResult)
    except MCPError:
        logger.debug("mcp server %s refused logging/setLevel", server_id)


def plain_json_caller(target: UpstreamTarget, client: Client, transport: PinnedTransport) -> JsonCaller | None:
    """A plain-JSON caller when the negotiation showed a stateless upstream answering JSON, else None.

    `TOOLGATE_MCP_PLAIN_JSON_CALLS=false` keeps every call on the SDK's path (an operator's way
    out should an upstream misread plain calls; the benchmark compares both paths with it).
    """
    version = client.protocol_version
    if not version or transport.session_ids or transport.event_streams or not settings.TOOLGATE_MCP_PLAIN_JSON_CALLS:
        return None
    http = Http11Pool(
        url=target.url,
        address=transport.address,
        hostname=transport.hostname,
        max_response_bytes=transport.max_response_bytes,
        connect_timeout_s=CONNECT_TIMEOUT_S,
        headers=target.headers,
    )
    return JsonCaller(http=http, protocol_version=str(version), client_info=CLIENT_INFO)


class SessionPool:
    """Pooled sessions of one event loop: one per tenant, server and credential, closed when idle."""

    def __init__(
        self, *, idle_timeout_s: float = IDLE_TIMEOUT_S, list_changed: ListChangedSignal | None = None
    ) -> None:
        self._idle_timeout_s = idle_timeout_s
        self._list_changed = list_changed
        self._sessions: dict[tuple[str, str, str, str], UpstreamSession] = {}
        self._locks: dict[tuple[str, str, str, str], asyncio.Lock] = {}

    async def session(self, target: UpstreamTarget) -> UpstreamSession:
        self._close_idle()
        key = target.pool_key
        session = self._sessions.get(key)
        if session is not None and not session.dead:
            return session
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            session = self._sessions.get(key)
            if session is not None and not session.dead:
                return session
            session = UpstreamSession(target, list_changed=self._list_changed)
            await session.open()
            self._sessions[key] = session
            return session

    async def discard(self, session: UpstreamSession) -> None:
        key = session.target.pool_key
        if self._sessions.get(key) is session:
            del self._sessions[key]
        await session.close()

    async def call(
        self,
        target: UpstreamTarget,
        pinned: types.Tool,
        arguments: Mapping[str, Any],
        *,
        progress: ProgressSink | None = None,
        secrets: frozenset[str] = frozenset(),
    ) -> types.CallToolResult:
        """Call over the pooled session; a lost session is replaced and the call sent once more.

        Only a session the upstream no longer knows (or that died before the
        request left) is retried: a request that may have run is never resent.
        A call whose client asked for log messages goes on a session of its own (`call_alone`).
        `secrets` (the call's credential) keep progress and log text that would give it away out.
        """
        if progress is not None and progress.log_level is not None:
            return await call_alone(target, pinned, arguments, progress, secrets=secrets)
        session = await self.session(target)
        try:
            return await session.call(pinned, arguments, progress=progress, secrets=secrets)
        except UpstreamError as error:
            if error.kind != UpstreamError.LOST:
                raise
            await self.discard(session)
        session = await self.session(target)
        return await session.call(pinned, arguments, progress=progress, secrets=secrets)

    async def request(self, target: UpstreamTarget, send: Callable[[Client], Any]) -> Any:
        """Any other request over the pooled session's SDK client (`resources/read`, `prompts/get`).

        Retried on a fresh session only when the pooled one was lost before the request left,
        as `call` does; whatever the SDK or the transport raised becomes an UpstreamError.
        """
        for attempt in range(2):
            session = await self.session(target)
            client, transport = session.client, session.transport
            if client is None or transport is None or session.dead:
                await self.discard(session)
                continue
            before = counters(transport)
            session.last_used = time.monotonic()
            try:
                return await send(client)
            except Exception as exc:
                error = classify(exc, transport, before)
                if session.dead and error.kind == UpstreamError.UNREACHABLE:
                    error = UpstreamError(UpstreamError.LOST, error.safe_message)
                if error.kind != UpstreamError.LOST or attempt:
                    raise error from None
                await self.discard(session)
            finally:
                session.last_used = time.monotonic()
        raise UpstreamError(UpstreamError.LOST, "the session is closed")

    def _close_idle(self) -> None:
        now = time.monotonic()
        for key, session in list(self._sessions.items()):
            if session.dead or now - session.last_used > self._idle_timeout_s:
                del self._sessions[key]
                session.close_soon()

    def __len__(self) -> int:
        return len(self._sessions)


_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, SessionPool] = weakref.WeakKeyDictionary()

# Live sessions with a plain-JSON caller, by pool key: what a web worker's thread calls through
# without a hop to the loop (`plain_session`). Kept by the sessions themselves; a forked child
# starts empty (its parent's sockets are not its own).
_plain_sessions: dict[tuple[str, str, str, str], UpstreamSession] = {}
os.register_at_fork(after_in_child=_plain_sessions.clear)


def plain_session(target: UpstreamTarget) -> UpstreamSession | None:
    """The live pooled session of `target` (any loop's) whose calls go out as plain POSTs, else None."""
    session = _plain_sessions.get(target.pool_key)
    if session is None or session.dead or session.json_caller is None:
        return None
    return session


def pool_for_running_loop() -> SessionPool:
    """The pool of the loop this coroutine runs on (each forked process has its own loop)."""
    loop = asyncio.get_running_loop()
    pool = _pools.get(loop)
    if pool is None:
        signal = ListChangedSignal(_list_changed_report[0]) if _list_changed_report else None
        pool = _pools[loop] = SessionPool(list_changed=signal)
    return pool
