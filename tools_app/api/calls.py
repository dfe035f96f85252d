"""`POST /api/v1/tools/calls`: run a model's assistant turn, answer the messages to append.

Its own module beside views.py and serializers.py: the view is as thin as the
others (parse, one service call, shape), and its serializers live with it.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_field, extend_schema_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from core.api.openapi import RESPONSE_HEADERS, SUBJECT_HEADER, common_errors, error_response
from core.api.parser import validated_body
from core.api.serializers import StrictInputSerializer
from policies_app.authentication import request_caller, request_subject_token
from runner.wire.codecs import CODECS, FORMAT_NAMES, FORMAT_NAMES_IN_WORDS, TURN_FORMATS_HELP
from runner.wire.turns import MAX_CALLS_PER_TURN
from tools_app.api.serializers import ERROR_CODES, ONE_CALL_ROUTING_HELP, CallRoutingInput
from tools_app.api.views import ToolsApiView
from tools_app.calls import CallsRequest, tool_calls_run
from tools_app.routing import CallRouting


@extend_schema_field({"type": ["object", "array"]})
class TurnField(serializers.JSONField):
    """A model's turn: an object (a message, a response) or a list (content, output); never a bare scalar."""

    default_error_messages = {"invalid": "must be an object or a list: the turn as the model's API returned it"}

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict | list):
            self.fail("invalid")
        return super().to_internal_value(data)


@extend_schema_serializer(component_name="ToolCalls")
class CallsInputSerializer(CallRoutingInput, StrictInputSerializer):
    """The model's turn as its API returned it, and the out-of-band fields every call of it uses."""

    ROUTING_HELP = {
        **ONE_CALL_ROUTING_HELP,
        "run_id": "The agent run the calls belong to.",
        "connection_id": "The connection the calls use.",
        "connection_ids": (
            "The connections the caller declares for its run; absent means [connection_id]; [] declares none."
        ),
    }

    format = serializers.ChoiceField(
        choices=list(FORMAT_NAMES),
        error_messages={"invalid_choice": f"must be {FORMAT_NAMES_IN_WORDS}"},
        help_text="The API the turn comes from, and the shape the results are answered in.",
    )
    message = TurnField(help_text=f"{TURN_FORMATS_HELP}. At most {MAX_CALLS_PER_TURN} tool calls.")


class CallOutcomeOutputSerializer(serializers.Serializer):
    """One call of the turn: the id it ran and is audited under, and how it ended."""

    tool_call_id = serializers.CharField(
        help_text="Toolgate's id of the call: the model's id, or `tc_<sha256 hex>` of it when it does not fit."
    )
    tool_id = serializers.CharField()
    ok = serializers.BooleanField()
    error_code = serializers.ChoiceField(choices=ERROR_CODES, required=False, help_text="When ok is false.")
    approval_id = serializers.CharField(required=False, help_text="With approval_required: the pending approval.")

    def to_representation(self, instance: Any) -> dict[str, Any]:
        call, result = instance
        data: dict[str, Any] = {"tool_call_id": call.tool_call_id, "tool_id": call.tool_id, "ok": result.ok}
        if not result.ok and result.error_code is not None:
            data["error_code"] = result.error_code.value
        if result.approval_id is not None:
            data["approval_id"] = result.approval_id
        return data


@extend_schema_serializer(component_name="ToolCallsResult")
class CallsOutputSerializer(serializers.Serializer):
    results = serializers.ListField(
        child=serializers.DictField(),
        help_text="The messages to append to the conversation, in the turn's format and the calls' order.",
    )
    calls = CallOutcomeOutputSerializer(many=True)


CALLS_EXAMPLE = OpenApiExample(
    "a Chat Completions turn",
    value={
        "format": "openai",
        "message": {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "core__get_current_time", "arguments": '{"timezone": "UTC"}'},
                }
            ],
        },
        "run_id": "run_9",
    },
    request_only=True,
)


class ToolCallsView(ToolsApiView):
    """Run every tool call of a model's turn through the runner; answer the result messages, in order.

    Each call runs as `POST /tools/exec` would, under the model's call id, so
    a repeated turn replays the calls that ran. A call that fails (malformed
    arguments included) is answered in its result message and in `calls`;
    the request itself succeeds. The API's fairness share is spent per call
    inside the runner, not by DRF's throttle.
    """

    throttle_classes = ()

    @extend_schema(
        operation_id="tools_calls",
        summary="Run the tool calls of a model's turn",
        request=CallsInputSerializer,
        responses={
            200: CallsOutputSerializer,
            **common_errors("tools:exec"),
            400: error_response("`invalid_json`: the body is not a JSON object."),
            413: error_response("`validation`: the body exceeds 64 KiB."),
            415: error_response("`unsupported_media_type`: send application/json."),
            422: error_response(
                "`validation`: the body, or `message` as a turn of its format (ids, names, number of calls)."
            ),
        },
        parameters=[SUBJECT_HEADER, *RESPONSE_HEADERS],
        examples=[CALLS_EXAMPLE],
    )
    def post(self, request: Request) -> Response:
        data = validated_body(request, CallsInputSerializer)
        calls_request = CallsRequest(
            wire_format=CODECS[data["format"]], message=data["message"], routing=CallRouting.of(data)
        )
        outcome = tool_calls_run(
            runner=self.runtime().runner,
            caller=request_caller(request),
            request=calls_request,
            subject_token=request_subject_token(request),
        )
        return Response(CallsOutputSerializer({"results": outcome.results, "calls": outcome.calls}).data)
