"""Input and output shapes of the tools API (CONTRACT.md §4).

Input serializers check the request's shape only (types, sizes, charsets);
what a call may do is the runner's to decide. Output serializers describe the
bodies for the OpenAPI schema and shape them. Error messages name the rule
that failed, never the value that failed it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from runner.types import Decision, ErrorCode, ToolEffect
from tools_app.models import ToolInvocation

ID_PATTERN = r"\A[A-Za-z0-9_-]{1,128}\Z"
ID_MESSAGE = "must be 1 to 128 letters, digits, '_' or '-'"
MAX_ARGS_BYTES = 8 * 1024
MAX_CONNECTION_IDS = 32
# Unknown keys are reported by name only when the name looks like a field name.
_FIELD_NAME = re.compile(r"\A[A-Za-z0-9_-]{1,64}\Z")
UNKNOWN_FIELD_PATH = "(unknown field)"

ERROR_CODES = [code.value for code in ErrorCode]


def _id_field(**kwargs: Any) -> serializers.RegexField:
    return serializers.RegexField(
        ID_PATTERN,
        max_length=128,
        required=False,
        allow_null=True,
        trim_whitespace=False,
        error_messages={"invalid": ID_MESSAGE},
        **kwargs,
    )


def _reference_field(**kwargs: Any) -> serializers.CharField:
    return serializers.CharField(max_length=64, trim_whitespace=False, **kwargs)


class StrictInputSerializer(serializers.Serializer):
    """Refuses fields it does not declare: a typo must not silently become a default."""

    def to_internal_value(self, data: Any) -> Any:
        errors: dict[str, Any] = {}
        value = None
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            errors.update(exc.detail if isinstance(exc.detail, Mapping) else {"non_field_errors": exc.detail})
        if isinstance(data, Mapping):
            for key in data:
                if key not in self.fields:
                    path = key if isinstance(key, str) and _FIELD_NAME.match(key) else UNKNOWN_FIELD_PATH
                    errors[path] = ["unknown field"]
        if errors:
            raise serializers.ValidationError(errors)
        return value


@extend_schema_serializer(component_name="Exec")
class ExecInputSerializer(StrictInputSerializer):
    """`POST /api/v1/tools/exec`. An empty `connection_ids` declares nothing, so it means the default."""

    tool_id = serializers.CharField(max_length=128, trim_whitespace=False, help_text="The tool to run.")
    args = serializers.DictField(
        required=False, default=dict, help_text=f"The tool's arguments; at most {MAX_ARGS_BYTES} bytes serialized."
    )
    tool_call_id = _id_field(help_text="Idempotency key of this call; generated when absent.")
    run_id = _id_field(help_text="The agent run this call belongs to.")
    connection_id = _reference_field(required=False, allow_null=True, help_text="The connection this call uses.")
    connection_ids = serializers.ListField(
        child=_reference_field(),
        max_length=MAX_CONNECTION_IDS,
        required=False,
        allow_null=True,
        help_text="The connections the caller declares for its run; defaults to [connection_id].",
    )
    grant_id = _reference_field(
        required=False, allow_null=True, help_text="The execution grant; required with a connection_id."
    )

    def validate_args(self, value: dict[str, Any]) -> dict[str, Any]:
        size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
        if size > MAX_ARGS_BYTES:
            raise serializers.ValidationError(f"args must be at most {MAX_ARGS_BYTES} bytes serialized")
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("connection_id") and not attrs.get("grant_id"):
            raise serializers.ValidationError({"grant_id": "required whenever connection_id is given"})
        return attrs


class FieldErrorSerializer(serializers.Serializer):
    path = serializers.CharField(help_text="Where the problem is, e.g. `args.timezone`; empty for the whole body.")
    message = serializers.CharField(help_text="What is wrong; never the offending value.")


@extend_schema_serializer(component_name="Error")
class ErrorOutputSerializer(serializers.Serializer):
    """The contract's error envelope; some errors add fields (e.g. `errors` for validation)."""

    error_code = serializers.CharField()
    safe_message = serializers.CharField()
    errors = FieldErrorSerializer(many=True, required=False)


@extend_schema_serializer(component_name="ExecSuccess")
class ExecSuccessOutputSerializer(serializers.Serializer):
    tool_call_id = serializers.CharField()
    tool_id = serializers.CharField()
    ok = serializers.BooleanField()
    value = serializers.JSONField(help_text="The tool's redacted result.")
    started_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField()


@extend_schema_serializer(component_name="ExecFailure")
class ExecFailureOutputSerializer(serializers.Serializer):
    """A call that ended without a value; `approval_id` and `errors` appear only with their codes."""

    tool_call_id = serializers.CharField()
    tool_id = serializers.CharField()
    ok = serializers.BooleanField()
    error_code = serializers.ChoiceField(choices=ERROR_CODES)
    safe_message = serializers.CharField()
    approval_id = serializers.CharField(required=False, help_text="With approval_required: the pending approval.")
    errors = FieldErrorSerializer(many=True, required=False, help_text="With validation: what is wrong, and where.")

    def to_representation(self, instance: Any) -> dict[str, Any]:
        data = super().to_representation(instance)
        if instance.error_code != ErrorCode.VALIDATION:
            data.pop("errors", None)
        if instance.approval_id is None:
            data.pop("approval_id", None)
        return data


@extend_schema_serializer(component_name="ToolSpec")
class ToolSpecOutputSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    input_schema = serializers.DictField(help_text="JSON Schema of the tool's args.")
    effect = serializers.ChoiceField(choices=[effect.value for effect in ToolEffect])
    requires_connection = serializers.BooleanField()
    provider = serializers.CharField(allow_null=True)


class OpenAIFunctionOutputSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    parameters = serializers.DictField()


@extend_schema_serializer(component_name="OpenAITool")
class OpenAIToolOutputSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["function"])
    function = OpenAIFunctionOutputSerializer()


@extend_schema_serializer(component_name="OpenAIResponsesTool")
class OpenAIResponsesToolOutputSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["function"])
    name = serializers.CharField()
    description = serializers.CharField()
    parameters = serializers.DictField()
    strict = serializers.BooleanField(help_text="True when strict mode accepts the schema unchanged.")


@extend_schema_serializer(component_name="AnthropicTool")
class AnthropicToolOutputSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    input_schema = serializers.DictField()


class CatalogEntriesField(serializers.ListField):
    """`tools[]`: ToolSpecs, or a model API's tool entries with `?format=` (see the schema extension below)."""


class CatalogEntriesFieldExtension(OpenApiSerializerFieldExtension):
    """anyOf, not oneOf: an empty catalog matches both shapes, which oneOf would reject."""

    target_class = CatalogEntriesField

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        shapes = [
            auto_schema.resolve_serializer(ToolSpecOutputSerializer, direction).ref,
            auto_schema.resolve_serializer(OpenAIToolOutputSerializer, direction).ref,
            auto_schema.resolve_serializer(OpenAIResponsesToolOutputSerializer, direction).ref,
            auto_schema.resolve_serializer(AnthropicToolOutputSerializer, direction).ref,
        ]
        return {"type": "array", "items": {"anyOf": shapes}}


@extend_schema_serializer(component_name="ToolCatalog")
class ToolCatalogOutputSerializer(serializers.Serializer):
    tools = CatalogEntriesField()


class ToolCatalogQuerySerializer(serializers.Serializer):
    format = serializers.ChoiceField(
        choices=["openai", "openai_responses", "anthropic"],
        required=False,
        error_messages={"invalid_choice": "must be openai, openai_responses or anthropic"},
        help_text=(
            "`openai`: Chat Completions function tools; `openai_responses`: Responses API function tools; "
            "`anthropic`: Messages API tools. Absent: Toolgate's ToolSpecs."
        ),
    )


class InvocationListQuerySerializer(serializers.Serializer):
    run_id = serializers.CharField(required=False, max_length=128, trim_whitespace=False)
    tool_id = serializers.CharField(required=False, max_length=128, trim_whitespace=False)
    ok = serializers.ChoiceField(
        choices=["true", "false"], required=False, error_messages={"invalid_choice": "must be true or false"}
    )


class BlankAsNullCharField(serializers.CharField):
    """Columns store "none" as an empty string; the API says null."""

    def to_representation(self, value: Any) -> str | None:
        return value or None


@extend_schema_serializer(component_name="Invocation")
class InvocationOutputSerializer(serializers.Serializer):
    """One audit row: references and outcome only, never args or result values."""

    tool_call_id = serializers.CharField()
    state = serializers.ChoiceField(
        choices=ToolInvocation.State.choices,
        help_text="`pending` while the call runs (its claim on the tool_call_id is held), then `done`.",
    )
    run_id = BlankAsNullCharField(allow_null=True)
    tool_id = serializers.CharField()
    service_account = serializers.CharField(source="service_account.name", allow_null=True)
    connection_id = BlankAsNullCharField(allow_null=True)
    decision = serializers.ChoiceField(choices=[decision.value for decision in Decision])
    ok = serializers.BooleanField()
    error_code = serializers.ChoiceField(choices=ERROR_CODES, allow_null=True)
    started_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField(allow_null=True)
    duration_ms = serializers.IntegerField(allow_null=True)
    result_bytes = serializers.IntegerField(allow_null=True)

    def to_representation(self, instance: Any) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["error_code"] = data["error_code"] or None
        return data
