"""The exec endpoint's direct path: a plain call answered without DRF's per-request machinery.

Why: for a warm call, DRF's dispatch (wrapping the request, negotiating the
content type, instantiating authenticators, permissions and throttles, then
finalizing the response) cost about a quarter of the exec view's CPU, as much
as the runner's stages together. Most calls are plain: a POST of a JSON object
with a Bearer key of an active account holding `tools:exec`, fields every exec
field accepts as they are. Those are answered here, by the same functions the
DRF view uses: the key lookup and sign-in of ServiceAccountAuthentication, the
API's parser, ExecInputSerializer, `tool_exec`, the view's success and failure
bodies, the API's exception handler and JSON renderer.

Anything else returns None before anything has run (no key, another scheme,
an unknown key, a missing scope, another media type or Accept, a body the
parser or the fields refuse, an outage while authenticating) and the DRF view
answers it as it always has, with its own wording. Once the call has been
handed to the runner there is no way back: whatever happens is answered here.
A test holds both paths to the same status, headers and body.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any, Protocol

from django.http import HttpRequest
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer
from rest_framework.response import Response

from policies_app.api.parser import MAX_BODY_BYTES, declared_length
from policies_app.authentication import ToolsExecScope, bearer_caller, caller_signed_in, request_subject_token
from policies_app.errors import AppError
from policies_app.selectors import Caller
from runner.pipeline import ToolRunner
from runner.types import ToolExecResult
from tools_app.api.serializers import ExecFailureOutputSerializer, ExecInputSerializer, ExecSuccessOutputSerializer
from tools_app.services import ExecRequest, tool_exec

JSON = "application/json"
# Accept values under which DRF's negotiation picks the JSON renderer with no parameters.
PLAIN_ACCEPTS = frozenset({"", "*/*", JSON})


class ExecView(Protocol):
    """What the direct path needs of the DRF exec view it stands in for."""

    allowed_methods: list[str]

    def get_parsers(self) -> list[BaseParser]: ...

    def get_renderers(self) -> list[BaseRenderer]: ...

    def get_exception_handler(self) -> Any: ...

    def exec_runner(self) -> ToolRunner: ...


def exec_failed(result: ToolExecResult) -> AppError:
    """A call that ended without a value, as the AppError the API's handler answers (body and status)."""
    body = ExecFailureOutputSerializer(result).data
    return AppError(body["safe_message"], code=body["error_code"], extra=body, retry_after_s=result.retry_after_s)


def exec_directly(view: ExecView, request: HttpRequest) -> Response | None:
    """The answer to a plain exec request, or None to let DRF answer (nothing has run then)."""
    plain = _plain_request(view, request)
    if plain is None:
        return None
    caller, fields = plain
    request.user = caller_signed_in(caller)  # what DRF's authentication would have set
    try:
        result = tool_exec(
            runner=view.exec_runner(),
            caller=caller,
            request=ExecRequest.of(fields),
            subject_token=request_subject_token(request),  # a call on a person's behalf, like DRF's path
        )
        if result.ok:
            response = Response(ExecSuccessOutputSerializer(result).data)
        else:
            response = view.get_exception_handler()(exec_failed(result), {"view": view, "request": request})
    except Exception as exc:  # the runner may have run: answered here, as DRF's handler would
        response = view.get_exception_handler()(exc, {"view": view, "request": request})
        if response is None:
            raise
    return _finalized(view, response)


def _plain_request(view: ExecView, request: HttpRequest) -> tuple[Caller, dict[str, Any]] | None:
    """The caller and validated fields of a request DRF would accept as it is; None otherwise."""
    meta = request.META
    if (
        request.method != "POST"
        or request.content_type != JSON
        or not _plain_charset(request.content_params)
        or meta.get("HTTP_ACCEPT", "") not in PLAIN_ACCEPTS
        or not 0 < declared_length(meta) <= MAX_BODY_BYTES
    ):
        return None
    try:
        caller = bearer_caller(meta.get("HTTP_AUTHORIZATION", ""))
        if caller is None or ToolsExecScope.required_scope not in caller.scopes:
            return None
        data = view.get_parsers()[0].parse(io.BytesIO(request.body), JSON, {"request": request})
    except Exception:  # an outage, a parse error: DRF meets it again and answers it in its words
        return None
    serializer = ExecInputSerializer(data=data)
    if not serializer.is_valid():
        return None
    return caller, serializer.validated_data


def _plain_charset(params: Mapping[str, str]) -> bool:
    return not params or (params.keys() == {"charset"} and params["charset"].lower() == "utf-8")


def _finalized(view: ExecView, response: Response) -> Response:
    """What DRF's finalize_response does for this view: the JSON renderer and the Allow header."""
    renderer = view.get_renderers()[0]
    response.accepted_renderer = renderer
    response.accepted_media_type = renderer.media_type
    response.renderer_context = {"view": view, "response": response}
    response["Allow"] = ", ".join(view.allowed_methods)
    return response
