"""The tools API: execute a call, read the catalog, read invocation records.

Each view parses and validates its input, makes one service or selector call
and shapes the output. Failed calls leave as the application's `AppError`,
carrying the refused call's body; the API's exception handler (core/api/handlers.py)
answers it with the status of its code, from the one table.

The runner comes from `runtime_provider`, given by the composition root in
config/urls.py (`as_view(runtime_provider=runtime)`): apps never import config.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from django.core.exceptions import ImproperlyConfigured
from django.http.response import HttpResponseBase
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
)
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api.negotiation import PlainAcceptNegotiation, plain_json_answer
from core.api.openapi import RESPONSE_HEADERS, SUBJECT_HEADER, common_errors, error_response
from core.api.pagination import StrictLimitOffsetPagination
from core.api.parser import json_object
from policies_app.authentication import InvocationsScope, ToolsExecScope, request_caller, request_subject_token
from policies_app.selectors import Caller, approval_for_caller, invocations_readable_by
from runner.pipeline import ToolRunner
from runner.ports import PolicyDecider, ToolSource
from runner.types import ErrorCode
from runner.wire.codecs import CODECS
from tools_app.api.serializers import (
    ID_RE,
    ID_SCHEMA_PATTERN,
    ApprovalOutputSerializer,
    ExecFailureOutputSerializer,
    ExecInputSerializer,
    ExecSuccessOutputSerializer,
    ExecToolErrorOutputSerializer,
    InvocationListQuerySerializer,
    InvocationOutputSerializer,
    ToolCatalogOutputSerializer,
    ToolCatalogQuerySerializer,
    ToolSpecOutputSerializer,
    exec_failed,
    exec_input,
    exec_succeeded,
)
from tools_app.search import tool_search
from tools_app.selectors import invocation_get, invocation_list
from tools_app.services import ExecRequest, tool_catalog, tool_catalog_empty_hint, tool_exec
from tools_app.toolsets import UNKNOWN_TOOLSET, toolset_scope


class ToolRuntime(Protocol):
    """What these views need of config.runtime.Runtime."""

    @property
    def runner(self) -> ToolRunner: ...

    @property
    def source(self) -> ToolSource: ...

    @property
    def policy(self) -> PolicyDecider: ...


# --- schema pieces shared by the operations ---------------------------------------------


def _refused(description: str) -> OpenApiResponse:
    return OpenApiResponse(ExecFailureOutputSerializer, description=description)


COMMON_ERRORS = common_errors("tools:exec")
QUERY_ERRORS = {422: error_response("`validation`: a query parameter is invalid or unknown; `errors` says which.")}
EXEC_RESPONSES = {
    200: OpenApiResponse(
        PolymorphicProxySerializer(
            component_name="ExecAnswer",
            serializers=[ExecSuccessOutputSerializer, ExecToolErrorOutputSerializer],
            resource_type_field_name=None,
        ),
        description="The tool ran: its value (`ok: true`), or its own error for the model (`tool_error`, `content`).",
    ),
    **COMMON_ERRORS,
    202: _refused("`approval_required`: an operator must approve; repeat with the same tool_call_id."),
    400: error_response(
        "`invalid_json`: the body is not a JSON object (or is malformed, too deep, has duplicate keys)."
    ),
    403: error_response(
        "`forbidden` (scope), `policy_denied`, or `authz_denied` (a call on behalf of a person, "
        "`X-Toolgate-Subject`, without their active delegation or permission); a refused call also carries "
        "tool_call_id, tool_id and ok=false."
    ),
    404: _refused("`unavailable`: no such tool."),
    409: _refused("`idempotency_conflict`, `connection_unavailable` or `connection_required`."),
    413: error_response("`validation`: the body exceeds 64 KiB."),
    415: error_response("`unsupported_media_type`: send application/json."),
    422: error_response("`validation`: the request or the args are invalid; a refused call also carries tool_call_id."),
    429: error_response("`rate_limited`: the policy's or the API's budget is spent; see Retry-After."),
    499: _refused(
        "`cancelled`: the MCP client cancelled the call or went away before it ended (recorded; not a REST answer)."
    ),
    500: error_response("`internal`, `output_invalid` or `redaction_failed`."),
    502: _refused("`execution`, `auth_refresh_failed` or `result_too_large`."),
    504: _refused("`timeout`: the tool ran past its runtime budget."),
}
CATALOG_SUBJECT_HEADER = OpenApiParameter(
    "X-Toolgate-Subject",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    required=False,
    description=(
        "A person's subject token: only the tools this caller may run on their behalf (the delegation's "
        "tool subset narrows the list); a token that cannot be used answers `authz_denied` (403)."
    ),
)
SUBJECT_REFUSED_RESPONSE = {
    403: error_response(
        "`forbidden` (scope), or `authz_denied`: the X-Toolgate-Subject token cannot be used by this caller "
        "(forged, revoked, expired or another caller's; one message for all)."
    )
}
TOOL_CALL_ID = OpenApiParameter(
    "tool_call_id",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    pattern=ID_SCHEMA_PATTERN,
    description="The call's tool_call_id; an id that cannot be one answers 404 like an unknown one.",
)
EXEC_EXAMPLE = OpenApiExample(
    "current time",
    value={"tool_id": "core__get_current_time", "args": {"timezone": "UTC"}, "run_id": "run_9"},
    request_only=True,
)


# --- views ----------------------------------------------------------------------------------


def toolset_scope_or_404(*, caller: Caller, name: str | None) -> frozenset[str] | None:
    """The tool ids of toolset `name` for this caller's tenant; None without a name; 404 `not_found` if unknown.

    Another tenant's toolset is unknown here, exactly like a name nobody uses.
    """
    if name is None:
        return None
    scope = toolset_scope(tenant_id=caller.tenant_id, name=name)
    if scope is None:
        raise NotFound(UNKNOWN_TOOLSET)
    return scope


class ToolsApiView(APIView):
    """Base of the tools API views: the tools:exec scope and the injected runtime."""

    permission_classes = [ToolsExecScope]
    runtime_provider: Callable[[], ToolRuntime] | None = None

    def runtime(self) -> ToolRuntime:
        if self.runtime_provider is None:
            raise ImproperlyConfigured(f"{type(self).__name__} needs as_view(runtime_provider=...)")
        return self.runtime_provider()


class ToolExecView(ToolsApiView):
    """Run one tool call through the runner; every outcome answers the contract's body.

    A repeated `tool_call_id` whose call already ran answers the recorded
    response to the caller that made it, without running the tool again; the
    same id with another request, or from another caller, answers 409
    `idempotency_conflict`. The API's fairness share is spent inside the runner
    (audited), not by DRF's throttle.
    """

    throttle_classes = ()
    content_negotiation_class = PlainAcceptNegotiation  # the hot path's Accept values, without parsing them

    @extend_schema(
        operation_id="tools_exec",
        summary="Execute a tool call",
        request=ExecInputSerializer,
        responses=EXEC_RESPONSES,
        parameters=[SUBJECT_HEADER, *RESPONSE_HEADERS],
        examples=[EXEC_EXAMPLE],
    )
    def post(self, request: Request) -> HttpResponseBase:
        exec_request = ExecRequest.of(exec_input(json_object(request)))
        result = tool_exec(
            runner=self.runtime().runner,
            caller=request_caller(request),
            request=exec_request,
            subject_token=request_subject_token(request),
        )
        if result.ok:
            return plain_json_answer(request, exec_succeeded(result))
        raise exec_failed(result)


class ToolCatalogView(ToolsApiView):
    """The tools this caller may run now: enabled, and allowed by its policy.

    `?toolset=` narrows the list to a toolset, `?q=` to the tools matching a few
    words, most relevant first; neither ever adds a tool.
    """

    @extend_schema(
        operation_id="tools_list",
        summary="The tools this caller may run now",
        parameters=[ToolCatalogQuerySerializer, CATALOG_SUBJECT_HEADER, *RESPONSE_HEADERS],
        responses={
            200: ToolCatalogOutputSerializer,
            **COMMON_ERRORS,
            **QUERY_ERRORS,
            **SUBJECT_REFUSED_RESPONSE,
            404: error_response("`not_found`: no toolset of that name for this caller's tenant (nor a global one)."),
        },
    )
    def get(self, request: Request) -> Response:
        query = ToolCatalogQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        runtime = self.runtime()
        caller = request_caller(request)
        specs = tool_catalog(
            source=runtime.source,
            policy=runtime.policy,
            caller=caller,
            tags=query.validated_data.get("tags", ()),
            subject_token=request_subject_token(request),
            tool_scope=toolset_scope_or_404(caller=caller, name=query.validated_data.get("toolset")),
        )
        limit = query.validated_data.get("limit")
        if "q" in query.validated_data:
            specs = tool_search(specs=specs, query=query.validated_data["q"], limit=limit)
        elif limit is not None:
            specs = specs[:limit]
        codec = CODECS.get(query.validated_data.get("format", ""))  # the catalog in a model API's own format
        body: dict[str, Any] = {"tools": codec.encode_tools(specs) if codec else [spec.public_dict() for spec in specs]}
        if not specs and "q" not in query.validated_data:
            toolset = query.validated_data.get("toolset")
            body["hint"] = (
                f"the toolset {toolset!r} holds no tool that this caller may run now (a toolset only narrows the "
                "policy's catalog)"
                if toolset
                else tool_catalog_empty_hint(caller=caller)
            )
        return Response(body)


class ToolDetailView(ToolsApiView):
    """One tool of the caller's catalog; tools outside it are answered like unknown ones."""

    @extend_schema(
        operation_id="tools_retrieve",
        summary="One tool of this caller's catalog",
        parameters=[CATALOG_SUBJECT_HEADER, *RESPONSE_HEADERS],
        responses={
            200: ToolSpecOutputSerializer,
            **COMMON_ERRORS,
            **SUBJECT_REFUSED_RESPONSE,
            404: error_response("`unavailable`: no such tool in this caller's catalog."),
        },
    )
    def get(self, request: Request, tool_id: str) -> Response:
        runtime = self.runtime()
        specs = tool_catalog(
            source=runtime.source,
            policy=runtime.policy,
            caller=request_caller(request),
            subject_token=request_subject_token(request),
        )
        spec = next((spec for spec in specs if spec.name == tool_id), None)
        if spec is None:
            raise NotFound("no such tool", code=ErrorCode.UNAVAILABLE.value)
        return Response(spec.public_dict())


INVOCATIONS_ERRORS = common_errors("tools:exec or invocations:read")
INVOCATIONS_SCOPE_NOTE = (
    "The caller's own rows; with the `invocations:read` scope, every row of the caller's tenant. "
    "References and outcomes only, never args or result values."
)


class InvocationListView(ToolsApiView):
    """The caller's own audit rows (its tenant's with invocations:read), newest first; never values."""

    permission_classes = [InvocationsScope]
    pagination_class = StrictLimitOffsetPagination

    @extend_schema(
        operation_id="invocations_list",
        summary="Invocation records, newest first",
        description=INVOCATIONS_SCOPE_NOTE,
        parameters=[InvocationListQuerySerializer, *RESPONSE_HEADERS],
        responses={200: InvocationOutputSerializer(many=True), **INVOCATIONS_ERRORS, **QUERY_ERRORS},
    )
    def get(self, request: Request) -> Response:
        query = InvocationListQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        filters = query.validated_data
        caller = request_caller(request)
        rows = invocation_list(
            tenant_id=caller.tenant_id,
            service_account_id=invocations_readable_by(caller=caller),
            run_id=filters.get("run_id", ""),
            tool_id=filters.get("tool_id", ""),
            ok=None if "ok" not in filters else filters["ok"] == "true",
            subject_id=filters.get("subject_id", ""),
        )
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(rows, request, view=self)
        return paginator.get_paginated_response(InvocationOutputSerializer(page, many=True).data)


class InvocationDetailView(ToolsApiView):
    """One audit row by tool_call_id (the executed one, else the latest attempt), read as the list reads."""

    permission_classes = [InvocationsScope]

    @extend_schema(
        operation_id="invocations_retrieve",
        summary="One invocation record",
        description=INVOCATIONS_SCOPE_NOTE,
        parameters=[TOOL_CALL_ID, *RESPONSE_HEADERS],
        responses={
            200: InvocationOutputSerializer,
            **INVOCATIONS_ERRORS,
            404: error_response(
                "`not_found`: no such tool_call_id among the rows this caller reads (its own, or its tenant's "
                "with `invocations:read`)."
            ),
        },
    )
    def get(self, request: Request, tool_call_id: str) -> Response:
        # Checked like the body's tool_call_id before any query: PostgreSQL refuses a NUL in a
        # parameter with an error (a 500), and no stored row can have an id outside the pattern.
        if not ID_RE.match(tool_call_id):
            raise NotFound("no such invocation")
        caller = request_caller(request)
        row = invocation_get(
            tenant_id=caller.tenant_id,
            tool_call_id=tool_call_id,
            service_account_id=invocations_readable_by(caller=caller),
        )
        if row is None:
            raise NotFound("no such invocation")
        return Response(InvocationOutputSerializer(row).data)


class ApprovalDetailView(ToolsApiView):
    """One of the caller's approval requests: poll it after a 202 `approval_required`."""

    @extend_schema(
        operation_id="approvals_retrieve",
        summary="Where one of this caller's approval requests stands",
        parameters=RESPONSE_HEADERS,
        responses={
            200: ApprovalOutputSerializer,
            **COMMON_ERRORS,
            404: error_response("`not_found`: no such approval request of this service account."),
        },
    )
    def get(self, request: Request, approval_id: str) -> Response:
        approval = approval_for_caller(
            approval_id=approval_id, service_account_id=request_caller(request).service_account_id
        )
        if approval is None:
            raise NotFound("no such approval request")
        return Response(ApprovalOutputSerializer(approval, context={"now": timezone.now()}).data)
