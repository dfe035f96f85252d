"""The runner's view of upstream MCP tools: approved definitions bound as BoundTools.

`McpToolSource` is a ToolSource beside the code registry's (config/runtime.py
composes them). It binds only approved definitions: a drifted tool keeps its
approved binding but is switched off (quarantined), so a call is refused by the
kill switch before anything reaches the upstream; a tool never approved is not
in the source at all. Validators are compiled once per definition hash.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

import mcp_types as types
from pydantic import BaseModel

from gateway.asking import Asking, asking_for
from gateway.upstream.client import UpstreamError, UpstreamTarget, plain_session, pool_for_running_loop
from gateway.upstream.definitions import PinnedSchema, compile_pinned, default_allowlist, pinned_schema_hash
from gateway.upstream.held import call_for_client
from gateway.upstream.host_endpoint import host_target
from gateway.upstream.metrics import mcp_upstream_call_observed
from gateway.upstream.models import McpServer, McpTool
from gateway.upstream.services import (
    PRIVATE_NETWORKS_HINT,
    allow_private_networks,
    spec_description,
    stdio_spec_header,
)
from gateway.upstream.vault import token_vault
from policies_app.governance import governance_cache
from runner import wording
from runner.asking import CALL_INPUT, ClientInput, InputAsk, InputAsked
from runner.bound import BoundTool
from runner.capabilities import AuthCapability, BearerAuth, ClockCapability, ToolCapabilities
from runner.contracts import ON_LOOP, ToolArgs, ToolContract, ToolDefinition, ToolOutput
from runner.errors import CapabilityError, InputInvalid, OutputInvalid, ToolCancelled, ToolError, ToolFailure
from runner.ports import ToolSource
from runner.progress import CALL_PROGRESS
from runner.redaction import carries_credential, compile_allowlist, credential_fragments
from runner.strict_json import strings_are_clean
from runner.types import ConsequenceLevel, FieldError, ToolContent, ToolEffect, ToolInvocationContext, ToolSpec
from tools_app.selectors import enabled_tool_ids

logger = logging.getLogger(__name__)

MAX_ERRORS = 20
NUL_IN_ANSWER = "upstream MCP server: the answer contains NUL characters, which Toolgate cannot record"
SURROGATE_IN_ANSWER = (
    "upstream MCP server: the answer contains an unpaired UTF-16 surrogate (a \\ud800-\\udfff escape "
    "standing alone), which is not text; the upstream must send valid Unicode"
)
UNREADABLE_TOKEN = "the MCP server's operator token cannot be read; an operator has been alerted"  # noqa: S105
UNREADABLE_SPEC = "the stdio MCP server's configuration cannot be sent to the MCP host; an operator has been alerted"


class McpArguments(ToolArgs):
    """Arguments of an upstream tool, already checked against its pinned input schema."""

    arguments: dict[str, Any]


@lru_cache(maxsize=4096)
def _validator(definition_hash: str, which: str, schema_json: str) -> PinnedSchema:
    """Compiled once per (definition, schema): compiling costs ~10x a validation."""
    return compile_pinned(json.loads(schema_json))


def schema_errors(schema: PinnedSchema, instance: Any) -> tuple[FieldError, ...]:
    """Where and why `instance` breaks the schema, never echoing its values.

    Names come from the pinned schema only: a missing property is named at its
    own path, an undeclared one never is (it is the caller's text) but the
    declared ones are listed.
    """
    if schema.accepts_quickly(instance):
        return ()
    errors = []
    found = schema.validator.iter_errors(instance)
    for error in sorted(found, key=lambda e: list(map(str, e.absolute_path)))[:MAX_ERRORS]:
        path = ".".join(str(part) for part in error.absolute_path)
        if str(error.validator) == "required" and isinstance(error.instance, dict):
            missing = [name for name in error.validator_value if isinstance(name, str) and name not in error.instance]
            errors += [FieldError(path=_join(path, name), message=wording.REQUIRED) for name in missing]
            continue
        errors.append(FieldError(path=path, message=_message(error)))
    return tuple(errors)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _message(error: Any) -> str:
    keyword = str(error.validator)
    if keyword == "type":
        expected = error.validator_value
        expected = "/".join(map(str, expected)) if isinstance(expected, list) else str(expected)
        return f"must be of type {expected[:40]}"
    if keyword == "additionalProperties":
        declared = error.schema.get("properties") if isinstance(error.schema, dict) else None
        names = sorted(name for name in declared or {} if isinstance(name, str))
        return wording.unknown_field_message([], names[:20], allowed_phrase="the arguments are")
    if keyword == "enum" and isinstance(error.validator_value, list) and len(error.validator_value) <= 10:
        return "must be one of: " + ", ".join(json.dumps(value)[:40] for value in error.validator_value)
    if keyword in ("enum", "const"):
        return "is not one of the allowed values"
    return f"does not satisfy the schema's {keyword[:40]!r} rule"


@dataclass(frozen=True, slots=True, kw_only=True)
class McpBoundTool(BoundTool):
    """A BoundTool whose schemas are the pinned upstream JSON Schemas, not pydantic models."""

    input_validator: PinnedSchema
    output_validator: PinnedSchema | None = None
    operator_auth: AuthCapability | None = None

    def validate_input(self, raw_args: Any) -> BaseModel:
        errors = schema_errors(self.input_validator, raw_args)
        if errors:
            raise InputInvalid(errors)
        return McpArguments.model_construct(arguments=raw_args)

    def validate_output(self, raw_output: Any) -> dict[str, Any]:
        if not isinstance(raw_output, dict):
            raise OutputInvalid((FieldError(path="", message="output is not an object"),))
        if self.output_validator is not None:
            errors = schema_errors(self.output_validator, raw_output)
            if errors:
                raise OutputInvalid(errors)
        return raw_output

    def capabilities(
        self, *, clock: ClockCapability, auth: AuthCapability | None, ctx: ToolInvocationContext
    ) -> ToolCapabilities:
        return ToolCapabilities(clock=clock, http=None, auth=auth or self.operator_auth)


@dataclass(frozen=True, slots=True)
class _Upstream:
    """What `execute` needs to reach one tool: the server, the pinned tool, the token if any."""

    server_id: str
    slug: str
    url: str
    pinned: types.Tool
    operator_auth: AuthCapability | None
    token_unreadable: bool
    stdio: bool = False  # run by the MCP host: reached through its endpoint
    # (elicitation, sampling) the operator allowed this tool to ask the client (McpTool.asks_allowed).
    asks: tuple[bool, bool] = (False, False)
    # Its X-Toolgate-Spec (opened secrets inside), built once when the tools are bound; "" when it cannot be.
    spec: str = field(default="", repr=False)

    @property
    def host(self) -> str:
        """Host and port for operators' logs; never the URL's userinfo, path or query."""
        if self.stdio:
            return "stdio via the MCP host"
        parts = urlsplit(self.url)
        return f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)

    def target(self, auth: AuthCapability | None, ctx: ToolInvocationContext) -> UpstreamTarget:
        """Where this call goes; the tenant keeps its session (and connections) apart from other tenants'."""
        if self.stdio:
            if not self.spec:
                raise ToolFailure(UNREADABLE_SPEC)
            via_host = host_target(
                server_id=self.server_id, slug=self.slug, spec=self.spec, auth=auth, connection_id=ctx.connection_id
            )
            return replace(via_host, tenant_id=ctx.tenant_id)
        headers = tuple(sorted(auth.headers().items())) if auth is not None else ()
        return UpstreamTarget(
            server_id=self.server_id,
            url=self.url,
            allow_private=allow_private_networks(),
            headers=headers,
            tenant_id=ctx.tenant_id,
        )


def _asking(upstream: _Upstream, client: ClientInput | None) -> Asking | None:
    """What this call declares its upstream may ask (gateway/asking.py); for a stdio one, within the sampling cap.

    The MCP host holds a stdio child's call while its question travels (host/questions.py),
    so a round the runner would then refuse for the policy's sampling cap would leave that
    call held until the host gives up on it; declaring no sampling lets the host refuse the
    child's request at once instead. Still an `Asking` (if one of nothing): a retry that
    answers a held question must reach the host as a round, whatever its next one may ask.
    """
    asking = asking_for(upstream.asks, client)
    if asking is None or client is None or not upstream.stdio or not asking.sampling:
        return asking
    if client.samples_used < client.sample_cap:
        return asking
    return Asking(elicitation=asking.elicitation, sampling=False)


def _executor(upstream: _Upstream) -> Any:
    async def execute(args: McpArguments, ctx: ToolInvocationContext, caps: ToolCapabilities) -> Any:
        if upstream.token_unreadable:
            raise ToolFailure(UNREADABLE_TOKEN)
        auth = caps.auth
        started, outcome = time.monotonic(), "error"
        try:
            target = upstream.target(auth, ctx)
            progress = CALL_PROGRESS.get()
            # What streamed progress and log text must not give away: the call's own credential.
            secrets = (
                credential_fragments(auth.headers(), auth.access_token())
                if progress is not None and auth is not None
                else frozenset()
            )
            client_input = CALL_INPUT.get()
            asking = _asking(upstream, client_input)
            if asking is not None and client_input is not None:
                answer = await call_for_client(
                    target,
                    upstream.pinned,
                    args.arguments,
                    asking=asking,
                    client=client_input,
                    caller_key=str(ctx.actor_id),
                    secrets=credential_fragments(auth.headers(), auth.access_token()) if auth is not None else secrets,
                )
                if isinstance(answer, InputAsk):
                    outcome = "input_required"
                    raise InputAsked(answer)
                result = answer
            else:
                result = await pool_for_running_loop().call(
                    target, upstream.pinned, args.arguments, progress=progress, secrets=secrets
                )
            outcome = "tool_error" if result.is_error else "ok"
        except UpstreamError as error:
            if error.kind == UpstreamError.CANCELLED:
                outcome = "cancelled"
                raise ToolCancelled(error.safe_message) from None
            raise _failure(upstream, error) from None
        except asyncio.CancelledError:  # cut at the runtime budget
            outcome = "timeout"
            raise
        finally:
            mcp_upstream_call_observed(server=upstream.slug, outcome=outcome, seconds=time.monotonic() - started)
        return _answer(upstream, auth, result)

    return execute


def _blocking_executor(upstream: _Upstream) -> Any:
    """The runner's fast path: a plain POST on this thread when a live session has a plain caller, else ON_LOOP.

    The first call of a process (and every call of an upstream the SDK serves) goes
    to the loop, where the session is opened and negotiated; the next ones skip
    the hop. The call is the same request on the wire, answered the same way.
    """

    def execute_blocking(
        args: McpArguments, ctx: ToolInvocationContext, caps: ToolCapabilities, deadline: float
    ) -> Any:
        if upstream.token_unreadable:
            raise ToolFailure(UNREADABLE_TOKEN)
        if CALL_PROGRESS.get() is not None:  # progress travels on an event stream: the SDK's path, on the loop
            return ON_LOOP
        if _asking(upstream, CALL_INPUT.get()) is not None:
            return ON_LOOP  # a session of its own that declares what may be asked (gateway/asking.py)
        auth = caps.auth
        started, outcome = time.monotonic(), "error"
        try:
            session = plain_session(upstream.target(auth, ctx))
            result = (
                session.call_blocking(upstream.pinned, args.arguments, deadline=deadline)
                if session is not None
                else None
            )
            if result is None:
                outcome = ""  # nothing ran here: the loop's path calls and counts it
                return ON_LOOP
            outcome = "tool_error" if result.is_error else "ok"
        except UpstreamError as error:
            raise _failure(upstream, error) from None
        except TimeoutError:  # at the deadline: the runtime budget
            outcome = "timeout"
            raise
        finally:
            if outcome:
                mcp_upstream_call_observed(server=upstream.slug, outcome=outcome, seconds=time.monotonic() - started)
        return _answer(upstream, auth, result)

    return execute_blocking


def _failure(upstream: _Upstream, error: UpstreamError) -> ToolFailure:
    """The caller's message names no setting; the operators' log line says which one this process lacks."""
    if error.kind == UpstreamError.REFUSED:
        logger.warning("mcp server %s: call refused: %s%s", upstream.slug, error.safe_message, PRIVATE_NETWORKS_HINT)
    return ToolFailure(
        f"upstream MCP server: {error.safe_message}", upstream=f"mcp:{upstream.slug}", host=upstream.host
    )


def _answer(upstream: _Upstream, auth: AuthCapability | None, result: types.CallToolResult) -> ToolContent:
    """The upstream's result as the tool's output, or the refusal it earns (both paths)."""
    answer = _content_of(result, has_output_schema=upstream.pinned.output_schema is not None)
    strings = [list(answer.content), answer.structured]
    # NUL: the audit row (jsonb) cannot keep it; a lone surrogate: UTF-8 cannot encode it (one walk when clean)
    if not strings_are_clean(strings):
        raise ToolFailure(NUL_IN_ANSWER if _holds_nul(strings) else SURROGATE_IN_ANSWER)
    # The runner checks outputs against a broker's credential; the operator token is ours to check.
    if (
        auth is not None
        and auth is upstream.operator_auth
        and carries_credential(
            [answer.content, answer.structured], credential_fragments(auth.headers(), auth.access_token())
        )
    ):
        raise CapabilityError("the upstream's answer carries the server's credential; it was withheld")
    if result.is_error:  # the tool's own error, written for the model: it gets the blocks
        raise ToolError(content=answer.content)
    return answer


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(key) or _holds_nul(item) for key, item in value.items())
    if isinstance(value, list | tuple):
        return any(_holds_nul(item) for item in value)
    return False


def _content_of(result: types.CallToolResult, *, has_output_schema: bool) -> ToolContent:
    """The upstream's blocks as it sent them (JSON, camelCase), and its structuredContent.

    Structured content passes only when the pinned definition declares its
    schema (output validation checks it, the allowlist keeps its declared
    fields): structure nobody declared and reviewed has no allowlist to pass.
    A declared schema with no structured content answers `{}` (output
    validation then says what is missing).
    """
    blocks = tuple(block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content)
    if not has_output_schema or result.is_error:
        return ToolContent(content=blocks)
    structured = result.structured_content if result.structured_content is not None else {}
    return ToolContent(content=blocks, structured=structured)


def bind_mcp_tool(
    tool: McpTool, server: McpServer, operator_auth: AuthCapability | None, unreadable: bool, host_spec: str = ""
) -> McpBoundTool:
    """Bind the approved definition (never the live one) of one upstream tool."""
    definition = tool.approved_definition or {}
    effect = ToolEffect(tool.tool.effect)
    provider = server.provider or None
    requires_connection = bool(server.provider)
    input_schema = definition.get("inputSchema") or {"type": "object"}
    output_schema = definition.get("outputSchema")
    contract = ToolContract(
        name=tool.tool_id,
        description=spec_description(definition),
        input_model=McpArguments,
        output_model=ToolOutput,
        effect=effect,
        redaction_allowlist=default_allowlist(output_schema),
        requires_connection=requires_connection,
        provider=provider,
        capabilities=frozenset({"auth"}) if requires_connection else frozenset(),
    )
    spec = ToolSpec(
        name=tool.tool_id,
        description=contract.description,
        input_schema=input_schema,
        effect=effect,
        requires_connection=requires_connection,
        provider=provider,
        # what /mcp offers as outputSchema: the value is cut to this schema's declared fields
        output_schema=output_schema if isinstance(output_schema, dict) else None,
        consequence_level=ConsequenceLevel(tool.tool.consequence_level),
        requires_confirmation=tool.tool.requires_confirmation,
        tags=tuple(tool.tool.tags),
        version=tool.tool.version or None,
        title=definition.get("title") if isinstance(definition.get("title"), str) else None,
        annotations=definition.get("annotations") if isinstance(definition.get("annotations"), dict) else None,
        icons=tuple(definition["icons"]) if isinstance(definition.get("icons"), list) else None,
        schema_hash=pinned_schema_hash(
            tool_id=tool.tool_id,
            definition=definition,
            effect=effect.value,
            provider=provider,
            requires_connection=requires_connection,
        ),
    )
    pinned = types.Tool.model_validate(definition)
    upstream = _Upstream(
        server_id=str(server.pk),
        slug=server.slug,
        url=server.url,
        pinned=pinned,
        operator_auth=None if requires_connection else operator_auth,
        token_unreadable=unreadable and not requires_connection,
        stdio=server.is_stdio,
        spec=host_spec,
        asks=tool.asks_allowed,
    )
    return McpBoundTool(
        definition=ToolDefinition(
            contract=contract, execute=_executor(upstream), execute_blocking=_blocking_executor(upstream)
        ),
        spec=spec,
        allowlist=compile_allowlist(contract.redaction_allowlist or ()),
        input_validator=_validator(tool.approved_hash, "input", json.dumps(input_schema, sort_keys=True)),
        output_validator=(
            _validator(tool.approved_hash, "output", json.dumps(output_schema, sort_keys=True))
            if output_schema
            else None
        ),
        operator_auth=upstream.operator_auth,
        may_ask_client=any(upstream.asks),
    )


def _operator_auth(server: McpServer) -> tuple[AuthCapability | None, bool]:
    if not server.operator_token_sealed:
        return None, False
    try:
        token = token_vault().open(bytes(server.operator_token_sealed), server_id=str(server.pk))
    except Exception as exc:  # a missing key or a tampered blob: the operator's problem, never the caller's
        logger.error("mcp server %s: operator token cannot be opened (%s)", server.slug, type(exc).__name__)
        return None, True
    return BearerAuth(token), False


def _stdio_spec(server: McpServer) -> str:
    """The server's spec header, built once per binding of its tools ("" when its secrets cannot be opened)."""
    try:
        return stdio_spec_header(server)
    except Exception as exc:  # a missing key, a tampered blob, an oversized spec: the operator's problem
        logger.error("mcp server %s: its spec for the MCP host cannot be built (%s)", server.slug, type(exc).__name__)
        return ""


def load_bound_mcp_tools() -> dict[str, McpBoundTool]:
    """Approved (and quarantined) tools of enabled servers, bound; pending and removed ones are absent."""
    rows = (
        McpTool.objects.select_related("tool", "server")
        .filter(
            status__in=(McpTool.Status.APPROVED, McpTool.Status.DRIFTED),
            server__enabled=True,
            server__removed_at__isnull=True,
        )
        .exclude(approved_hash="")
        .order_by("tool_id")
    )
    auth_by_server: dict[int, tuple[AuthCapability | None, bool]] = {}
    spec_by_server: dict[int, str] = {}
    bound: dict[str, McpBoundTool] = {}
    for row in rows:
        if row.server_id not in auth_by_server:
            auth_by_server[row.server_id] = _operator_auth(row.server)
            spec_by_server[row.server_id] = _stdio_spec(row.server) if row.server.is_stdio else ""
        operator_auth, unreadable = auth_by_server[row.server_id]
        try:
            spec = spec_by_server[row.server_id]
            bound[row.tool_id] = bind_mcp_tool(row, row.server, operator_auth, unreadable, spec)
        except Exception as exc:  # one bad pinned definition must not take the catalog down
            logger.error("mcp tool %s cannot be bound (%s)", row.tool_id, type(exc).__name__)
    return bound


def approved_tool_ids() -> frozenset[str]:
    """MCP tools whose approved definition is the live one: the only ones the switch may turn on."""
    return frozenset(
        McpTool.objects.filter(status=McpTool.Status.APPROVED)
        .exclude(approved_hash="")
        .values_list("tool_id", flat=True)
    )


def pending_tool_ids() -> frozenset[str]:
    """MCP tools discovered but never approved: known to the catalog, bound nowhere."""
    return frozenset(
        McpTool.objects.filter(status=McpTool.Status.PENDING, approved_hash="").values_list("tool_id", flat=True)
    )


class McpToolSource:
    """Bound upstream tools, rebuilt when the governance generation moves."""

    def _tools(self) -> Mapping[str, McpBoundTool]:
        return governance_cache.get("mcp-bound-tools", load_bound_mcp_tools)

    def get(self, tool_id: str) -> BoundTool | None:
        if not tool_id.startswith("mcp__"):
            return None
        return self._tools().get(tool_id)

    def list(self) -> Sequence[BoundTool]:
        return list(self._tools().values())

    def is_enabled(self, tool_id: str) -> bool:
        """The kill switch, and an approved definition equal to the live one (a drifted tool is off)."""
        return tool_id in enabled_tool_ids() and tool_id in governance_cache.get("mcp-approved", approved_tool_ids)

    def is_pending(self, tool_id: str) -> bool:
        """Asked only for an id `get` does not know (the lookup's failure path), so it costs a hit nothing."""
        return tool_id.startswith("mcp__") and tool_id in governance_cache.get("mcp-pending", pending_tool_ids)


class CompositeToolSource:
    """Several sources as one catalog; ids are namespaced, so the first that knows an id answers."""

    def __init__(self, *sources: ToolSource) -> None:
        self._sources = sources

    def get(self, tool_id: str) -> BoundTool | None:
        for source in self._sources:
            tool = source.get(tool_id)
            if tool is not None:
                return tool
        return None

    def list(self) -> Sequence[BoundTool]:
        return [tool for source in self._sources for tool in source.list()]

    def is_enabled(self, tool_id: str) -> bool:
        for source in self._sources:
            if source.get(tool_id) is not None:
                return source.is_enabled(tool_id)
        return False

    def is_pending(self, tool_id: str) -> bool:
        return any(source.is_pending(tool_id) for source in self._sources)
