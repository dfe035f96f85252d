"""ToolRunner: the one path every tool call takes.

The pipeline is a chain of stages composed like Django middleware: each stage
receives the call and `proceed`, and either ends the call with a typed result
or hands it on (and may look at what came back). `default_stages()` builds the
chain, outermost first (docs/architecture.md has the table of what each does
and what it refuses with):

    audit > freshness > fairness > lookup > policy > authorization > connection gate
    > [idempotency] > budget > validate input > argument rules > approval > broker > start event
    > result size > result guards > redact > validate output > execute (the end of the chain)

The freshness stage brings the process's view of governance up to date
first, so an operator's change applies to the next call whoever makes it.
The authorization stage runs after the policy allowed the service
account: a call on behalf of a person (a subject token) also needs that
person's delegation and permission; a call without one passes untouched.
The fairness stage spends one caller's share of the API before anything is
looked up, so a flood is refused cheaply and still audited as `rate_limited`.
The optional idempotency stage (a port of its own) answers a repeated
tool_call_id with its recorded result. It sits after the kill switch, the
policy and the grant, so a replay never outlives the permission that let the
call run (a disabled tool or a revoked grant replays nothing), and before the
budgets, so a replay spends none. For the same reason a replay is judged again
by the current argument rules (a deny saved since refuses it) and result guards.
The connection gate runs before the budgets for the same reason; it reads
grants only, no credential.
The argument rules (runner/rules.py) read the validated arguments, so they run
after input validation and before the approval and the broker: a denied call
never touches a credential, and a rule that asks for a person opens the
approval with the exact arguments. The result guards (runner/guardrails.py)
scan what the allowlist let through, before the result budget measures it.
Result size, guards, redaction and output validation act on the way back, which is why
they sit outside `execute` in reverse order. A deployment inserts its own
stages (a cache, a semaphore) by passing its own list to `ToolRunner`.

Everything but `execute` runs in the caller's thread (adapters may use Django's
ORM there). The tool's async `execute` runs on a per-process event loop thread,
so the runner can cancel it at its budget and the caller gets its answer within
budget + 100 ms even when a tool misbehaves.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

from pydantic import BaseModel

from runner.asking import CALL_INPUT, InputAsk, InputAsked
from runner.authz import DelegationAuthorization, NoDelegations
from runner.bound import BoundTool
from runner.capabilities import AuthCapability, ClockCapability, ToolCapabilities
from runner.catalog import catalog_for, unknown_tool_message
from runner.contracts import MAX_TIMEOUT_MS, ON_LOOP, BlockingExecuteFn
from runner.errors import (
    BrokerError,
    CapabilityError,
    DependencyUnavailable,
    InputInvalid,
    OutputInvalid,
    RedactionError,
    ToolCancelled,
    ToolError,
    ToolFailure,
)
from runner.grants import ChoicePages, ChosenConnection, GateRefusal, check_connection, resolve_connection
from runner.guardrails import (
    ArgumentFinding,
    ArgumentScan,
    GuardAction,
    GuardOutcome,
    guards_for,
    scan,
    scan_arguments,
    withheld_message,
)
from runner.ports import (
    NO_RULES,
    ApprovalDesk,
    AuditSink,
    AuthorizationPort,
    CallRules,
    Clock,
    Conflict,
    ConnectionBroker,
    EventSink,
    GovernanceView,
    GrantStore,
    IdempotencyStore,
    PolicyApprovalDesk,
    PolicyDecider,
    RateLimited,
    RateLimiter,
    Replay,
    RuleBook,
    ToolSource,
)
from runner.redaction import carries_credential, credential_fragments, redact_content
from runner.rules import RuleAction, RuleMatch, activation_for, decide
from runner.schema import canonical_json
from runner.types import (
    Budgets,
    ConnectionChoice,
    ContentBlock,
    Decision,
    ErrorCode,
    EventKind,
    FieldError,
    MalformedArgs,
    ToolContent,
    ToolEvent,
    ToolExecResult,
    ToolInvocationContext,
    ToolInvocationRecord,
)

logger = logging.getLogger(__name__)

DEFAULT_MAX_RESULT_BYTES = 1024 * 1024
# How long the caller waits past the budget for a tool that ignores cancellation.
HARD_STOP_GRACE_S = 0.05
# A tool_call_id claim outlives the tool's runtime budget by this much: the stages around
# execution (a bounded token refresh, validation, the audit write) finish within it.
CLAIM_LEASE_GRACE_S = 10.0
# The longest any request may take: the longest tool budget and the claim's grace. The web
# server's timeout (gunicorn.conf.py) is derived from it, so it never kills a call the runner
# still considers alive.
REQUEST_TIMEOUT_S = MAX_TIMEOUT_MS / 1000 + CLAIM_LEASE_GRACE_S
# What a caller is told to wait when the database or cache is unreachable.
DEPENDENCY_RETRY_AFTER_S = 5
DEPENDENCY_MESSAGE = "a database or cache Toolgate needs is unreachable; nothing ran; retry later"
CREDENTIAL_IN_OUTPUT = "tool output contains the connection's credential; it was withheld"
DISABLED_MESSAGE = "tool is disabled"
TOOL_ERROR_MESSAGE = "the tool reported an error meant for the model; its content says what"
INPUT_REQUIRED_MESSAGE = "the tool asks the client for input before it can answer; retry with the answers"


@dataclass(slots=True)
class Call:
    """The state of one call as it moves through the stages."""

    tool_id: str
    raw_args: Any
    ctx: ToolInvocationContext
    started_at: datetime
    args_sha256: str | None = None
    tool: BoundTool | None = None
    decision: Decision = Decision.NOT_DECIDED
    budgets: Budgets = field(default_factory=Budgets)
    args: BaseModel | None = None
    auth: AuthCapability | None = field(default=None, repr=False)
    executed: bool = False
    result_bytes: int | None = None
    audit_ref: str | None = None
    authz_reason: str | None = None
    rules: CallRules = field(default=NO_RULES, repr=False)
    rule_match: RuleMatch | None = None
    guard_outcome: GuardOutcome | None = None
    argument_finding: ArgumentFinding | None = None
    # What the person the call is for declared for its caller (set by the authorization stage from
    # the delegation); None for a call on nobody's behalf. The connection gate chooses among them.
    consented_connection_ids: frozenset[str] | None = None
    connection_choice: ConnectionChoice | None = None
    approved_by: str | None = None  # who confirmed or approved the request this run rests on (ApprovalStage)
    # runner/observe.py's timing: each stage's own seconds as it ended, and the seconds of all that ended.
    stage_times: list[tuple[str, float]] = field(default_factory=list, repr=False)
    timed_seconds: float = field(default=0.0, repr=False)

    def fail(self, code: ErrorCode, safe_message: str, **extra: Any) -> ToolExecResult:
        return ToolExecResult(
            tool_call_id=self.ctx.tool_call_id,
            tool_id=self.tool_id,
            ok=False,
            error_code=code,
            safe_message=safe_message,
            started_at=self.started_at,
            executed=self.executed,
            **extra,
        )

    def succeed(self, output: Any) -> ToolExecResult:
        """The tool's answer: a value, or content blocks (whose value is their structured content, else the blocks)."""
        value, content, structured = output, None, True
        if isinstance(output, ToolContent):
            content = tuple(dict(block) for block in output.content)
            structured = output.structured is not None
            value = dict(output.structured) if output.structured is not None else {"content": list(content)}
        return ToolExecResult(
            tool_call_id=self.ctx.tool_call_id,
            tool_id=self.tool_id,
            ok=True,
            value=value,
            content=content,
            structured=structured,
            started_at=self.started_at,
            executed=True,
        )

    def tool_error(self, content: tuple[ContentBlock, ...]) -> ToolExecResult:
        """The tool ran and answered an error for the model: its blocks are the answer."""
        return self.fail(ErrorCode.TOOL_ERROR, TOOL_ERROR_MESSAGE, content=tuple(dict(block) for block in content))

    @property
    def bound(self) -> BoundTool:
        if self.tool is None:  # only stages after lookup ask, so this is a wiring bug
            raise RuntimeError("stage ordering error: tool not looked up yet")
        return self.tool


Handler = Callable[[Call], ToolExecResult]


class Stage(Protocol):
    def __call__(self, call: Call, proceed: Handler) -> ToolExecResult: ...


# --- stages, in pipeline order -------------------------------------------------


@dataclass(frozen=True, slots=True)
class AuditStage:
    """(12) Whatever happened inside, emit the result event and write one audit row."""

    audit: AuditSink
    events: EventSink
    clock: Clock

    def __call__(self, call: Call, proceed: Handler) -> ToolExecResult:
        call.args_sha256 = args_digest(call.raw_args)
        try:
            result = proceed(call)
        except DependencyUnavailable:  # fail closed: whatever stage met the outage, the tool did not run
            logger.error("tool call %s: a dependency is unreachable", call.ctx.tool_call_id)
            result = call.fail(
                ErrorCode.UNAVAILABLE_DEPENDENCY, DEPENDENCY_MESSAGE, retry_after_s=DEPENDENCY_RETRY_AFTER_S
            )
        except Exception as exc:  # a port failed: the caller gets a safe answer, operators the log
            logger.error("tool call %s failed inside the runner: %s", call.ctx.tool_call_id, type(exc).__name__)
            result = call.fail(ErrorCode.EXECUTION, "the tool call failed")
        ended_at = self.clock.now()
        replayed = call.decision is Decision.REPLAYED
        if not replayed:  # a replay answers the recorded result as it was, its times included
            result = replace(result, ended_at=ended_at)
        self.events.emit(
            ToolEvent(
                kind=EventKind.TOOL_CALL_RESULT,
                tool_call_id=call.ctx.tool_call_id,
                tool_id=call.tool_id,
                run_id=call.ctx.run_id,
                ok=result.ok,
                error_code=result.error_code,
            )
        )
        self.audit.record(
            ToolInvocationRecord(
                tool_call_id=call.ctx.tool_call_id,
                tool_id=call.tool_id,
                ok=result.ok,
                value=result.value if result.ok else None,
                content=result.content,
                error_code=result.error_code,
                safe_message=result.safe_message,
                # the replay's own row: when it was asked and answered, not the original's times
                started_at=call.started_at if replayed else (result.started_at or call.started_at),
                ended_at=ended_at,
                context=call.ctx,
                decision=call.decision,
                executed=result.executed,
                args_sha256=call.args_sha256,
                result_bytes=call.result_bytes,
                audit_ref=call.audit_ref,
                authz_reason=call.authz_reason,
                rule_id=call.rule_match.rule_id if call.rule_match is not None else None,
                rule_action=call.rule_match.action.value if call.rule_match is not None else None,
                guardrail=guardrail_audit(call),
                connection_choice=call.connection_choice,
                approved_by=call.approved_by,
            )
        )
        return result


@dataclass(frozen=True, slots=True)
class FreshnessStage:
    """Every call sees governance as it is now: a kill switch or policy change applies to the next call.

    The runner owns this, not the interface in front of it, so a call from a
    task, a command or the MCP endpoint is as fresh as one over REST.
    """

    governance: GovernanceView

    def __call__(self, call: Call, proceed: Handler) -> ToolExecResult:
        self.governance.refresh()
        return proceed(call)


@dataclass(frozen=True, slots=True)
class FairnessStage:
    """Each caller's share of the API, spent before any lookup."""

    limiter: RateLimiter

    def __call__(self, call: Call, proceed: Handler) -> ToolExecResult:
        refusal = self.limiter.admit(call.ctx)
        if refusal is not None:
            return call.fail(ErrorCode.RATE_LIMITED, refusal.safe_message, retry_after_s=refusal.retry_after_s)
        return proceed(call)


@dataclass(frozen=True, slots=True)
class LookupStage:
    """(1) An unknown tool fails loudly, suggesting the closest id of the caller's catalog (typos are the usual cause).

    A tool the source knows but has not bound yet (an upstream definition awaiting its first
    approval) is refused as a disabled tool is: it exists, an operator has not switched it on.

    The catalog is computed only on this failure path, so a known tool costs nothing more.
    """

    source: ToolSource
    policy: PolicyDecider | None = None

    def __call__(self, call: Call, proceed: Handler) -> ToolExecResult:
        scope = call.ctx.tool_scope
        call.tool = self.source.get(call.tool_id) if scope is None or call.tool_id in scope else None
        if call.tool is None:
            if (scope is None or call.tool_id in scope) and self.source.is_pending(call.tool_id):
                call.decision = Decision.DENY
                return call.fail(ErrorCode.POLICY_DENIED, DISABLED_MESSAGE)
            catalog = catalog_for(call.ctx, self.source, self.policy) if self.policy is not None else []
            return call.fail(ErrorCode.UNAVAILABLE, unknown_tool_message(call.tool_id, catalog))
        return proceed(call)


@dataclass(frozen=True, slots=True)
class PolicyStage:
    """(2) The operator's kill switch first, then the caller's policy. Deny by default.

    A call whose effect needs an operator's approval goes on: the approval is
    asked for (or consumed) only once the call has passed every other check
    (ApprovalStage), so an operator is never asked to approve a call that could
    not run anyway.
    """

    source: ToolSource
    policy: PolicyDecider

    def __call__(self, call: Call, proceed: Handler) -> ToolExecResult:
        if not self.source.is_enabled(call.tool_id):
            call.decision = Decision.DENY
            return call.fail(ErrorCode.POLICY_DENIED, DISABLED_MESSAGE)
        verdict = self.policy.decide(call.ctx, call.bound.spec, args_sha256=None)
        call.decision = verdict.decision
        call.budgets = verdict.budgets
        if verdict.decision in (Decision.ALLOW, Decision.REQUIRE_APPROVAL):
            return proceed(call)
        return call.fail(ErrorCode.POLICY_DENIED, verdict.safe_message or "not allowed by policy")


@dataclass(frozen=True, slots=True)
class AuthorizationStage:
    """(2b) On behalf of a person: their delegation and permission, after the caller's own policy.

    The subject the call is for comes from the port's answer (the delegation the
    server found for the subject token), so later stages (the connection gate's
    personal connections, idempotency, audit) see who it is; nothing a request
    carries can set it. A call without a subject token is handed on untouched.
    """

    authorization: AuthorizationPort

    def __call__(self, call: Call, proceed: Handler) -> ToolExecResult:
        if call.ctx.delegation_id is None:
            return proceed(call)
        verdict = self.authorization.check(call.ctx, call.bound.spec)
        if verdict.subject_id != call.ctx.subject_id:
            call.ctx = replace(call.ctx, subject_id=verdict.subject_id)
        if verdict.allowed:
            call.consented_connection_ids = verdict.connection_ids
            return proceed(call)
        call.decision = Decision.DENY
        call.authz_reason = verdict.reason
        return call.fail(ErrorCode.AUTHZ_DENIED, verdict.safe_message or "not authorized for this person")


@dataclass(frozen=True, slots=True)
class ConnectionGateStage:
    """(4) grant ∩ declared, before any credential is touched (and before a replay is answered).

    A call on a person's behalf that names no connection gets one here, chosen
    among the caller's grants and what the person declared (runner/grants.py);
    the chosen connection and grant go into the context, so idempotency, the
    broker and the audit row see them as if the call had named them, and the
    usual check then runs on them all the same. The API-key path (no person)
    reads nothing more than before.
    """

    grants: GrantStore
    clock: Clock
    pages: ChoicePages = field(default_factory=ChoicePages)

    def __call__(self, call: Call, proceed: Handler) -> ToolExecResult:
        spec = call.bound.spec
        now = self.clock.now()
        if call.consented_connection_ids is not None:
            found = resolve_connection(
                call.ctx, spec, call.consented_connection_ids, self.grants, now=now, pages=self.pages
            )
            if isinstance(found, GateRefusal):
                return _refused_by_gate(call, found)
            if isinstance(found, ChosenConnection):
                call.ctx = replace(
                    call.ctx,
                    connection_id=found.connection_id,
                    grant_id=found.grant_id,
                    declared_connection_ids=found.declared,
                )
                call.connection_choice = found.reason
        if call.connection_choice is None and spec.requires_connection and call.ctx.connection_id:
            call.connection_choice = ConnectionChoice.NAMED
        refusal = check_connection(call.ctx, spec, self.grants, now=now)
        if refusal is None:
            return proceed(call)
        return _refused_by_gate(call, refusal)


def _refused_by_gate(call: Call, refusal: GateRefusal) -> ToolExecResult:
    errors = (FieldError(path=refusal.path, message=refusal.safe_message),) if refusal.path else ()
    return call.fail(refusal.code, refusal.safe_message, errors=errors, connection_provider=refusal.provider)


@dataclass(frozen=True, slots=True)
class IdempotencyStage:
    """A tool_call_id that already ran answers its recorded result, to its own caller only.

    Generated ids cannot repeat, so they skip the claim (and its database write).
    """

    store: IdempotencyStore
    rules: RuleStage | None = None
    guards: GuardStage | None = None

    def __call__(self, call: Call, proceed: Handler) -> ToolExecResult:
        if call.ctx.tool_call_id_generated:
            return proceed(call)
        claim = self.store.claim(
            call.ctx,
            call.tool_id,
            args_sha256=call.args_sha256,
            lease_s=call_lease_s(call),
            wait_s=runtime_budget_ms(call) / 1000,
        )
        if isinstance(claim, Replay):
            return self._replay(call, replace(claim.result, tool_call_id=call.ctx.tool_call_id, executed=False))
        if isinstance(claim, Conflict):
            return call.fail(ErrorCode.IDEMPOTENCY_CONFLICT, claim.safe_message, retry_after_s=claim.retry_after_s)
        call.audit_ref = claim.ref
        return proceed(call)

    def _replay(self, call: Call, recorded: ToolExecResult) -> ToolExecResult:
        """The recorded answer, judged again by today's argument rules and result guards.

        A replay hands the model a tool's answer, so it must not outlive a deny
        rule saved since the call ran (as it does not outlive the policy or the
        grant), nor carry a secret a guard added since would have kept back.
        Rules that ask for a person do not stop a replay: nothing runs again, and
        the action they would gate has already happened. A recorded refusal is
        no tool's answer and is replayed as it is.
        """
        if self.rules is None or not answered(recorded):
            call.decision = Decision.REPLAYED
            return recorded

        def recorded_answer(_call: Call) -> ToolExecResult:
            return recorded

        def guarded(judged: Call) -> ToolExecResult:
            return self.guards(judged, recorded_answer) if self.guards is not None else recorded

        result = self.rules(call, guarded)
        if call.decision is not Decision.DENY:
            call.decision = Decision.REPLAYED
        return result


@dataclass(frozen=True, slots=True)
class BudgetStage:
    """(3) Rate and concurrency budgets; the slot is released when the call ends."""

    limiter: RateLimiter

    def __call__(self, call: Call, proceed: Handler) -> ToolExecResult:
        lease = self.limiter.acquire(call.ctx, call.tool_id, call.budgets, lease_s=call_lease_s(call))
        if isinstance(lease, RateLimited):
            return call.fail(ErrorCode.RATE_LIMITED, lease.safe_message, retry_after_s=lease.retry_after_s)
        try:
            return proceed(call)
        finally:
            lease.release()


class ValidateInputStage:
    """(5) Strict validation against the contract's input model.

    Arguments a wire decoder could not parse arrive as `MalformedArgs` and are
    answered here with the decoder's code (`invalid_json`), after the lookup,
    policy and grant have been decided like for any call.
    """

    def __call__(self, call: Call, proceed: Handler) -> ToolExecResult:
        if isinstance(call.raw_args, MalformedArgs):
            return call.fail(call.raw_args.error_code, call.raw_args.safe_message)
        try:
            call.args = call.bound.validate_input(call.raw_args)
        except InputInvalid as exc:
            return call.fail(ErrorCode.VALIDATION, "arguments do not match the tool's schema", errors=exc.errors)
        return proceed(call)


@dataclass(frozen=True, slots=True)
class RuleStage:
    """(5a) The argument rules of the caller's scopes, on the validated arguments (runner/rules.py).

    Deny ends the call with the operator's message; require_approval and
    require_confirmation send it to the approval stage with the rule as the
    reason; allow (an exception to a broader deny) lets it go on as the policy
    decided. A call with no rule covering it costs one cached lookup.
    First, the guards that scan arguments look for secrets in them: one that
    refuses ends the call before any rule, approval page or credential sees it.
    """

    book: RuleBook
    grants: GrantStore
    clock: Clock

    def __call__(self, call: Call, proceed: Handler) -> ToolExecResult:
        call.rules = rules = self.book.for_caller(call.ctx)
        spec = call.bound.spec
        scanning = [g for g in rules.guards if g.arguments is not ArgumentScan.IGNORE and g.covers(spec)]
        if scanning:  # a result-only guard costs nothing here
            finding = scan_arguments(scanning, call.raw_args)
            if finding is not None:
                call.argument_finding = finding
                if finding.action is ArgumentScan.REFUSE:
                    logger.warning("tool call %s: a secret in the arguments; refused", call.ctx.tool_call_id)
                    call.decision = Decision.DENY
                    return call.fail(ErrorCode.POLICY_DENIED, finding.refusal())
        covering = [rule for rule in rules.arguments if rule.covers(spec)]
        if not covering:  # no rule for this tool: nothing to evaluate, no variables to build
            return proceed(call)
        match = decide(covering, spec, rules.prepare(self._variables(call, rules)))
        if match is None:
            return proceed(call)
        call.rule_match = match
        if match.action is RuleAction.ALLOW:
            return proceed(call)
        if match.action is RuleAction.DENY:
            call.decision = Decision.DENY
            return call.fail(ErrorCode.POLICY_DENIED, match.message or f"refused by rule {match.name!r}")
        call.decision = Decision.REQUIRE_APPROVAL
        return proceed(call)

    def _variables(self, call: Call, rules: CallRules) -> dict[str, Any]:
        ctx = call.ctx
        grant = self.grants.get(ctx.grant_id) if ctx.grant_id and ctx.connection_id else None
        return activation_for(
            args=call.raw_args,
            spec=call.bound.spec,
            caller=rules.caller,
            subject_id=ctx.subject_id,
            connection_id=ctx.connection_id,
            personal_connection=grant is not None and ctx.connection_id in grant.personal,
            now=self.clock.now(),
        )


@dataclass(frozen=True, slots=True)
class ApprovalStage:
    """(5b) For a call the policy sends to a person: open, wait on or use its approval.

    Runs after input validation, so the approval binds the exact, valid args
    (by hash) and is only ever asked for a call that could run. An approval is
    spent only when the tool actually ran: a repeat refused further down (the
    credential was revoked meanwhile) leaves it usable.
    """

    approvals: ApprovalDesk

    def __call__(self, call: Call, proceed: Handler) -> ToolExecResult:
        if call.decision is not Decision.REQUIRE_APPROVAL:
            return proceed(call)
        rule = call.rule_match
        if rule is not None and rule.action in (RuleAction.REQUIRE_APPROVAL, RuleAction.REQUIRE_CONFIRMATION):
            verdict = self.approvals.request_for_rule(
                call.ctx, call.bound.spec, args_sha256=call.args_sha256, args=call.raw_args, rule=rule
            )
        else:
            verdict = self.approvals.request(
                call.ctx, call.bound.spec, args_sha256=call.args_sha256, args=call.raw_args
            )
        call.decision = verdict.decision
        if verdict.decision is Decision.ALLOW:
            call.approved_by = verdict.decided_by
            result = proceed(call)
            if result.executed and verdict.approval_id is not None:
                try:
                    self.approvals.used(verdict.approval_id)
                except Exception as exc:  # the tool ran: its answer stands; the claim keeps it from running twice
                    logger.error("approval %s not marked used: %s", verdict.approval_id, type(exc).__name__)
            return result
        if verdict.decision is Decision.REQUIRE_APPROVAL:
            return call.fail(
                ErrorCode.APPROVAL_REQUIRED,
                verdict.safe_message or "this call needs a person's approval",
                approval_id=verdict.approval_id,
            )
        return call.fail(ErrorCode.POLICY_DENIED, verdict.safe_message or "not allowed by policy")


@dataclass(frozen=True, slots=True)
class BrokerStage:
    """(6) Credentials for the granted connection, as a capability."""

    broker: ConnectionBroker

    def __call__(self, call: Call, proceed: Handler) -> ToolExecResult:
        if call.bound.spec.requires_connection:
            try:
                call.auth = self.broker.resolve(call.ctx, call.bound.spec)
            except BrokerError as exc:
                return call.fail(exc.code, exc.safe_message)
        return proceed(call)


@dataclass(frozen=True, slots=True)
class StartEventStage:
    """(7) The tool is about to run: announce it under the stable tool_call_id."""

    events: EventSink

    def __call__(self, call: Call, proceed: Handler) -> ToolExecResult:
        self.events.emit(
            ToolEvent(
                kind=EventKind.TOOL_CALL_START,
                tool_call_id=call.ctx.tool_call_id,
                tool_id=call.tool_id,
                run_id=call.ctx.run_id,
            )
        )
        return proceed(call)


@dataclass(frozen=True, slots=True)
class ResultSizeStage:
    """(11) The redacted, serialised value must fit the byte budget."""

    default_max_bytes: int

    def __call__(self, call: Call, proceed: Handler) -> ToolExecResult:
        result = proceed(call)
        if not answered(result):
            return result
        call.result_bytes = answer_bytes(result)
        limit = call.budgets.max_result_bytes or self.default_max_bytes
        if call.result_bytes > limit:
            return call.fail(ErrorCode.RESULT_TOO_LARGE, f"result is {call.result_bytes} bytes; the budget is {limit}")
        return result


class GuardStage:
    """(10b) The caller's result guards over what the allowlist let through (runner/guardrails.py).

    Redact replaces each secret found; withhold answers a tool error the model
    can read instead of the result; record only notes it. The audit row keeps
    what was found (kinds and counts, never the text).
    """

    def __call__(self, call: Call, proceed: Handler) -> ToolExecResult:
        result = proceed(call)
        if not call.rules.guards or not answered(result):
            return result
        guards = guards_for(call.rules.guards, call.bound.spec)
        if not guards:
            return result
        # A value that only wraps the blocks (`{"content": [...]}`) is scanned once, as the blocks it is.
        wraps_content = result.ok and not result.structured and result.content is not None
        scanned = result.value if result.ok and not wraps_content else None
        value, content, outcome = scan(guards, scanned, result.content)
        if wraps_content and content is not None:
            value = {"content": list(content)}
        if outcome is None:
            return result
        call.guard_outcome = outcome
        if outcome.action is GuardAction.WITHHOLD:
            logger.warning("tool call %s: result guard withheld the result", call.ctx.tool_call_id)
            return call.tool_error(({"type": "text", "text": withheld_message(outcome)},))
        if outcome.action is GuardAction.REDACT:
            return replace(result, value=value if result.ok else result.value, content=content)
        return result


class RedactStage:
    """(10) Only allowlisted fields leave; no allowlist, no output.

    An allowlisted field can still carry the call's own credential (an upstream
    that echoes the Authorization header into `name`): such an output is
    withheld whole, because a scrubbed copy would still be an upstream answer
    nobody can vouch for.
    """

    def __call__(self, call: Call, proceed: Handler) -> ToolExecResult:
        result = proceed(call)
        if not answered(result):
            return result
        try:
            value = call.bound.redact(result.value) if result.ok else None
            content = redact_content(result.content) if result.content is not None else None
        except RedactionError as exc:
            return call.fail(ErrorCode.REDACTION_FAILED, str(exc))
        if call.auth is not None and carries_credential(
            [value, content], credential_fragments(call.auth.headers(), call.auth.access_token())
        ):
            logger.warning("tool call %s: output carries the connection's credential; withheld", call.ctx.tool_call_id)
            return call.fail(ErrorCode.REDACTION_FAILED, CREDENTIAL_IN_OUTPUT)
        return replace(result, value=value, content=content)


class ValidateOutputStage:
    """(9) The tool's output must match its declared model."""

    def __call__(self, call: Call, proceed: Handler) -> ToolExecResult:
        result = proceed(call)
        if not result.ok:
            return result
        try:
            return replace(result, value=call.bound.validate_output(result.value))
        except OutputInvalid as exc:
            return call.fail(ErrorCode.OUTPUT_INVALID, "tool output does not match its schema", errors=exc.errors)


class ExecuteStage:
    """(8) Run the tool under its runtime budget: on the runner's event loop, or on this thread.

    A plain function runs on this thread; an async tool on the loop, unless its
    blocking fast path (`ToolDefinition.execute_blocking`) takes the call here.
    """

    def __init__(self, clock: ClockCapability, loop: BackgroundLoop | None = None) -> None:
        self._clock = clock
        self._loop = loop or BackgroundLoop.shared()

    def __call__(self, call: Call, proceed: Handler) -> ToolExecResult:
        client = CALL_INPUT.get()
        if client is None:
            return self._execute(call)
        # A tool that asks mid-call counts its sampling requests against the caller's policy itself.
        published = CALL_INPUT.set(replace(client, sample_cap=call.budgets.max_samples_per_call or 0))
        try:
            return self._execute(call)
        finally:
            CALL_INPUT.reset(published)

    def _execute(self, call: Call) -> ToolExecResult:
        tool = call.bound
        budget_ms = runtime_budget_ms(call)
        caps = tool.capabilities(clock=self._clock, auth=call.auth, ctx=call.ctx)
        call.executed = True
        try:
            if tool.definition.runs_on_loop:
                output = self._on_loop(tool, call, caps, budget_ms)
            else:
                output = _compute(tool, call, caps, budget_ms)
        except ToolTimedOut:
            return call.fail(ErrorCode.TIMEOUT, f"the tool ran past its {budget_ms} ms budget")
        except ToolError as exc:  # the tool's own answer for the model, not a failure of the call
            return call.tool_error(exc.content)
        except InputAsked as asked:
            return _input_required(call, asked.ask)
        except ToolCancelled as exc:
            return call.fail(ErrorCode.CANCELLED, str(exc))
        except (ToolFailure, CapabilityError) as exc:
            if exc.host:  # it met an upstream: name it for operators (the caller's message stays as it is)
                logger.warning(
                    "tool %s: upstream %s at %s failed: %s", call.tool_id, exc.upstream or "?", exc.host, exc
                )
            return call.fail(ErrorCode.EXECUTION, str(exc))
        except Exception as exc:  # the tool's own bug: its message may hold anything, so it stays here
            logger.warning("tool %s raised %s", call.tool_id, type(exc).__name__)
            return call.fail(ErrorCode.EXECUTION, "the tool failed")
        return call.succeed(output)

    def _on_loop(self, tool: BoundTool, call: Call, caps: ToolCapabilities, budget_ms: int) -> Any:
        """An async tool: its blocking fast path on this thread when it has one and takes the call, else the loop."""
        deadline = time.monotonic() + budget_ms / 1000
        blocking = tool.definition.execute_blocking
        if blocking is not None:
            output = _blocking(blocking, call, caps, deadline)
            if output is not ON_LOOP:
                return output
        remaining_s = deadline - time.monotonic()
        if remaining_s <= 0:
            raise ToolTimedOut
        return self._loop.run(tool.definition.execute(call.args, call.ctx, caps), timeout_s=remaining_s)


def _input_required(call: Call, ask: InputAsk) -> ToolExecResult:
    """A round that asks the client: refused when its sampling requests pass the policy's per-call cap."""
    client = CALL_INPUT.get()
    used = client.samples_used if client is not None else 0
    cap = call.budgets.max_samples_per_call or 0
    if ask.samples and used + ask.samples > cap:
        allowed = "allows no sampling" if cap == 0 else f"allows {cap} sampling request(s) per call"
        return call.fail(
            ErrorCode.POLICY_DENIED,
            f"the upstream asks the client's model to sample, and this caller's policy {allowed}",
        )
    return call.fail(ErrorCode.INPUT_REQUIRED, INPUT_REQUIRED_MESSAGE, input_ask=ask)


def _blocking(execute: BlockingExecuteFn, call: Call, caps: ToolCapabilities, deadline: float) -> Any:
    """A tool's blocking fast path, on the calling thread, in a copy of its context; too late is a timeout."""
    try:
        output = contextvars.copy_context().run(execute, call.args, call.ctx, caps, deadline)
    except TimeoutError:
        if time.monotonic() >= deadline:
            raise ToolTimedOut from None
        raise  # a timeout of the tool's own, inside its budget: a failure like any other
    if output is not ON_LOOP and time.monotonic() > deadline:
        raise ToolTimedOut
    return output


def _compute(tool: BoundTool, call: Call, caps: ToolCapabilities, budget_ms: int) -> Any:
    """A plain-function tool, on the calling thread, in a copy of its context; too late is a timeout."""
    started = time.perf_counter()
    output = contextvars.copy_context().run(tool.definition.execute, call.args, call.ctx, caps)
    if (time.perf_counter() - started) * 1000 > budget_ms:
        raise ToolTimedOut
    return output


def guardrail_audit(call: Call) -> dict[str, Any] | None:
    """The audit row's `guardrail`: what the result guards did, and under `arguments` what they found in the args."""
    audit = call.guard_outcome.audit() if call.guard_outcome is not None else {}
    if call.argument_finding is not None:
        audit["arguments"] = call.argument_finding.audit()
    return audit or None


def answered(result: ToolExecResult) -> bool:
    """The tool ran and answered: a value, or an error meant for the model (both pass the output guards)."""
    return result.ok or result.error_code is ErrorCode.TOOL_ERROR


def answer_bytes(result: ToolExecResult) -> int:
    """The serialised size of what the call answers: its value and, beside a structured value, its blocks."""
    size = 0
    if result.ok:
        size += len(json.dumps(result.value, separators=(",", ":"), ensure_ascii=False).encode())
    if result.content is not None and (result.structured or not result.ok):
        size += len(json.dumps(list(result.content), separators=(",", ":"), ensure_ascii=False).encode())
    return size


def runtime_budget_ms(call: Call) -> int:
    """The tool's own timeout, narrowed by the policy's runtime budget."""
    return min(filter(None, (call.bound.contract.default_timeout_ms, call.budgets.max_runtime_ms)))


def call_lease_s(call: Call) -> float:
    """How long anything this call holds (its tool_call_id claim, a concurrency slot) may outlive a crash."""
    return runtime_budget_ms(call) / 1000 + CLAIM_LEASE_GRACE_S


def _end_of_chain(call: Call) -> ToolExecResult:
    raise RuntimeError("the execute stage must end the chain")


# --- the runner ----------------------------------------------------------------


class ToolRunner:
    """Compose the stages once; `exec` runs one call through them."""

    def __init__(self, stages: Sequence[Stage], clock: Clock) -> None:
        self._clock = clock
        handler: Handler = _end_of_chain
        for stage in reversed(stages):
            handler = _link(stage, handler)
        self._handler = handler

    def exec(self, tool_id: str, raw_args: Any, ctx: ToolInvocationContext) -> ToolExecResult:
        return self._handler(Call(tool_id=tool_id, raw_args=raw_args, ctx=ctx, started_at=self._clock.now()))


def _link(stage: Stage, proceed: Handler) -> Handler:
    def handler(call: Call) -> ToolExecResult:
        return stage(call, proceed)

    return handler


def default_stages(
    *,
    governance: GovernanceView,
    source: ToolSource,
    policy: PolicyDecider,
    limiter: RateLimiter,
    grants: GrantStore,
    broker: ConnectionBroker,
    audit: AuditSink,
    events: EventSink,
    clock: Clock,
    idempotency: IdempotencyStore | None = None,
    approvals: ApprovalDesk | None = None,
    authorization: AuthorizationPort | None = None,
    rules: RuleBook | None = None,
    default_max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    loop: BackgroundLoop | None = None,
    pages: ChoicePages | None = None,
) -> list[Stage]:
    """The pipeline's stages in order (docs/architecture.md), wired to the given ports (idempotency when given).

    Without an approval desk, approvals are whatever the policy's `decide` answers with the args' hash.
    Without an authorization port, every call carrying a subject token is refused (no delegation is known).
    Without a rule book, no argument rule or result guard stage is built.
    `pages` are the portal's pages a refused connection choice sends the person to.
    """
    rule_stage = RuleStage(rules, grants, clock) if rules is not None else None
    guard_stage = GuardStage() if rules is not None else None
    return [
        AuditStage(audit, events, clock),
        FreshnessStage(governance),
        FairnessStage(limiter),
        LookupStage(source, policy),
        PolicyStage(source, policy),
        AuthorizationStage(authorization or DelegationAuthorization(NoDelegations(), clock)),
        ConnectionGateStage(grants, clock, pages or ChoicePages()),
        *([IdempotencyStage(idempotency, rule_stage, guard_stage)] if idempotency is not None else []),
        BudgetStage(limiter),
        ValidateInputStage(),
        *([rule_stage] if rule_stage is not None else []),
        ApprovalStage(approvals or PolicyApprovalDesk(policy)),
        BrokerStage(broker),
        StartEventStage(events),
        ResultSizeStage(default_max_result_bytes),
        *([guard_stage] if guard_stage is not None else []),
        RedactStage(),
        ValidateOutputStage(),
        ExecuteStage(clock, loop),
    ]


def args_digest(raw_args: Any) -> str | None:
    """sha256 of the args' canonical JSON: binds approvals and idempotency to exact args."""
    try:
        return hashlib.sha256(canonical_json(raw_args)).hexdigest()
    except (TypeError, ValueError):
        return None


# --- the event loop tools run on -------------------------------------------------


class ToolTimedOut(Exception):
    """The budget ran out before the tool finished."""


class BackgroundLoop:
    """One asyncio loop on a daemon thread per process.

    Tools are async; Django views are sync. Running each call's coroutine here
    (instead of `asyncio.run` per call) keeps pooled HTTP clients alive between
    calls and lets the caller stop waiting at the budget even if a tool blocks
    the loop. A forked child (gunicorn worker) starts its own loop.
    """

    _shared: BackgroundLoop | None = None
    _shared_lock = threading.Lock()

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._loop.run_forever, name="toolgate-runner-loop", daemon=True)
        self._thread.start()

    @classmethod
    def shared(cls) -> BackgroundLoop:
        with cls._shared_lock:
            if cls._shared is None or cls._shared._pid != os.getpid():
                cls._shared = cls()
            return cls._shared

    def run(self, coro: Coroutine[Any, Any, Any], *, timeout_s: float) -> Any:
        # The tool runs in a copy of the caller's context: its log lines and outbound requests
        # carry the request's ids and trace (structlog and OpenTelemetry keep them in contextvars).
        context = contextvars.copy_context()
        future = asyncio.run_coroutine_threadsafe(_within(coro, timeout_s, context), self._loop)
        try:
            return future.result(timeout=timeout_s + HARD_STOP_GRACE_S)
        except concurrent.futures.TimeoutError:
            if future.done():  # the tool raised a TimeoutError of its own: not a budget overrun
                raise
            future.cancel()  # the tool ignored cancellation (blocking code); stop waiting for it
            raise ToolTimedOut from None


async def _within(coro: Coroutine[Any, Any, Any], timeout_s: float, context: contextvars.Context) -> Any:
    return await asyncio.get_running_loop().create_task(_budgeted(coro, timeout_s), context=context)


async def _budgeted(coro: Coroutine[Any, Any, Any], timeout_s: float) -> Any:
    """The tool's coroutine, cancelled at its budget (a TimeoutError of the tool's own passes through)."""
    try:
        async with asyncio.timeout(timeout_s) as scope:
            return await coro
    except TimeoutError:
        if scope.expired():
            raise ToolTimedOut from None
        raise
