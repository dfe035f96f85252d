"""The stdio children of the MCP host: start, hold, log, restart with backoff, stop when idle.

Each child is held by an owner task through the SDK's stdio client (a client must be
entered and exited in one task). Its stderr is a pipe the host reads: lines go to
Toolgate's log, cut, rate-limited, tagged with the server's slug and with declared
secrets blanked; the pipe's end of file is also how the host learns that the child
(and everything it started) exited, between calls as well as during one.

Log messages: stdio gives a notification no request id, and one child serves every call
of its server (and, without a provider, every tenant). So a child's `notifications/message`
is handed to a call that asked for logs only while that call is the child's only request in
flight; with two or more, nobody can tell whose it is, and it is dropped rather than shown
to a caller it may not belong to.

Questions (questions.py): a child is started declaring elicitation and sampling, once, at
initialize (a 2025-era child reads its client's capabilities there and never again; the SDK's
client declares elicitation's form and URL modes, and the host refuses URL mode), because one
child serves every call of its connection and some of those calls may ask. What each call may
ask is the worker's declaration on that call. A child's request carries no id of the call it
belongs to either, so a question goes to a call only while that call is the child's only
request in flight, and only when that call may ask it; otherwise it is refused with an MCP
error. A held question keeps its call in flight: until it is answered, another call of the
same child cannot be asked anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp import Client, MCPError
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_types import LOG_LEVEL_META_KEY
from mcp_types.jsonrpc import CONNECTION_CLOSED, INVALID_REQUEST

from gateway.asking import Asking
from gateway.host.egress import EgressProxy, ProxyLimits
from gateway.host.environment import DEFAULT_PATH, child_environment
from gateway.host.packages import PackageError, package_dir, parse_package, programs_dir, version_of
from gateway.host.questions import (
    DECLINED_GRACE_S,
    HOLD_S,
    NOT_PASSED,
    SEVERAL_CALLS,
    CallQuestions,
    HeldCall,
    answer_for,
    arguments_digest,
    token_of,
)
from gateway.host.sandbox import (
    SANDBOX_HOME,
    SANDBOX_TMP,
    Bind,
    Limits,
    bwrap_argv,
    egress_environment,
    launch_argv,
)
from gateway.mcp_sdk import absorb_tool_listing
from runner.contracts import MAX_TIMEOUT_MS

logger = logging.getLogger(__name__)
stderr_logger = logging.getLogger("toolgate.mcp_host.stderr")

CLIENT_INFO = types.Implementation(name="toolgate-mcp-host", version="1")
STDERR_LINE_CHARS = 1000
STDERR_LINES_PER_WINDOW = 50
STDERR_WINDOW_S = 10.0
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
STABLE_AFTER_S = 60.0  # a child that ran this long before exiting starts its backoff afresh
REDACTED = "[redacted]"
CALL_TIMEOUT_S = MAX_TIMEOUT_MS / 1000 + 5  # past any runtime budget: the worker gives up first
ProgressCallback = Callable[[float, float | None, str | None], Awaitable[None]]
LogCallback = Callable[[types.LoggingMessageNotificationParams], Awaitable[None]]


class HostError(Exception):
    """A child could not serve a request; the message is the host's own and safe to pass on."""


@dataclass(frozen=True, slots=True)
class ChildSpec:
    """What one child is: the server's command and environment, and whose connection it serves."""

    slug: str
    connection_id: str  # "" for a server without a provider (one child for everyone)
    command: tuple[str, ...]
    env: Mapping[str, str] = field(repr=False)  # declared values, then secrets
    secret_values: tuple[str, ...] = field(repr=False, default=())
    allowed_hosts: tuple[str, ...] = ()  # HOST:PORT the egress proxy carries (none: no network)
    trusted_unsandboxed: bool = False  # may start without a sandbox when the host requires one
    fingerprint: str = ""  # digest of all of the above: a change starts a new child
    npm_package: str = ""  # NAME@VERSION installed at add into the host's packages/<slug>/
    pip_package: str = ""  # NAME==VERSION, likewise, in a virtualenv there
    binds: tuple[Bind, ...] = ()  # operator-bound folders (bubblewrap only)

    @property
    def key(self) -> tuple[str, str]:
        return (self.slug, self.connection_id)


def spec_fingerprint(command: tuple[str, ...], env: Mapping[str, str], *extra: object) -> str:
    """A digest of what a child is started from: the command, its environment and every other field given."""
    material = repr((command, sorted(env.items()), extra)).encode()
    return hashlib.sha256(material).hexdigest()


@dataclass(frozen=True, slots=True)
class HostConfig:
    root: Path  # private homes live under root/children
    hidden: tuple[Path, ...]  # what a sandboxed child must not see (Toolgate's tree, var/)
    limits: Limits
    bwrap: str | None  # bubblewrap's path when children run under it
    # Production (TOOLGATE_MCP_HOST_REQUIRE_SANDBOX, on when DEBUG=False): a child starts only in a
    # sandbox, or when its server is marked trusted-unsandboxed.
    require_sandbox: bool = False
    no_sandbox_reason: str = ""  # why bwrap is None, for the refusal's message
    allow_private: Callable[[], bool] = field(default=lambda: False, repr=False)  # for the egress guard
    proxy_limits: ProxyLimits = field(default_factory=ProxyLimits)
    max_children: int = 16
    idle_timeout_s: float = 300.0
    start_timeout_s: float = 60.0
    call_timeout_s: float = CALL_TIMEOUT_S
    sweep_s: float = 2.0
    hold_s: float = HOLD_S  # how long a child's question waits for the worker's retry (questions.py)


def redactor(secret_values: tuple[str, ...]) -> Callable[[str], str]:
    values = sorted((value for value in secret_values if len(value) >= 4), key=len, reverse=True)

    def redact(text: str) -> str:
        for value in values:
            text = text.replace(value, REDACTED)
        return text

    return redact


class StdioChild:
    """One running stdio server, held open by its owner task until stopped or exited."""

    def __init__(
        self,
        spec: ChildSpec,
        *,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        call_timeout_s: float = CALL_TIMEOUT_S,
        hold_s: float = HOLD_S,
        egress: EgressProxy | None = None,
    ) -> None:
        self.spec = spec
        self.egress = egress
        self._call_timeout_s = call_timeout_s
        self._hold_s = hold_s
        self._argv, self._env, self._cwd = argv, env, cwd
        self.client: Client | None = None
        self.dead = False
        self.started_at = self.last_used = time.monotonic()
        self.ended_at: float | None = None
        self.busy = 0
        self._absorbed: set[str] = set()
        self._log_relays: list[LogCallback] = []  # calls in flight that asked for log messages
        self._calls: list[CallQuestions] = []  # each `tools/call` in flight, with what it may be asked
        self._held: dict[str, HeldCall] = {}  # by the token of the state handed out for its question
        self._ready = asyncio.Event()
        self._closing = asyncio.Event()
        self._error: HostError | None = None
        self._task: asyncio.Task[None] | None = None
        self._redact = redactor(spec.secret_values)
        self._window_start, self._window_lines, self._suppressed = 0.0, 0, 0

    async def open(self, timeout_s: float) -> None:
        if self.egress is not None:
            await self.egress.start()  # listening before the child's first request
        self._task = asyncio.get_running_loop().create_task(self._own(), name=f"mcp-child-{self.spec.slug}")
        await self.wait_ready(timeout_s)

    async def wait_ready(self, timeout_s: float) -> None:
        """Until the child answers, for at most `timeout_s` counted from its start.

        A caller that gives up (its request is cancelled) leaves the child starting: a slow first
        start (an interpreter warming up, a server loading its data) is then ready for the retry.
        """
        if not self._ready.is_set():
            try:
                async with asyncio.timeout(max(0.0, self.started_at + timeout_s - time.monotonic())):
                    await self._ready.wait()
            except TimeoutError:
                self.stop_soon()
                raise HostError(
                    f"the server did not start within {timeout_s:g} s; it may be slow to start: a retry starts it again"
                ) from None
        if self._error is not None:
            raise self._error

    async def _own(self) -> None:
        read_fd, write_fd = os.pipe()
        errlog = os.fdopen(write_fd, "w")
        pump = asyncio.get_running_loop().create_task(self._pump(read_fd), name=f"mcp-stderr-{self.spec.slug}")
        params = StdioServerParameters(command=self._argv[0], args=self._argv[1:], env=self._env, cwd=self._cwd)
        try:
            transport = stdio_client(params, errlog=errlog)
            async with Client(
                transport,
                mode="auto",
                cache=None,
                client_info=CLIENT_INFO,
                logging_callback=self._on_log,
                elicitation_callback=self._on_elicit,
                sampling_callback=self._on_sample,
            ) as client:
                errlog.close()  # the child holds the write end now: end of file means it exited
                self.client = client
                self._ready.set()
                await self._closing.wait()
        except Exception as exc:
            self._error = HostError("the server could not be started or stopped answering")
            logger.warning("mcp server %s: child ended (%s)", self.spec.slug, type(exc).__name__)
        finally:
            errlog.close()
            self._mark_dead()
            self._held.clear()
            self._ready.set()
            pump.cancel()
            if self.egress is not None:
                await self.egress.close()
                shutil.rmtree(self.egress.path.parent, ignore_errors=True)

    async def _pump(self, read_fd: int) -> None:
        """Log stderr line by line until end of file, which marks the child dead."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        pipe = os.fdopen(read_fd, "rb", 0)
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
        pending = b""
        try:
            while chunk := await reader.read(4096):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    self._log_line(line)
                if len(pending) > STDERR_LINE_CHARS:
                    self._log_line(pending)
                    pending = b""
            if pending:
                self._log_line(pending)
            if not self.dead:
                logger.info("mcp server %s: child exited", self.spec.slug)
            self._mark_dead()
            self._closing.set()
        finally:
            transport.close()

    def _log_line(self, raw: bytes) -> None:
        now = time.monotonic()
        if now - self._window_start > STDERR_WINDOW_S:
            if self._suppressed:
                stderr_logger.warning("mcp server %s: %d stderr lines not logged", self.spec.slug, self._suppressed)
            self._window_start, self._window_lines, self._suppressed = now, 0, 0
        if self._window_lines >= STDERR_LINES_PER_WINDOW:
            self._suppressed += 1
            return
        self._window_lines += 1
        text = self._redact(raw.decode(errors="replace").rstrip())[:STDERR_LINE_CHARS]  # a cut never splits a secret
        stderr_logger.info("mcp server %s: %s", self.spec.slug, text, extra={"mcp_server": self.spec.slug})

    async def _on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        """A child's log message, to the one call in flight when it is the only one and asked for logs."""
        if self.busy == 1 and len(self._log_relays) == 1:
            await self._log_relays[0](params)

    async def _on_elicit(self, context: Any, params: types.ElicitRequestParams) -> Any:
        return await self._question(types.ElicitRequest(params=params))

    async def _on_sample(self, context: Any, params: types.CreateMessageRequestParams) -> Any:
        return await self._question(types.CreateMessageRequest(params=params))

    async def _question(self, request: types.ElicitRequest | types.CreateMessageRequest) -> Any:
        """A child's question, to the one call in flight when it is the only one (which vets it), else refused."""
        if self.busy == 1 and len(self._calls) == 1:
            return await self._calls[0].ask(request)
        for questions in self._calls:
            questions.refuse(SEVERAL_CALLS)
        return types.ErrorData(code=INVALID_REQUEST, message=NOT_PASSED)

    def _mark_dead(self) -> None:
        if not self.dead:
            self.dead = True
            self.ended_at = time.monotonic()

    def stop_soon(self) -> None:
        self._mark_dead()
        self._closing.set()

    async def stop(self) -> None:
        self.stop_soon()
        if self._task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                async with asyncio.timeout(10.0):
                    await asyncio.shield(self._task)

    def _live_client(self) -> Client:
        if self.client is None or self.dead:
            raise HostError("the server is not running")
        return self.client

    async def list_tools(self, cursor: str | None) -> types.ListToolsResult:
        client = self._live_client()
        return await self._exchange(client.list_tools(cursor=cursor))

    async def relay_call(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        progress: ProgressCallback | None = None,
        log: LogCallback | None = None,
        log_level: str | None = None,
    ) -> types.CallToolResult:
        """`tools/call` that a worker's runner made (grant, policy and input checks are behind it).

        With `progress`, the child is asked for progress (the SDK sends it a token of its own) and
        each report goes to the callback; cancelling the call sends the child `notifications/cancelled`.
        With `log`, the child is asked for log messages at `log_level` (in `_meta`, as 2026-07-28
        asks; a 2025-era child sends what it sends) and those it sends while this is its only
        request go to the callback.
        """
        client = self._live_client()
        meta: types.RequestParamsMeta | None = (
            {LOG_LEVEL_META_KEY: log_level} if log is not None and log_level is not None else None
        )
        questions = CallQuestions(None, self.spec.secret_values)  # declared nothing: every question is refused
        if log is not None:
            self._log_relays.append(log)
        try:
            calling = self._call_tool(client, name, arguments, questions, progress=progress, meta=meta)
            result = await self._exchange(calling)
        except MCPError:
            refused = questions.refused_result(None)
            if refused is None:
                raise
            return refused
        finally:
            if log is not None:
                self._log_relays.remove(log)
        return questions.refused_result(result) or result

    async def call_asking(
        self, name: str, arguments: dict[str, Any], asking: Asking
    ) -> types.CallToolResult | types.InputRequiredResult:
        """`tools/call` of a call that may ask `asking`: the child's result, or its first question, held.

        The child's call runs in a task of its own, so it can wait for an answer past the
        worker's request; each stretch of it between questions is bounded by the call timeout,
        each wait for an answer by the hold (questions.py).
        """
        client = self._live_client()
        questions = CallQuestions(asking, self.spec.secret_values, hold_s=self._hold_s)
        task = asyncio.get_running_loop().create_task(
            self._held_call(client, name, arguments, questions), name=f"mcp-held-{self.spec.slug}"
        )
        task.add_done_callback(_retrieved)  # a held call nobody resumed may end in an error nobody reads
        held = HeldCall(digest=arguments_digest(name, arguments), questions=questions, task=task)
        questions.on_expired = lambda: self._expire(held)
        return await self._next(held)

    async def resume_asking(
        self,
        name: str,
        arguments: dict[str, Any],
        request_state: str | None,
        responses: Mapping[str, Any] | None,
        *,
        asking: Asking | None,
    ) -> types.CallToolResult | types.InputRequiredResult:
        """The worker's retry of a held call: its answer goes to the child; the child's result or next question.

        What the child may ask next is what this retry declares (a sampling cap may be spent by now).
        """
        token = token_of(request_state)
        held = self._held.get(token) if token is not None else None
        if held is None or held.asked is None or held.digest != arguments_digest(name, arguments):
            raise HostError("the requestState is not valid for this call (unknown, used, expired, or another call's)")
        answer = answer_for(held.asked, responses)
        if answer is None:
            raise HostError("the inputResponses do not answer the question asked")
        del self._held[held.token]
        held.questions.allow(asking)
        if not held.asked.answer.done():
            held.asked.answer.set_result(answer)
        return await self._next(held)

    async def _held_call(
        self, client: Client, name: str, arguments: dict[str, Any], questions: CallQuestions
    ) -> types.CallToolResult:
        try:
            result = await self._exchange(self._call_tool(client, name, arguments, questions), bounded=False)
        except MCPError:
            refused = questions.refused_result(None)
            if refused is None:
                raise
            return refused
        return questions.refused_result(result) or result

    async def _next(self, held: HeldCall) -> types.CallToolResult | types.InputRequiredResult:
        """Until the child answers the call or asks its next question, within the call timeout."""
        deadline = time.monotonic() + self._call_timeout_s
        while True:
            asked = asyncio.ensure_future(held.questions.pending.get())
            try:
                left_s = max(0.0, deadline - time.monotonic())
                done, _ = await asyncio.wait({held.task, asked}, timeout=left_s, return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:  # the worker gave up: so does the child's call
                held.task.cancel()
                raise
            finally:
                if not asked.done():
                    asked.cancel()
            if held.task in done:
                return held.task.result()
            if asked not in done:
                held.task.cancel()
                raise HostError(f"the server did not answer within {self._call_timeout_s:g} s")
            question = asked.result()
            if not question.answer.done():  # one that waited past the hold was declined already
                result = held.hold(question)
                self._held[held.token] = held
                return result

    def _expire(self, held: HeldCall) -> None:
        """A question nobody answered within the hold: the state is forgotten, and the call cut shortly after."""
        self._held.pop(held.token, None)
        asyncio.get_running_loop().call_later(DECLINED_GRACE_S, held.task.cancel)

    async def _call_tool(
        self,
        client: Client,
        name: str,
        arguments: dict[str, Any],
        questions: CallQuestions,
        *,
        progress: ProgressCallback | None = None,
        meta: types.RequestParamsMeta | None = None,
    ) -> types.CallToolResult:
        """The one `tools/call` to the child; `questions` takes what the child asks while it runs."""
        if name not in self._absorbed:
            # The SDK would list tools after a call to check the output against the live schema;
            # the gateway checks against the pinned one, so the host passes results on as sent.
            blank = types.Tool.model_validate({"name": name, "inputSchema": {"type": "object"}})
            absorb_tool_listing(client, [blank])
            self._absorbed.add(name)
        self._calls.append(questions)
        try:
            return await client.call_tool(name, arguments, progress_callback=progress, meta=meta)
        finally:
            self._calls.remove(questions)
            questions.close()

    async def relay(self, send: Callable[[Client], Awaitable[Any]]) -> Any:
        """Any other request to the child (resources, prompts), bounded like a call."""
        client = self._live_client()
        return await self._exchange(send(client))

    def offers(self, capability: str) -> bool:
        """Whether the child declared `resources` or `prompts` (a child without them is asked nothing)."""
        client = self._live_client()
        return getattr(client.server_capabilities, capability, None) is not None

    async def _exchange(self, request: Awaitable[Any], *, bounded: bool = True) -> Any:
        """One request to the child, counted in `busy`; unbounded only for a held call (`_next` bounds it)."""
        self.busy += 1
        self.last_used = time.monotonic()
        try:
            # The worker's budget is shorter; this bounds the host.
            async with asyncio.timeout(self._call_timeout_s if bounded else None):
                return await request
        except TimeoutError:
            raise HostError(f"the server did not answer within {self._call_timeout_s:g} s") from None
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED or self.dead:
                self.stop_soon()
                raise HostError("the server exited during the request") from None
            raise  # the server's own JSON-RPC error goes back as it was
        except HostError:
            raise
        except Exception as exc:
            self.stop_soon()
            raise HostError(f"the server's answer could not be read ({type(exc).__name__})") from None
        finally:
            self.busy -= 1
            self.last_used = time.monotonic()


def _retrieved(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:24]


class Supervisor:
    """Every child of the host: at most one per (server, connection), at most `max_children` at once."""

    def __init__(self, config: HostConfig) -> None:
        self.config = config
        self._children: dict[tuple[str, str], StdioChild] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._restarts: dict[tuple[str, str], tuple[int, float]] = {}  # key -> (exits in a row, not before)

    def children(self) -> list[StdioChild]:
        return list(self._children.values())

    async def child(self, spec: ChildSpec) -> StdioChild:
        key = spec.key
        child = self._children.get(key)
        if child is not None and not child.dead and child.spec.fingerprint == spec.fingerprint:
            return await self._when_ready(child)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            child = self._children.get(key)
            if child is not None and not child.dead and child.spec.fingerprint == spec.fingerprint:
                return await self._when_ready(child)
            if child is not None:
                await self._retire(child, exited=child.dead)
            self._check_backoff(key)
            await self._make_room()
            child = self._start(spec)
            self._children[key] = child
            try:
                await child.open(self.config.start_timeout_s)
            except HostError:
                await self._retire(child, exited=True)
                raise
            return child

    async def _when_ready(self, child: StdioChild) -> StdioChild:
        """A child still starting (its first caller gave up) is waited for, within the start timeout."""
        try:
            await child.wait_ready(self.config.start_timeout_s)
        except HostError:
            if self._children.get(child.spec.key) is child:  # its first caller may have retired it already
                await self._retire(child, exited=True)
            raise
        return child

    def _check_backoff(self, key: tuple[str, str]) -> None:
        _exits, not_before = self._restarts.get(key, (0, 0.0))
        wait = not_before - time.monotonic()
        if wait > 0:
            raise HostError(f"the server exited and is started again in {wait:.1f} s")

    async def _retire(self, child: StdioChild, *, exited: bool) -> None:
        """Forget a child; one that exited (or never started) pushes its next start back.

        The backoff is recorded before the stop is awaited: stopping takes a while (the SDK waits
        for the process), and a call arriving meanwhile finds no child and must find the backoff.
        """
        if self._children.get(child.spec.key) is child:
            del self._children[child.spec.key]
        child.stop_soon()
        if exited:
            ended = child.ended_at or time.monotonic()
            exits, _ = self._restarts.get(child.spec.key, (0, 0.0))
            if ended - child.started_at >= STABLE_AFTER_S:
                exits = 0
            exits += 1
            delay = min(BACKOFF_FIRST_S * 2 ** (exits - 1), BACKOFF_MAX_S)
            self._restarts[child.spec.key] = (exits, ended + delay)
        await child.stop()

    async def _make_room(self) -> None:
        live = [child for child in self._children.values() if not child.dead]
        if len(live) < self.config.max_children:
            return
        idle = sorted((child for child in live if child.busy == 0), key=lambda child: child.last_used)
        if not idle:
            raise HostError(f"{self.config.max_children} stdio servers are busy; try again shortly")
        logger.info("mcp server %s: child stopped to make room", idle[0].spec.slug)
        await self._retire(idle[0], exited=False)

    def home_of(self, spec: ChildSpec) -> Path:
        who = _digest(spec.connection_id) if spec.connection_id else "shared"
        return self.config.root / "children" / spec.slug / who

    def installed_package(self, spec: ChildSpec) -> tuple[Path, Path] | None:
        """(directory, programs' directory) of the server's package as installed at add (None without one)."""
        try:
            package = parse_package(npm=spec.npm_package, pip=spec.pip_package)
        except PackageError as exc:
            raise HostError(str(exc)) from None
        if package is None:
            return None
        directory = package_dir(self.config.root, spec.slug)
        found = version_of(package, directory)
        if found != package.version:
            flag = "--npm" if spec.npm_package else "--pip"
            raise HostError(
                f"its {flag[2:]} package {package.spec} is not installed in the host's {directory} "
                f"({'version ' + found if found else 'nothing'} there): run `manage.py mcp_upstream add {spec.slug} "
                f"{flag} {package.spec} ...` where the host's TOOLGATE_MCP_HOST_DIR is"
            )
        return directory, programs_dir(package, directory)

    def _start(self, spec: ChildSpec) -> StdioChild:
        if not self.config.bwrap and self.config.require_sandbox and not spec.trusted_unsandboxed:
            raise HostError(
                f"no sandbox to run it in ({self.config.no_sandbox_reason or 'bubblewrap is not usable'}); the host "
                "starts only servers added with --trusted-unsandboxed without one (TOOLGATE_MCP_HOST_REQUIRE_SANDBOX)"
            )
        installed = self.installed_package(spec)
        package, programs = installed if installed is not None else (None, None)
        base = self.home_of(spec)
        home, tmp = base / "home", base / "tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        for directory in (home, tmp):
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = os.environ.get("PATH") or None
        if programs is not None:
            path = f"{programs}:{path or DEFAULT_PATH}"
        egress = None
        if self.config.bwrap:
            declared = {}
            if spec.allowed_hosts:
                # A short path of its own: a Unix socket's path is limited to about 100 bytes.
                socket_dir = Path(tempfile.mkdtemp(prefix="toolgate-egress-"))
                egress = EgressProxy(
                    slug=spec.slug,
                    allowed_hosts=spec.allowed_hosts,
                    path=socket_dir / "proxy.sock",
                    allow_private=self.config.allow_private,
                    limits=self.config.proxy_limits,
                )
                declared = egress_environment()
            env, unset = child_environment(
                home=SANDBOX_HOME, tmpdir=SANDBOX_TMP, declared=declared, secrets=spec.env, path=path
            )
            sandbox = bwrap_argv(
                self.config.bwrap,
                home=home,
                hidden=self.config.hidden,
                package=package,
                binds=spec.binds,
                egress_dir=egress.path.parent if egress is not None else None,
            )
        else:
            env, unset = child_environment(home=str(home), tmpdir=str(tmp), declared={}, secrets=spec.env, path=path)
            sandbox = None
            if spec.allowed_hosts:
                logger.warning(
                    "mcp server %s: no sandbox, so it has the host's network (--allow-host is not enforced)", spec.slug
                )
            if spec.binds:
                logger.warning(
                    "mcp server %s: its bound folders need bubblewrap; without it the child sees the host's "
                    "folders with the host user's rights",
                    spec.slug,
                )
        argv = launch_argv(spec.command, limits=self.config.limits, unset=unset, bwrap=sandbox)
        where = ""
        if sandbox:
            network = f"egress to {', '.join(spec.allowed_hosts)} only" if egress is not None else "no network"
            where = f" (bubblewrap, {network})"
        logger.info("mcp server %s: starting a child%s", spec.slug, where)
        return StdioChild(
            spec,
            argv=argv,
            env=env,
            cwd=home,
            call_timeout_s=self.config.call_timeout_s,
            hold_s=self.config.hold_s,
            egress=egress,
        )

    async def sweep(self) -> None:
        """Forget exited children and stop idle ones."""
        now = time.monotonic()
        for child in list(self._children.values()):
            if child.dead:
                await self._retire(child, exited=True)
            elif child.busy == 0 and now - child.last_used > self.config.idle_timeout_s:
                logger.info("mcp server %s: idle child stopped", child.spec.slug)
                await self._retire(child, exited=False)

    async def stop_connection(self, connection_id: str) -> int:
        """Stop every child of a revoked connection (or one awaiting re-authorisation), and forget its home.

        Told by the service that changed the connection, after its commit: the host reads no
        database. A call still in flight ends with an error; the broker refuses the next one.
        """
        stopped = 0
        for child in [child for child in self._children.values() if child.spec.connection_id == connection_id]:
            logger.info("mcp server %s: child of a revoked connection stopped", child.spec.slug)
            await self._retire(child, exited=False)
            shutil.rmtree(self.home_of(child.spec), ignore_errors=True)
            stopped += 1
        return stopped

    async def sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.sweep_s)
            try:
                await self.sweep()
            except Exception:  # the sweep must outlive one child's failure to stop
                logger.exception("mcp host sweep failed")

    async def stop_all(self) -> None:
        children, self._children = list(self._children.values()), {}
        await asyncio.gather(*(child.stop() for child in children), return_exceptions=True)
