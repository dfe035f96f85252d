"""The runner's semantic types: what a tool is, who calls it, and what came of it.

These are plain frozen dataclasses and enums, independent of any wire format
(OpenAI, REST) and of Django, so every executor speaks the same language.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runner.asking import InputAsk


class ToolEffect(enum.StrEnum):
    """How far a tool's side effects reach; policy may require approval per effect."""

    READ_ONLY = "read_only"
    STATE_CHANGE = "state_change"
    EXTERNAL_SIDE_EFFECT = "external_side_effect"


class ConsequenceLevel(enum.StrEnum):
    """How much real-world harm a call can do (docs/approvals.md), independent of its effect.

    A read can be costly and a write harmless: policy may ask for approval at or
    above a level, whatever the effect.
    """

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"

    @property
    def rank(self) -> int:
        return CONSEQUENCE_ORDER.index(self)


CONSEQUENCE_ORDER = (ConsequenceLevel.LOW, ConsequenceLevel.MEDIUM, ConsequenceLevel.HIGH)


class ErrorCode(enum.StrEnum):
    """Every error code of the public contract (docs/api.md)."""

    UNAVAILABLE = "unavailable"
    POLICY_DENIED = "policy_denied"
    APPROVAL_REQUIRED = "approval_required"
    RATE_LIMITED = "rate_limited"
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    INVALID_JSON = "invalid_json"
    VALIDATION = "validation"
    CONNECTION_UNAVAILABLE = "connection_unavailable"
    AUTH_REFRESH_FAILED = "auth_refresh_failed"
    TIMEOUT = "timeout"
    EXECUTION = "execution"
    OUTPUT_INVALID = "output_invalid"
    REDACTION_FAILED = "redaction_failed"
    RESULT_TOO_LARGE = "result_too_large"
    AUTHZ_DENIED = "authz_denied"
    UNAVAILABLE_DEPENDENCY = "unavailable_dependency"
    # The tool ran and answered an error meant for the model (an upstream's `isError` result,
    # a built-in tool's `ToolError`): not a failure of Toolgate's, so it is answered with HTTP 200.
    TOOL_ERROR = "tool_error"
    # A call on a person's behalf names no connection, its tool needs one, and no connection of the
    # tool's provider is both granted to the caller and declared by the person: the person must connect
    # one, or allow one for this caller. The result names the provider (`connection_provider`).
    CONNECTION_REQUIRED = "connection_required"
    # The caller cancelled the call while it ran (an MCP `notifications/cancelled`, or it dropped the
    # event stream it asked for): the upstream was told to stop, and the row ends here.
    CANCELLED = "cancelled"
    # The upstream asked the caller's client for input (an elicitation, a sampling request) before it
    # can answer: the result carries the asks (`input_ask`), and the client's retry brings the answers.
    INPUT_REQUIRED = "input_required"


class ConnectionChoice(enum.StrEnum):
    """How a call's connection was found; recorded on its audit row.

    NAMED: the call named it (`connection_id`, `toolgate/connection_id`).
    ONLY_DECLARED: it named none, and exactly one connection of the tool's provider is in
    grant ∩ declared (declared by the person's delegation).
    PERSONAL_FIRST: it named none, and of several, the one personal connection of the person
    came before the tenant's (both declared).
    """

    NAMED = "named"
    ONLY_DECLARED = "only_declared"
    PERSONAL_FIRST = "personal_first"


class Decision(enum.StrEnum):
    """What the policy said about one call; recorded on every audit row."""

    ALLOW = "allow"
    DENY = "deny"
    REQUIRE_APPROVAL = "require_approval"
    NOT_DECIDED = "not_decided"  # the call ended before policy was asked (unknown tool)
    REPLAYED = "replayed"  # a repeat of a call that already ran: its recorded answer, not a new run


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as callers and models see it: compiled JSON Schema, no runtime."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    effect: ToolEffect
    requires_connection: bool
    provider: str | None
    schema_hash: str
    # What a caller receives: the output model's schema cut to the redaction allowlist
    # (MCP clients validate structuredContent against it). None: the tool declares no output.
    output_schema: Mapping[str, Any] | None = None
    # Tool metadata: what policy reads besides the effect, and what callers filter on.
    consequence_level: ConsequenceLevel = ConsequenceLevel.LOW
    requires_confirmation: bool = False
    tags: tuple[str, ...] = ()
    version: str | None = None
    # What an upstream MCP tool's pinned definition adds for MCP clients (tools/list passes them
    # on): its display title, its own annotation hints (Toolgate only ever makes them stricter)
    # and its icons. A code tool has a title when its contract declares one, and no hints or icons.
    title: str | None = None
    annotations: Mapping[str, Any] | None = None
    icons: tuple[Mapping[str, Any], ...] | None = None

    def public_dict(self) -> dict[str, Any]:
        """The ToolSpec of the REST contract (no hash: it is an internal change marker)."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "effect": self.effect.value,
            "requires_connection": self.requires_connection,
            "provider": self.provider,
            "consequence_level": self.consequence_level.value,
            "requires_confirmation": self.requires_confirmation,
            "tags": list(self.tags),
            "version": self.version,
        }


def new_tool_call_id() -> str:
    """An id for a call that arrives without one: the boundary generates it, so it cannot repeat."""
    return f"call_{uuid.uuid4().hex}"


# ToolInvocationContext.delegation_id of a subject token that matched no delegation (forged, malformed).
UNKNOWN_DELEGATION = "unknown"


@dataclass(frozen=True, slots=True)
class ToolInvocationContext:
    """Who calls which tool in which run, by reference only.

    Never holds a secret: credentials reach a tool through capabilities, so this
    object may be logged, traced and stored without leaking anything.
    """

    run_id: str
    tool_call_id: str
    tenant_id: str
    actor_id: str
    # The person the call is made for (`user:<id>`), set only by the authorization stage from the
    # delegation the server found for the caller's subject token; never from a request field.
    subject_id: str | None = None
    # The delegation the presented subject token resolved to (UNKNOWN_DELEGATION when it matched
    # none); None when the call carries no subject token. An id, never the token.
    delegation_id: str | None = None
    connection_id: str | None = None
    grant_id: str | None = None
    declared_connection_ids: tuple[str, ...] = ()
    # The boundary generated tool_call_id (the caller sent none): it cannot repeat, so no claim is needed.
    tool_call_id_generated: bool = False
    # The tool ids the interface the call came through exposes (a toolset, `/mcp/t/<name>`); None: no
    # narrowing. It only ever narrows: a tool outside it is looked up as an unknown one (stage 1).
    tool_scope: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class Budgets:
    """Limits a policy puts on one call; None means the runner's default applies."""

    max_runtime_ms: int | None = None
    max_result_bytes: int | None = None
    rate_limit_per_minute: int | None = None
    max_concurrency: int | None = None
    # Sampling requests (an upstream asking the client's model) one call may pass on; None or 0: none.
    max_samples_per_call: int | None = None


@dataclass(frozen=True, slots=True)
class FieldError:
    """One validation problem: where and what, never the offending value."""

    path: str
    message: str


@dataclass(frozen=True, slots=True)
class MalformedArgs:
    """Arguments a wire decoder could not turn into an object, handed to the runner in place of args.

    A model's malformed call still runs through the pipeline: it
    is looked up, decided and audited like any call, and the input stage
    answers it with this code and message instead of validating. It keeps no
    trace of the raw text, which may hold anything the model echoed.
    """

    error_code: ErrorCode
    safe_message: str


ContentBlock = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ToolContent:
    """What a tool answers when its answer is content blocks (MCP's shape), not just a value.

    `content`: the blocks as the tool sent them (text, image, audio,
    resource_link, resource), in MCP's JSON shape. `structured`: its
    structured content, if it has some. The call's value (REST `value`) is
    `structured`, else `{"content": [...]}`; MCP clients and model formats
    receive the blocks themselves.
    """

    content: tuple[ContentBlock, ...]
    structured: Mapping[str, Any] | None = None


def text_blocks(*texts: str) -> tuple[ContentBlock, ...]:
    return tuple({"type": "text", "text": text} for text in texts)


@dataclass(frozen=True, slots=True)
class ToolExecResult:
    """What `ToolRunner.exec` answers, for every outcome."""

    tool_call_id: str
    tool_id: str
    ok: bool
    value: Any = None
    error_code: ErrorCode | None = None
    safe_message: str | None = None
    errors: tuple[FieldError, ...] = ()
    approval_id: str | None = None
    retry_after_s: int | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    executed: bool = False  # the tool's code ran (idempotency keys off this)
    # The content blocks the tool answered (ok, or a `tool_error`'s own error blocks); None when
    # the tool answered a value only (interfaces then render the value as JSON text).
    content: tuple[ContentBlock, ...] | None = None
    # Whether `value` is the tool's structured content; False when it only wraps `content`
    # (`{"content": [...]}`), so MCP's structuredContent is left out.
    structured: bool = True
    # With `connection_required` (and an ambiguous choice's `validation`): the provider whose
    # connection the call needs, so an interface can send the person to connect or choose one.
    connection_provider: str | None = None
    # With `input_required`: what the upstream asks the client (runner/asking.py), for the interface.
    input_ask: InputAsk | None = None


@dataclass(frozen=True, slots=True)
class ToolInvocationRecord:
    """One finished tool call, replays included: what the audit sink stores.

    The audit stage writes one for every call, so what every call has is
    required; the rest is None where it does not apply: no value or content
    for a refusal, no `args_sha256` for arguments that are not JSON, no
    `result_bytes` for a call that ended before its result was measured, no
    `audit_ref` without an idempotency claim, no `authz_reason` unless the
    authorization stage refused.
    """

    tool_call_id: str
    tool_id: str
    ok: bool
    context: ToolInvocationContext
    decision: Decision
    executed: bool
    started_at: datetime
    ended_at: datetime
    value: Any = None
    error_code: ErrorCode | None = None
    safe_message: str | None = None
    args_sha256: str | None = None
    result_bytes: int | None = None
    content: tuple[ContentBlock, ...] | None = None  # the answered blocks, kept to replay them
    audit_ref: str | None = None  # the idempotency claim this record finishes, if any
    authz_reason: str | None = None  # why the authorization stage refused (a category, never a token)
    # The argument rule that decided the call (runner/rules.py), and its action; None when no rule had a say.
    rule_id: str | None = None
    rule_action: str | None = None
    # What the result guards found and did (runner/guardrails.py): action, guard ids, counts per kind.
    guardrail: Mapping[str, Any] | None = None
    connection_choice: ConnectionChoice | None = None  # how the connection in `context` was found, if any
    # Who confirmed or approved the request this run rests on (the approval's decider, by name);
    # None when no approval let the call run.
    approved_by: str | None = None

    @property
    def duration_ms(self) -> int:
        return int((self.ended_at - self.started_at).total_seconds() * 1000)


class EventKind(enum.StrEnum):
    TOOL_CALL_START = "tool_call_start"
    TOOL_CALL_RESULT = "tool_call_result"


@dataclass(frozen=True, slots=True)
class ToolEvent:
    """A lifecycle event; carries ids and outcome only, never args or values."""

    kind: EventKind
    tool_call_id: str
    tool_id: str
    run_id: str
    ok: bool | None = None
    error_code: ErrorCode | None = None
