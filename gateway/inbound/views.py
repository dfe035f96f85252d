"""`POST /mcp`: the MCP interface beside the REST views (docs/mcp.md).

The same stack as `POST /api/v1/tools/exec`: DRF with the API's parser (size
and depth limits, strict JSON), the service-account authentication (which
also refreshes the governance cache once per request, so a kill switch reaches
the next list or call), the `tools:exec` scope and the fairness throttle. What
differs is the wire: every refusal is a JSON-RPC error object, never the REST
envelope, and a tool call answers the caller's catalog (`tool_catalog`) and the
runner (`tool_exec`) and nothing else.

The runner comes from `runtime_provider`, given by the composition root in
config/urls.py (`as_view(runtime_provider=runtime)`): apps never import config.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from drf_spectacular.utils import extend_schema
from mcp.shared.inbound import MCP_METHOD_HEADER, MCP_NAME_HEADER, MCP_PROTOCOL_VERSION_HEADER
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST
from rest_framework import exceptions
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView, set_rollback

from core.api.handlers import answer_outages_with
from core.api.negotiation import PlainAcceptNegotiation, plain_json_answer
from core.errors import AppError, drf_field_errors
from core.outages import OUTAGE_ERRORS
from gateway.elicitation import (
    BAD_STATE_MESSAGE,
    PersonNeeded,
    Principal,
    SealedSessions,
    call_principal,
    person_needed,
    request_state_open,
    waiting_call_id,
)
from gateway.inbound.asking import PLAIN_CALL, CallEnvelope, InputNeeded
from gateway.inbound.logs import SessionLogLevels, call_log_level
from gateway.inbound.protocol import (
    ACCEPTED,
    SESSION_HEADER,
    Backend,
    Refused,
    Reply,
    admit,
    answer,
    error_reply,
    handle,
    internal_error_reply,
    not_a_request_reply,
    parse_error_reply,
)
from gateway.inbound.streaming import asks_on_stream, cancel_in_flight, progress_token, streamed_call
from gateway.inbound.wire import CALL_META_FIELDS, META_PREFIX
from gateway.input_rounds import (
    MAX_ROUNDS,
    AnswersRefused,
    OpenedRound,
    answer_deliver,
    client_input,
    input_round_open,
    input_round_seal,
    round_on_stream,
)
from gateway.upstream.feature_exec import FeatureRefused, feature_fetch, features_any_visible, features_listed
from policies_app.authentication import (
    SCHEME,
    ServiceAccountRateThrottle,
    ToolsExecScope,
    mcp_resource_url,
    request_caller,
    request_subject_token,
)
from policies_app.selectors import Caller
from runner.asking import CALL_INPUT, AskUnanswered
from runner.pipeline import DEPENDENCY_MESSAGE, DEPENDENCY_RETRY_AFTER_S
from runner.progress import DEFAULT_MAX_EVENTS
from runner.types import ErrorCode, FieldError, ToolExecResult, ToolSpec
from tools_app.api.serializers import ExecInputSerializer
from tools_app.api.views import ToolRuntime
from tools_app.services import ExecRequest, tool_catalog, tool_exec

logger = logging.getLogger(__name__)

ROUTING_HEADERS = (MCP_PROTOCOL_VERSION_HEADER, MCP_METHOD_HEADER, MCP_NAME_HEADER)
# Where the WSGI/ASGI request keeps each (read from META: no HttpHeaders view built per message).
ROUTING_META_KEYS = tuple(
    (name, "HTTP_" + name.upper().replace("-", "_")) for name in (*ROUTING_HEADERS, SESSION_HEADER)
)
# The person a call is made for: their subject token, beside the caller's key (never in `arguments`).
SUBJECT_META_KEY = f"{META_PREFIX}subject"
MCP_PATH_OF_FIELD: Mapping[str, str] = {
    "tool_id": "name",
    "args": "arguments",
    **{field: f"_meta.{key}" for key, field in CALL_META_FIELDS.items()},
}
# What every upstream MCP tool's id starts with (`mcp__<slug>__<tool>`, docs/mcp-upstream.md).
UPSTREAM_TOOL_PREFIX = "mcp__"
# Refusals that would tell a caller a tool outside its catalog exists: answered as unknown.
HIDDEN_REFUSALS = frozenset({ErrorCode.UNAVAILABLE, ErrorCode.POLICY_DENIED})
REQUEST_INVALID = "the request is invalid"
# What MCP's Streamable HTTP clients send (the SDKs of both eras): JSON or an event stream, either first.
MCP_CLIENT_ACCEPTS = frozenset({"application/json, text/event-stream", "text/event-stream, application/json"})


class NotARequest(exceptions.ParseError):
    """Well-formed JSON that is not one JSON-RPC object: a batch, a string, a number."""


class OriginRefused(exceptions.PermissionDenied):
    """A browser page from an Origin the operator did not list (DNS rebinding)."""


class _Recording:
    """A read-only stream that keeps what was read from it, to look at a body the parser refused."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.data = b""

    def read(self, size: int = -1) -> bytes:
        chunk: bytes = self._stream.read(size)
        self.data += chunk
        return chunk


class McpJsonParser(BaseParser):
    """The API's parser (REST_FRAMEWORK's default), telling non-object JSON apart from malformed JSON.

    JSON-RPC answers the two differently (-32600 vs -32700); the API's parser
    refuses both alike. Only a refused body is looked at again, so the hot path
    parses once.
    """

    media_type = "application/json"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        api_parser: BaseParser = api_settings.DEFAULT_PARSER_CLASSES[0]()
        recording = _Recording(stream)
        try:
            return api_parser.parse(recording, media_type, parser_context)
        except exceptions.ParseError as refused:
            document = _json_or_not_json(recording.data)
            if isinstance(document, list):
                raise NotARequest("batches are not supported: send one JSON-RPC request per POST") from None
            if document is not _NOT_JSON and not isinstance(document, dict):
                raise NotARequest("the body must be a JSON-RPC request object") from None
            raise refused from None  # malformed, too deep, duplicate keys: the API parser's message says which


_NOT_JSON = object()


def _json_or_not_json(raw: bytes) -> Any:
    """`raw` as JSON (null included), or `_NOT_JSON`."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return _NOT_JSON


class McpNegotiation(PlainAcceptNegotiation):
    """The API's plain negotiation, with the Accept every MCP client sends answered directly too.

    DRF parses `application/json, text/event-stream` into media types on every
    message to pick the JSON renderer, the only one that can match: this answers
    the same choice without parsing (tests/gateway/inbound/test_mcp_negotiation.py holds
    both to the same answers). Any other value goes through DRF's negotiation.
    """

    def plain_choice(
        self, request: Any, renderers: Sequence[BaseRenderer], format_suffix: str | None
    ) -> tuple[BaseRenderer, str] | None:
        plain = super().plain_choice(request, renderers, format_suffix)
        if plain is not None or format_suffix or not renderers or self.settings.URL_FORMAT_OVERRIDE:
            return plain
        first = renderers[0]
        if first.media_type == McpJsonParser.media_type and request.META.get("HTTP_ACCEPT") in MCP_CLIENT_ACCEPTS:
            return first, first.media_type
        return None


class NonCallThrottle(ServiceAccountRateThrottle):
    """The API's fairness share for every MCP message but `tools/call`, which spends it in the runner.

    A tool call is counted once, inside the pipeline, where a refusal is audited
    like over REST; counting it here too would halve an MCP caller's share.
    """

    def allow_request(self, request: Request, view: Any) -> bool:
        message = request.data
        if isinstance(message, Mapping) and message.get("method") == "tools/call":
            return True
        return super().allow_request(request, view)


@extend_schema(exclude=True)  # JSON-RPC, not REST: described by the MCP specification, not OpenAPI
class McpView(APIView):
    """The MCP endpoint: JSON-RPC in, JSON out, one message per POST, no session."""

    permission_classes = [ToolsExecScope]
    parser_classes = [McpJsonParser]
    throttle_classes = [NonCallThrottle]
    content_negotiation_class = McpNegotiation
    # No OPTIONS (DRF's metadata): MCP clients only POST, and everything else answers 405.
    http_method_names = ["get", "post", "put", "patch", "delete", "head", "trace"]
    runtime_provider: Callable[[], ToolRuntime] | None = None

    def runtime(self) -> ToolRuntime:
        if self.runtime_provider is None:
            raise ImproperlyConfigured(f"{type(self).__name__} needs as_view(runtime_provider=...)")
        return self.runtime_provider()

    def perform_content_negotiation(self, request: Request, force: bool = False) -> tuple[BaseRenderer, str]:
        """Negotiate a POST's answer; any other method answers JSON, whatever it accepts.

        DRF negotiates before it checks the method, so the optional `GET /mcp` with
        `Accept: text/event-stream` (the stream a client may open; this server has
        none) would answer 406 where the protocol expects 401 without a key and then
        405, and MCP clients (the Inspector CLI among them) take a 406 for a failure.
        """
        return super().perform_content_negotiation(request, force=force or request.method != "POST")

    def initialize_request(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Request:
        answer_outages_with(request, _outage_answer)  # a write awaited after the view still answers JSON-RPC
        return super().initialize_request(request, *args, **kwargs)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        origin = request.META.get("HTTP_ORIGIN")
        if origin is not None and origin not in settings.TOOLGATE_MCP_ALLOWED_ORIGINS:
            raise OriginRefused("this Origin may not use the MCP endpoint")
        super().initial(request, *args, **kwargs)

    def post(self, request: Request, **kwargs: Any) -> HttpResponseBase:
        if request.stream is None:  # DRF does not call the parser for an empty body
            raise exceptions.ParseError("request body is empty")
        if not request.content_type:  # nor without a content type: it would answer an empty dict
            raise exceptions.UnsupportedMediaType("")
        message = request.data
        meta = request.META
        headers = {name: meta[key] for name, key in ROUTING_META_KEYS if key in meta}
        caller_key = str(request_caller(request).service_account_id)
        sessions = SealedSessions(request_caller(request).service_account_id)
        logs = SessionLogLevels(caller_key, headers.get(SESSION_HEADER))
        backend = self.backend_for(request, **kwargs)
        accept = meta.get("HTTP_ACCEPT", "")
        token = progress_token(message, accept)
        log_level = call_log_level(message, headers, accept, logs)
        if (
            token is not None
            or log_level is not None
            or asks_on_stream(
                message, accept, lambda: sessions.declared(headers.get(SESSION_HEADER)), backend.may_ask_client
            )
        ):
            admitted = admit(message, headers, sessions)  # a refusal keeps its HTTP status: no stream for it
            if isinstance(admitted, Reply):
                return _answer(request, admitted)
            relayed = not admitted.modern and (admitted.declared.form or admitted.declared.sampling)
            return streamed_call(
                caller_key=caller_key,
                request_id=message.get("id"),
                token=token,
                log_level=log_level,
                run=lambda relay: answer(
                    message, replace(admitted, relay=relay) if relayed else admitted, backend, sessions, logs
                ),
                max_events=DEFAULT_MAX_EVENTS,
            )
        if answer_deliver(caller_key, message):  # a 2025-era client answering a question asked on a stream
            return _answer(request, Reply(ACCEPTED, None))
        cancel_in_flight(caller_key, message)
        return _answer(request, handle(message, headers, backend, sessions, logs))

    def backend_for(self, request: Request, **kwargs: Any) -> Backend:
        """The caller's backend; a subclass narrows it (`/mcp/t/<toolset>`) or swaps it (`?mode=search`)."""
        return CallerBackend(
            runtime=self.runtime(),
            caller=request_caller(request),
            subject_token=request_subject_token(request),
            site_url=request.build_absolute_uri("/"),
        )

    def handle_exception(self, exc: Exception) -> Response:
        """Every refusal as a JSON-RPC error object with the HTTP status the transport expects."""
        set_rollback()  # as DRF's own handler does: an error must not commit an ATOMIC_REQUESTS transaction
        return _response(_reply_for(exc, metadata_url=protected_resource_metadata_url(self.request)))


class CallerBackend:
    """The protocol's `Backend` for one authenticated caller: its catalog and the runner, nothing else.

    A person's subject token (the `X-Toolgate-Subject` header, or `toolgate/subject`
    in a message's `_meta`, which wins) makes the list the tools the caller may
    run on their behalf, and a call one made for them, exactly as over REST.
    """

    def __init__(
        self,
        *,
        runtime: ToolRuntime,
        caller: Caller,
        subject_token: str | None = None,
        tool_scope: frozenset[str] | None = None,
        site_url: str = "",
    ) -> None:
        self._runtime = runtime
        self._caller = caller
        self._subject_token = subject_token
        self.tool_scope = tool_scope  # a toolset's ids (`/mcp/t/<name>`): lists and calls see only these
        self._site_url = site_url  # where the portal's pages are, for a call that waits on its person

    def list_tools(self, meta: Mapping[str, Any] | None = None) -> list[ToolSpec]:
        return tool_catalog(
            source=self._runtime.source,
            policy=self._runtime.policy,
            caller=self._caller,
            subject_token=self._subject(meta or {}),
            tool_scope=self.tool_scope,
        )

    def _subject(self, meta: Mapping[str, Any]) -> str | None:
        if SUBJECT_META_KEY not in meta:
            return self._subject_token
        subject = meta[SUBJECT_META_KEY]
        return None if subject is None else subject if isinstance(subject, str) else ""

    def run_tool(
        self, name: str, arguments: dict[str, Any], meta: Mapping[str, Any], envelope: CallEnvelope = PLAIN_CALL
    ) -> ToolExecResult | PersonNeeded | InputNeeded | None:
        """Run the call like `POST /api/v1/tools/exec`; None hides a refused tool outside the catalog.

        A 2026-07-28 call whose upstream asks the client answers `InputNeeded` (the
        vetted questions, sealed state); the retry answering them runs the next round.

        A call made for a person that waits on them answers `PersonNeeded`
        (person.py): its retry, with the sealed requestState or without any id,
        resumes the same request, so the call runs once when the person acted.

        The call goes through the runner even then, so it is audited like any
        refused call; only the answer is the one an unknown tool gets. A tool
        the runner did run (a replay, or a policy change between the two looks)
        answers its result: the runner, not this check, is the authority.
        The catalog is looked at only for such a refusal: a call that ran (or
        failed otherwise) answers its result whatever the catalog says, so the
        hot path does not build the caller's catalog for nothing.
        """
        request = exec_request_of(name, arguments, meta)
        if isinstance(request, ToolExecResult):
            return request
        subject_token = self._subject(meta)
        principal = None
        if self._caller.delegation_id is not None or subject_token is not None:
            principal = call_principal(self._caller, subject_token)
        subject_id = principal.subject_id if principal is not None else ""
        opened = self._input_round(name, arguments, envelope, subject_id, for_person=principal is not None)
        if isinstance(opened, ToolExecResult):
            return opened
        if opened is not None:
            request = _for_round(request, opened.round)
        resumed = False
        call_began = datetime.now(UTC)
        if principal is not None and request.tool_call_id is None and opened is None:
            resumed_id = self._waiting_call(principal, envelope, name, arguments)
            if isinstance(resumed_id, ToolExecResult):
                return resumed_id
            if resumed_id is not None:
                request, resumed = replace(request, tool_call_id=resumed_id), True
        result = self._exec(request, subject_token, envelope, opened)
        if result.error_code is ErrorCode.INPUT_REQUIRED and result.input_ask is not None:
            if envelope.relay is not None:
                return self._rounds_on_stream(result, request, subject_token, envelope)
            return self._next_round(result, name, arguments, subject_id, opened)
        if principal is not None and not result.ok:
            needed = person_needed(
                result,
                principal=principal,
                tenant_id=self._caller.tenant_id,
                arguments=arguments,
                resumed=resumed,
                seal_state=envelope.modern and envelope.url_elicitation,
                site_url=self._site_url,
                call_began=call_began,
            )
            if needed is not None:
                return needed
        if not result.ok and result.error_code in HIDDEN_REFUSALS and not self._in_own_catalog(name):
            return None
        return result

    def may_ask_client(self, name: str) -> bool:
        """Whether the named tool may ask the client mid-call: only its calls stream for a 2025-era client."""
        tool = self._runtime.source.get(name)
        return tool is not None and tool.may_ask_client

    def _waiting_call(
        self, principal: Principal, envelope: CallEnvelope, name: str, arguments: dict[str, Any]
    ) -> str | ToolExecResult | None:
        """The tool_call_id of the person's waiting request this call resumes, a refused state, or None."""
        if envelope.request_state is None:
            return waiting_call_id(principal=principal, tool_id=name, args=arguments)
        resumed_id = request_state_open(envelope.request_state, principal=principal, tool_id=name, args=arguments)
        return _bad_state(name) if resumed_id is None else resumed_id

    def _exec(
        self, request: ExecRequest, subject_token: str | None, envelope: CallEnvelope, opened: OpenedRound | None
    ) -> ToolExecResult:
        """The runner's answer, with what the client can answer in the context (runner/asking.py)."""
        asked = CALL_INPUT.set(
            client_input(
                elicitation=envelope.declared.form,
                sampling=envelope.declared.sampling,
                opened=opened,
                ask_now=envelope.relay.ask if envelope.relay is not None else None,
                rounds=envelope.modern,
            )
            if envelope.answerable
            else None
        )
        try:
            return tool_exec(
                runner=self._runtime.runner,
                caller=self._caller,
                request=request,
                subject_token=subject_token,
                tool_scope=self.tool_scope,
            )
        finally:
            CALL_INPUT.reset(asked)

    def _rounds_on_stream(
        self, result: ToolExecResult, request: ExecRequest, subject_token: str | None, envelope: CallEnvelope
    ) -> ToolExecResult:
        """A 2025-era client's rounds: each question asked on its stream, each round run here with the answers.

        The state of the rounds stays in this process (the stream holds the client), so
        nothing is sealed; each round is a call through the runner, audited like any.
        """
        opened: OpenedRound | None = None
        while result.error_code is ErrorCode.INPUT_REQUIRED and result.input_ask is not None:
            if opened is not None and opened.round >= MAX_ROUNDS:
                return _too_many_rounds(result)
            ask = result.input_ask
            try:
                answers = {
                    key: envelope.relay.ask(str(asked["method"]), asked["params"])
                    for key, asked in ask.requests.items()
                }
                opened = round_on_stream(ask, answers, opened.state if opened is not None else None)
            except AskUnanswered as unanswered:
                return replace(
                    result, error_code=ErrorCode.CANCELLED, safe_message=f"{unanswered}; the call ended", input_ask=None
                )
            except AnswersRefused as refused:
                return replace(
                    result, error_code=ErrorCode.VALIDATION, safe_message=f"the client's {refused}", input_ask=None
                )
            result = self._exec(_for_round(request, opened.round), subject_token, envelope, opened)
        return result

    def _input_round(
        self, name: str, arguments: dict[str, Any], envelope: CallEnvelope, subject_id: str, *, for_person: bool
    ) -> OpenedRound | ToolExecResult | None:
        """The round a 2026-07-28 retry continues, with its checked answers (gateway/input_rounds.py).

        None when the call continues no round (a call for a person may echo an approval's
        state instead, which `_waiting_call` opens); a refusal for a state that opens as
        nothing, or answers that do not answer what the round asked.
        """
        if not envelope.modern or envelope.request_state is None:
            return None
        try:
            opened = input_round_open(
                envelope.request_state,
                service_account_id=self._caller.service_account_id,
                subject_id=subject_id,
                tool_id=name,
                args=arguments,
                responses=envelope.input_responses,
            )
        except AnswersRefused as refused:
            return _bad_answers(name, str(refused))
        if opened is None:
            return None if for_person else _bad_state(name)
        return opened

    def _next_round(
        self,
        result: ToolExecResult,
        name: str,
        arguments: dict[str, Any],
        subject_id: str,
        opened: OpenedRound | None,
    ) -> InputNeeded | ToolExecResult:
        """The upstream's questions for the client, with the sealed state of the next round."""
        ask = result.input_ask
        if ask is None or (opened is not None and opened.round >= MAX_ROUNDS):
            return _too_many_rounds(result)
        state = input_round_seal(
            service_account_id=self._caller.service_account_id,
            subject_id=subject_id,
            tool_id=name,
            args=arguments,
            ask=ask,
            before=opened.state if opened is not None else None,
        )
        return InputNeeded(requests=ask.requests, request_state=state)

    # Resources and prompts (protocol.FeatureBackend): the caller's policy and person decide, as for tools.

    def list_features(self, kind: str, meta: Mapping[str, Any]) -> list[dict[str, Any]]:
        try:
            entries = features_listed(
                caller=self._caller, kind=kind, subject_token=self._subject(meta), tool_scope=self.tool_scope
            )
        except FeatureRefused as refused:
            raise AppError(refused.safe_message, code=refused.code) from None
        return entries

    def fetch_feature(
        self, kind: str, name: str, arguments: Mapping[str, Any], meta: Mapping[str, Any]
    ) -> dict[str, Any]:
        try:
            return feature_fetch(
                caller=self._caller,
                kind=kind,
                name=name,
                arguments=arguments,
                subject_token=self._subject(meta),
                tool_scope=self.tool_scope,
            )
        except FeatureRefused as refused:
            raise feature_refusal(kind, refused) from None

    def complete_prompt(self, name: str, request: Mapping[str, Any], meta: Mapping[str, Any]) -> dict[str, Any]:
        try:
            return feature_fetch(
                caller=self._caller,
                kind="prompt",
                name=name,
                subject_token=self._subject(meta),
                tool_scope=self.tool_scope,
                completion=request,
            )
        except FeatureRefused as refused:
            raise feature_refusal("prompt", refused) from None

    def serves_logs(self, meta: Mapping[str, Any]) -> bool:
        """Whether this caller's catalog holds an upstream MCP tool: only those send log messages.

        A subject token that cannot be used sees no tools, so no logging: the refusal itself
        comes with its list or call, not with the capabilities.
        """
        try:
            specs = self.list_tools(meta)
        except AppError:
            return False
        return any(spec.name.startswith(UPSTREAM_TOOL_PREFIX) for spec in specs)

    def feature_capabilities(self, meta: Mapping[str, Any]) -> dict[str, bool]:
        return features_any_visible(caller=self._caller, subject_token=self._subject(meta), tool_scope=self.tool_scope)

    def _in_own_catalog(self, name: str) -> bool:
        """Whether the caller's own catalog (its policy and toolset, no person's delegation) lists `name`."""
        own_catalog = tool_catalog(
            source=self._runtime.source, policy=self._runtime.policy, caller=self._caller, tool_scope=self.tool_scope
        )
        return any(spec.name == name for spec in own_catalog)


# Refusals that would tell a caller an entry outside its policy exists: answered as unknown.
HIDDEN_FEATURE_REFUSALS = frozenset({ErrorCode.UNAVAILABLE, ErrorCode.POLICY_DENIED})


def feature_refusal(kind: str, refused: FeatureRefused) -> Refused:
    """The JSON-RPC error of a refused read or fetch: unknown (hidden) or invalid params, else the reason.

    Reasons other than the request's own (too large, timeout, budgets, the person) are
    `-32603` with the contract's `error_code` in `data`: HTTP 200 in both eras, never a 500.
    """
    if refused.code in HIDDEN_FEATURE_REFUSALS:
        return Refused(INVALID_PARAMS, f"unknown {kind}")
    if refused.code is ErrorCode.VALIDATION:
        return Refused(INVALID_PARAMS, refused.safe_message)
    return Refused(INTERNAL_ERROR, refused.safe_message, {"error_code": refused.code.value})


def _bad_state(name: str) -> ToolExecResult:
    """A forged, stale, replayed or misbound requestState: refused before the runner, so nothing runs."""
    return ToolExecResult(
        tool_call_id="",
        tool_id=name,
        ok=False,
        error_code=ErrorCode.VALIDATION,
        safe_message=BAD_STATE_MESSAGE,
        errors=(FieldError(path="requestState", message="not valid for this call"),),
    )


def _bad_answers(name: str, problem: str) -> ToolExecResult:
    """inputResponses that do not answer the round's questions: refused before the runner, so nothing runs."""
    return ToolExecResult(
        tool_call_id="",
        tool_id=name,
        ok=False,
        error_code=ErrorCode.VALIDATION,
        safe_message=f"{problem}; nothing ran. Answer again with the same requestState.",
        errors=(FieldError(path="inputResponses", message=problem),),
    )


def _for_round(request: ExecRequest, round_number: int) -> ExecRequest:
    """A later round's request: each round is a call of its own, so an explicit id must not replay the last."""
    if request.tool_call_id is None:
        return request
    return replace(request, tool_call_id=f"{request.tool_call_id[:120]}-r{round_number}")


def _too_many_rounds(result: ToolExecResult) -> ToolExecResult:
    return replace(
        result,
        error_code=ErrorCode.EXECUTION,
        safe_message=f"upstream MCP server: it kept asking past {MAX_ROUNDS} rounds; the call was stopped",
        input_ask=None,
    )


def exec_request_of(name: str, arguments: dict[str, Any], meta: Mapping[str, Any]) -> ExecRequest | ToolExecResult:
    """The REST exec body these params stand for, checked by the REST serializer (one set of rules)."""
    out_of_band = {field: meta[key] for key, field in CALL_META_FIELDS.items() if key in meta}
    serializer = ExecInputSerializer(data={"tool_id": name, "args": arguments, **out_of_band})
    errors = [] if serializer.is_valid() else drf_field_errors(serializer.errors, top_level=MCP_PATH_OF_FIELD)
    if any(key not in CALL_META_FIELDS and key != SUBJECT_META_KEY for key in meta):  # a typo must not drop an id
        errors.append(FieldError(path="_meta", message=f"unknown {META_PREFIX} key"))
    if errors:
        tool_call_id = out_of_band.get("tool_call_id")
        well_formed = isinstance(tool_call_id, str) and "tool_call_id" not in serializer.errors
        return ToolExecResult(
            tool_call_id=tool_call_id if well_formed else "",
            tool_id=name,
            ok=False,
            error_code=ErrorCode.VALIDATION,
            safe_message=REQUEST_INVALID,
            errors=tuple(errors),
        )
    return ExecRequest.of(serializer.validated_data)


def protected_resource_metadata_url(request: HttpRequest) -> str:
    """Where this endpoint's RFC 9728 metadata is: `<base>/.well-known/oauth-protected-resource` + its path.

    RFC 9728 §3.1 builds the well-known URL from the resource's path, so
    `/mcp/t/<name>` points at its own document (resource `<base>/mcp/t/<name>`):
    a client signs in for that toolset, not for the whole catalog.
    """
    return request.build_absolute_uri(
        f"/.well-known/oauth-protected-resource{urlsplit(mcp_resource_url(request)).path}"
    )


def bearer_challenge(*, metadata_url: str, invalid_token: bool) -> str:
    """The 401's `WWW-Authenticate`: where an MCP client that signs people in finds how to (docs/api.md)."""
    error = 'error="invalid_token", ' if invalid_token else ""
    return f'{SCHEME} {error}resource_metadata="{metadata_url}"'


def _reply_for(exc: Exception, *, metadata_url: str) -> Reply:
    """The JSON-RPC error (and HTTP status) for whatever stopped the request; messages are fixed or safe."""
    if isinstance(exc, NotARequest):
        return not_a_request_reply(str(exc.detail))
    if isinstance(exc, exceptions.ParseError):
        return parse_error_reply(str(exc.detail))
    if isinstance(exc, RequestDataTooBig):
        return error_reply(413, INVALID_REQUEST, "request body too large")
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        challenge = bearer_challenge(
            metadata_url=metadata_url, invalid_token=isinstance(exc, exceptions.AuthenticationFailed)
        )
        return error_reply(401, INVALID_REQUEST, "missing or invalid API key", headers={"WWW-Authenticate": challenge})
    if isinstance(exc, exceptions.MethodNotAllowed):
        return error_reply(405, INVALID_REQUEST, "only POST is supported", headers={"Allow": "POST"})
    if isinstance(exc, exceptions.Throttled):
        retry_after = str(int((exc.wait or 1) + 0.999))
        return error_reply(429, INVALID_REQUEST, "too many requests; retry later", headers={"Retry-After": retry_after})
    if isinstance(exc, exceptions.UnsupportedMediaType):
        return error_reply(415, INVALID_REQUEST, "unsupported media type; send application/json")
    if isinstance(exc, exceptions.NotAcceptable):
        return error_reply(406, INVALID_REQUEST, "this endpoint answers application/json")
    if isinstance(exc, exceptions.PermissionDenied):
        return error_reply(403, INVALID_REQUEST, str(exc.detail))
    if isinstance(exc, exceptions.APIException):  # the parser's body limit (413) and the like
        message = str(exc.detail) if isinstance(exc.detail, str) else REQUEST_INVALID
        return error_reply(exc.status_code, INVALID_REQUEST, message)
    if isinstance(exc, AppError):  # the application's refusal, with the REST API's status for its code
        return error_reply(exc.status, INVALID_REQUEST, exc.safe_message)
    if isinstance(exc, OUTAGE_ERRORS):
        logger.error("dependency unreachable: %s", type(exc).__name__)
        return error_reply(
            503, INTERNAL_ERROR, DEPENDENCY_MESSAGE, headers={"Retry-After": str(DEPENDENCY_RETRY_AFTER_S)}
        )
    logger.error("unhandled %s in the MCP endpoint", type(exc).__name__)
    return internal_error_reply()


def _outage_answer(exc: Exception) -> HttpResponse:
    """The outage the view would have answered in place, met as the answer waited for its audit row."""
    reply = _reply_for(exc, metadata_url="")
    body = JSONRenderer().render(reply.body)
    return HttpResponse(body, status=reply.status, headers=dict(reply.headers), content_type=McpJsonParser.media_type)


def _answer(request: Request, reply: Reply) -> HttpResponseBase:
    """A message's reply, rendered at once by the renderer DRF negotiated (core/api/negotiation.py)."""
    if reply.body is None:  # 202 to a notification: DRF's Response sends no Content-Type without a body
        return _response(reply)
    return plain_json_answer(request, reply.body, status=reply.status, headers=reply.headers)


def _response(reply: Reply) -> Response:
    return Response(reply.body, status=reply.status, headers=dict(reply.headers))
