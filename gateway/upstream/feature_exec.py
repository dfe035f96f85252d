"""Reading an upstream resource and fetching a prompt through Toolgate, governed like a tool call.

A read of a URI that no resource names goes through the first approved, enabled resource
template of the URI's server that the caller's `allowed_resources` allow (by the template's
name) and that matches it: the same steps, the template's id for budgets and audit, and the
upstream asked for what its own template makes of the values (features.py).

`resources/read` and `prompts/get` take the same steps as a call through the runner's
pipeline, in the same order: freshness (governance as it is now), lookup,
policy (the operator's switch and approved pin, then the caller's `allowed_resources` /
`allowed_prompts`; deny by default), the person (a subject token's delegation must be
usable; a delegation narrowed to some tools gives no resources or prompts), the budgets
(the policy's rate and concurrency, keyed by the entry's id, and its runtime), the upstream
request, the result-size bound, and one audit row (`McpFeatureRead`) whatever happened.
The caller's fair share of the API is spent by the MCP view's throttle, which counts every
message but `tools/call` (whose share the runner spends), so it is not spent twice here.

Not through `ToolRunner` itself: its stages speak `ToolSpec`s, arguments validated against
an input schema, connections and approvals, none of which a read has; bending them to fit
would put resources into the tool catalog and cost the tool path. The limiter, the
delegation store and the cache are the runner's own adapters, so budgets are shared.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone
from mcp_types import PromptReference

from gateway.upstream.client import UpstreamError, pool_for_running_loop
from gateway.upstream.features import (
    KEY_FIELD,
    PROMPT,
    RESOURCE,
    TEMPLATE,
    prompt_argument_problem,
    resource_uri_for,
    split_resource_uri,
    template_read_uri,
)
from gateway.upstream.models import McpFeature, McpFeatureRead
from gateway.upstream.services import server_target
from policies_app.adapters import CachedGovernanceView, CacheRateLimiter, DatabaseDelegationStore
from policies_app.selectors import Caller, delegation_for_token, policy_effective_for
from policies_app.toolpatterns import ToolPatterns
from runner.authz import SUBJECT_REFUSED, subject_refusal
from runner.errors import DependencyUnavailable
from runner.pipeline import DEFAULT_MAX_RESULT_BYTES, BackgroundLoop, ToolTimedOut
from runner.ports import RateLimited
from runner.schema import canonical_json
from runner.types import UNKNOWN_DELEGATION, Budgets, ErrorCode, ToolInvocationContext

logger = logging.getLogger(__name__)

DEFAULT_RUNTIME_MS = 30_000
COMPLETION_KEY = "__completion__"  # never a prompt argument's name: those are checked against the pin
UNKNOWN = {RESOURCE: "unknown resource", PROMPT: "unknown prompt"}


class FeatureRefused(Exception):
    """A read or fetch that did not answer; `code` is the contract's error code, the message is safe."""

    def __init__(self, code: ErrorCode, safe_message: str) -> None:
        super().__init__(safe_message)
        self.code = code
        self.safe_message = safe_message


@dataclass(frozen=True, slots=True)
class FeatureAccess:
    """What one caller (and its person) may see: the policy's patterns and budgets, or nothing."""

    allowed: ToolPatterns | None
    budgets: Budgets
    subject_id: str = ""


_governance = CachedGovernanceView()
_delegations = DatabaseDelegationStore()
_limiter: CacheRateLimiter | None = None


def _rate_limiter() -> CacheRateLimiter:
    global _limiter  # noqa: PLW0603 - one limiter per process, built once settings are loaded
    if _limiter is None:
        _limiter = CacheRateLimiter(api_rate_per_second=settings.TOOLGATE_API_RATE_PER_SECOND)
    return _limiter


def feature_access(
    *, caller: Caller, kind: str, subject_token: str | None = None, tool_scope: frozenset[str] | None = None
) -> FeatureAccess:
    """The caller's patterns for `kind` now; raises FeatureRefused(authz_denied) for an unusable subject token.

    A toolset's endpoint (`tool_scope`) names tools only: it serves no resources or prompts.
    """
    _governance.refresh()
    delegation_id = caller.delegation_id or (delegation_for_token(token=subject_token) if subject_token else None)
    subject_id = ""
    narrowed = False
    if delegation_id is not None:
        delegation = None if delegation_id == UNKNOWN_DELEGATION else _delegations.get(delegation_id)
        ctx = _context(caller, "feature")  # the refusal reads the caller's tenant and account only
        refusal = subject_refusal(ctx, delegation, now=timezone.now())
        if refusal is not None or delegation is None:
            raise FeatureRefused(ErrorCode.AUTHZ_DENIED, SUBJECT_REFUSED)
        subject_id = delegation.subject_id
        narrowed = delegation.tools is not None
    policy = policy_effective_for(tenant_id=caller.tenant_id, service_account_id=caller.service_account_id)
    if policy is None or tool_scope is not None or narrowed:
        return FeatureAccess(allowed=None, budgets=Budgets(), subject_id=subject_id)
    allowed = policy.allowed_prompts if kind == PROMPT else policy.allowed_resources  # templates are resources
    return FeatureAccess(allowed=allowed, budgets=policy.budgets, subject_id=subject_id)


def features_listed(
    *, caller: Caller, kind: str, subject_token: str | None = None, tool_scope: frozenset[str] | None = None
) -> list[dict[str, Any]]:
    """The approved, enabled entries of `kind` this caller's policy (and person) allow, in the protocol's shape."""
    access = feature_access(caller=caller, kind=kind, subject_token=subject_token, tool_scope=tool_scope)
    if access.allowed is None:
        return []
    return [feature_entry(row) for row in _served(kind) if access.allowed.allows(row.name)]


def feature_entry(row: McpFeature) -> dict[str, Any]:
    """A served entry as `resources/list`, `resources/templates/list`, `prompts/list` show it, under Toolgate's name."""
    entry = dict(row.approved_definition or {})
    entry[KEY_FIELD[row.kind]] = row.name
    return entry


def features_any_visible(
    *, caller: Caller, subject_token: str | None = None, tool_scope: frozenset[str] | None = None
) -> dict[str, bool]:
    """Whether this caller can see any resource, any prompt, and any prompt with completion (its capabilities)."""
    visible = {RESOURCE: False, PROMPT: False, "completion": False}
    for kind in (RESOURCE, PROMPT):
        try:
            access = feature_access(caller=caller, kind=kind, subject_token=subject_token, tool_scope=tool_scope)
        except FeatureRefused:
            continue
        if access.allowed is None:
            continue
        kinds = (RESOURCE, TEMPLATE) if kind == RESOURCE else (PROMPT,)  # a template alone offers resources
        rows = [row for served in kinds for row in _served(served) if access.allowed.allows(row.name)]
        visible[kind] = bool(rows)
        if kind == PROMPT:
            visible["completion"] = any(row.server.offers_completions for row in rows)
    return visible


def _served(kind: str) -> list[McpFeature]:
    return list(
        McpFeature.objects.select_related("server")
        .filter(
            kind=kind,
            status="approved",
            is_enabled=True,
            server__enabled=True,
            server__removed_at__isnull=True,
            server__provider="",
        )
        .order_by("name")
    )


def feature_fetch(
    *,
    caller: Caller,
    kind: str,
    name: str,
    arguments: Mapping[str, Any] | None = None,
    subject_token: str | None = None,
    tool_scope: frozenset[str] | None = None,
    completion: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Read the resource or fetch the prompt `name` for this caller: the upstream's result as JSON.

    With `completion` ({"argument": {"name", "value"}, "context": {...}}), ask the upstream for
    suggestions for one argument of the prompt instead (`completion/complete`): the same steps,
    audited as a completion, offered only for prompts of servers that declare `completions`.

    Raises FeatureRefused (after writing the audit row) for everything that did not answer.
    An entry the caller may not see is refused as unknown, as a tool outside the catalog is;
    the audit row keeps the real reason.
    """
    started_at, clock = timezone.now(), time.monotonic()
    arguments = dict(arguments or {})
    asked = completion if completion is not None else arguments
    args_sha256 = hashlib.sha256(canonical_json(asked)).hexdigest() if kind == PROMPT else ""
    row: McpFeature | None = None
    subject_id = ""
    audit: dict[str, Any] = {
        "kind": McpFeatureRead.Kind.COMPLETION if completion is not None else kind,
        "name": name,
        "started_at": started_at,
        "clock": clock,
        "code": None,
        "message": "",
        "args_sha256": args_sha256,
    }
    result_bytes: int | None = None
    try:
        try:
            access = feature_access(caller=caller, kind=kind, subject_token=subject_token, tool_scope=tool_scope)
            subject_id = access.subject_id
            row = McpFeature.objects.select_related("server").filter(kind=kind, name=name).first()
            upstream_uri = None
            if row is None and kind == RESOURCE:
                row, upstream_uri = _through_template(name, access)
            if row is None:
                raise FeatureRefused(ErrorCode.UNAVAILABLE, UNKNOWN[kind])
            if not _servable(row):
                raise FeatureRefused(
                    ErrorCode.POLICY_DENIED, f"{row.get_kind_display().lower()} is disabled or awaits approval"
                )
            if access.allowed is None or not access.allowed.allows(row.name):
                raise FeatureRefused(ErrorCode.POLICY_DENIED, f"{row.get_kind_display().lower()} not allowed by policy")
            if completion is not None:
                arguments = _completion_request(row, completion)
            elif kind == PROMPT:
                problem = prompt_argument_problem(row.approved_definition or {}, arguments)
                if problem is not None:
                    raise FeatureRefused(ErrorCode.VALIDATION, problem)
            result, result_bytes = _fetch_within_budgets(caller, row, arguments, access.budgets, uri=upstream_uri)
        except DependencyUnavailable:
            raise FeatureRefused(
                ErrorCode.UNAVAILABLE_DEPENDENCY, "a database or cache Toolgate needs is unreachable; retry later"
            ) from None
    except FeatureRefused as refused:
        audit.update(code=refused.code, message=refused.safe_message, result_bytes=result_bytes, row=row)
        _audit(caller, **audit, subject_id=subject_id)
        raise
    audit.update(result_bytes=result_bytes, row=row)
    _audit(caller, **audit, subject_id=subject_id)
    return result


MAX_COMPLETION_VALUE_CHARS = 1000


def _completion_request(row: McpFeature, completion: Mapping[str, Any]) -> dict[str, Any]:
    """The checked completion request: an argument the pinned prompt declares, string values only."""
    if row.kind != PROMPT or not row.server.offers_completions:
        raise FeatureRefused(ErrorCode.VALIDATION, "this prompt offers no completion")
    declared = {str(argument["name"]) for argument in (row.approved_definition or {}).get("arguments") or []}
    argument = completion.get("argument")
    context = completion.get("context") or {}
    if not isinstance(argument, Mapping) or not isinstance(argument.get("name"), str):
        raise FeatureRefused(ErrorCode.VALIDATION, "argument must be an object with a name and a value")
    value = argument.get("value")
    if not isinstance(value, str) or len(value) > MAX_COMPLETION_VALUE_CHARS:
        limit = MAX_COMPLETION_VALUE_CHARS
        raise FeatureRefused(ErrorCode.VALIDATION, f"argument value must be a string of at most {limit} characters")
    if argument["name"] not in declared:
        raise FeatureRefused(ErrorCode.VALIDATION, f"the prompt has no argument {argument['name'][:64]!r}")
    known = context.get("arguments") if isinstance(context, Mapping) else None
    known = known or {}
    if not isinstance(known, Mapping) or not all(
        isinstance(key, str) and key in declared and isinstance(item, str) and len(item) <= MAX_COMPLETION_VALUE_CHARS
        for key, item in known.items()
    ):
        raise FeatureRefused(ErrorCode.VALIDATION, "context.arguments must map the prompt's arguments to strings")
    return {COMPLETION_KEY: {"argument": {"name": argument["name"], "value": value}, "context": dict(known)}}


def _through_template(uri: str, access: FeatureAccess) -> tuple[McpFeature | None, str | None]:
    """The template a read of `uri` goes through, and the upstream URI it stands for; (None, None): none matches.

    Of the server's templates that match, the first (by name) that is servable and allowed;
    when none of those is, the first that matches (so the refusal names the real reason).
    """
    parts = split_resource_uri(uri)
    if parts is None:
        return None, None
    candidates = McpFeature.objects.select_related("server").filter(kind=TEMPLATE, server__slug=parts[0])
    matched: list[tuple[McpFeature, str]] = []
    for row in candidates.order_by("name"):
        upstream_uri = template_read_uri(toolgate_template=row.name, upstream_template=row.upstream_key, uri=uri)
        if upstream_uri is not None:
            matched.append((row, upstream_uri))
    for row, upstream_uri in matched:
        if _servable(row) and access.allowed is not None and access.allowed.allows(row.name):
            return row, upstream_uri
    return matched[0] if matched else (None, None)


def _servable(row: McpFeature) -> bool:
    server = row.server
    return (
        row.status == "approved"
        and row.is_enabled
        and server.enabled
        and server.removed_at is None
        and not server.provider
    )


def _fetch_within_budgets(
    caller: Caller, row: McpFeature, arguments: dict[str, Any], budgets: Budgets, *, uri: str | None = None
) -> tuple[dict[str, Any], int]:
    runtime_ms = budgets.max_runtime_ms or DEFAULT_RUNTIME_MS
    lease = _rate_limiter().acquire(_context(caller, row.ident), row.ident, budgets, lease_s=runtime_ms / 1000 + 10)
    if isinstance(lease, RateLimited):
        raise FeatureRefused(ErrorCode.RATE_LIMITED, lease.safe_message)
    try:
        raw = _upstream(row, arguments, timeout_s=runtime_ms / 1000, uri=uri)
    finally:
        lease.release()
    result = _shaped(row, raw)
    size = len(canonical_json(result))
    limit = budgets.max_result_bytes or getattr(settings, "TOOLGATE_MAX_RESULT_BYTES", DEFAULT_MAX_RESULT_BYTES)
    if size > limit:
        what = "the prompt is" if row.kind == PROMPT else "the resource's contents are"
        raise FeatureRefused(ErrorCode.RESULT_TOO_LARGE, f"{what} {size} bytes; the budget is {limit} bytes")
    return result, size


def _upstream(row: McpFeature, arguments: dict[str, Any], *, timeout_s: float, uri: str | None = None) -> Any:
    """The upstream's answer; `uri`: what a template read asks for (a resource's own URI otherwise)."""
    target = server_target(row.server)

    async def send(client: Any) -> Any:
        if row.kind in (RESOURCE, TEMPLATE):
            return await client.read_resource(uri or row.upstream_key)
        if COMPLETION_KEY in arguments:
            asked = arguments[COMPLETION_KEY]
            reference = PromptReference(type="ref/prompt", name=row.upstream_key)
            return await client.complete(reference, asked["argument"], asked["context"] or None)
        return await client.get_prompt(row.upstream_key, arguments or None)

    async def request() -> Any:
        return await pool_for_running_loop().request(target, send)

    try:
        return BackgroundLoop.shared().run(request(), timeout_s=timeout_s)
    except ToolTimedOut:
        raise FeatureRefused(ErrorCode.TIMEOUT, f"the upstream did not answer within {timeout_s:g} s") from None
    except UpstreamError as error:
        code = ErrorCode.RESULT_TOO_LARGE if error.kind == UpstreamError.TOO_LARGE else ErrorCode.EXECUTION
        raise FeatureRefused(code, error.safe_message) from None


def _shaped(row: McpFeature, raw: Any) -> dict[str, Any]:
    """The result as the caller sees it: resource contents carry Toolgate's URIs, never the upstream's."""
    result: dict[str, Any] = raw.model_dump(mode="json", by_alias=True, exclude_none=True)
    result.pop("_meta", None)
    result.pop("resultType", None)
    if row.kind in (RESOURCE, TEMPLATE):
        for content in result.get("contents") or []:
            if isinstance(content, dict) and isinstance(content.get("uri"), str):
                content["uri"] = resource_uri_for(row.server.slug, content["uri"])
    return result


def _context(caller: Caller, call_id: str) -> ToolInvocationContext:
    return ToolInvocationContext(
        run_id="", tool_call_id=call_id, tenant_id=str(caller.tenant_id), actor_id=caller.service_account_id
    )


def _audit(
    caller: Caller,
    *,
    kind: str,
    name: str,
    row: McpFeature | None,
    subject_id: str,
    started_at: datetime,
    clock: float,
    code: ErrorCode | None,
    message: str,
    args_sha256: str,
    result_bytes: int | None,
) -> None:
    McpFeatureRead.objects.create(
        tenant_id=caller.tenant_id,
        service_account_id=caller.service_account_id,
        subject_id=subject_id,
        kind=kind,
        ident=row.ident if row is not None else "",
        name=name[:2100],
        ok=code is None,
        error_code=code.value if code is not None else "",
        safe_message=message[:500],
        args_sha256=args_sha256,
        result_bytes=result_bytes,
        started_at=started_at,
        ended_at=timezone.now(),
        duration_ms=int((time.monotonic() - clock) * 1000),
    )
