"""Input and output shapes of the tools API (docs/api.md).

Input serializers check the request's shape only (types, sizes, charsets);
what a call may do is the runner's to decide. Output serializers describe the
bodies for the OpenAPI schema and shape them. Error messages name the rule
that failed, never the value that failed it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import tzinfo
from typing import Any

from django.conf import settings
from django.utils import timezone
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from core.api.serializers import (
    FieldErrorSerializer,
    JSONObjectField,
    PageQuerySerializer,
    PrototypeFieldsSerializer,
    StrictCharField,
    StrictInputSerializer,
    StrictQuerySerializer,
    StrictRegexField,
)
from core.errors import AppError
from runner.types import ConsequenceLevel, Decision, ErrorCode, ToolEffect, ToolExecResult
from runner.wire.codecs import CATALOG_FORMATS_HELP, FORMAT_NAMES, FORMAT_NAMES_IN_WORDS
from tools_app.models import ToolInvocation
from tools_app.routing import CALL_ROUTING_FIELDS
from tools_app.tools import BUILTIN_TOOLS

ID_PATTERN = r"\A[A-Za-z0-9_-]{1,128}\Z"
ID_RE = re.compile(ID_PATTERN)
ID_SCHEMA_PATTERN = "^[A-Za-z0-9_-]{1,128}$"  # the same rule in ECMA-262 syntax, for the OpenAPI schema
ID_MESSAGE = "must be 1 to 128 letters, digits, '_' or '-'"
MAX_ARGS_BYTES = 8 * 1024
# Up to 16 tags as runner.contracts.TAG_PATTERN spells one, joined by commas.
TAGS_QUERY_PATTERN = r"\A[a-z0-9][a-z0-9_.-]{0,31}(?:,[a-z0-9][a-z0-9_.-]{0,31}){0,15}\Z"
TAGS_QUERY_MESSAGE = "must be up to 16 comma-separated tags of 1 to 32 lower-case letters, digits, '_', '.' or '-'"
MAX_CONNECTION_IDS = 32

ERROR_CODES = [code.value for code in ErrorCode]


def _id_field(**kwargs: Any) -> serializers.RegexField:
    return StrictRegexField(
        ID_PATTERN,
        max_length=128,
        required=False,
        allow_null=True,
        trim_whitespace=False,
        error_messages={"invalid": ID_MESSAGE},
        **kwargs,
    )


def _reference_field(**kwargs: Any) -> serializers.CharField:
    return StrictCharField(max_length=64, trim_whitespace=False, **kwargs)


# How the routing fields are described for a request of one call (exec, MCP's tools/call).
ONE_CALL_ROUTING_HELP: Mapping[str, str] = {
    "run_id": "The agent run this call belongs to.",
    "connection_id": "The connection this call uses.",
    "connection_ids": (
        "The connections the caller declares for its run; absent (or null) means [connection_id]; "
        "[] declares none, so a call naming a connection is refused (policy_denied)."
    ),
    "grant_id": "The execution grant; required with a connection_id.",
}


def call_routing_fields(help_texts: Mapping[str, str]) -> dict[str, serializers.Field]:
    """The input fields of CallRouting (tools_app/routing.py), in its order, each described by `help_texts`."""
    return {
        "run_id": _id_field(help_text=help_texts["run_id"]),
        "connection_id": _reference_field(required=False, allow_null=True, help_text=help_texts["connection_id"]),
        "connection_ids": serializers.ListField(
            child=_reference_field(),
            max_length=MAX_CONNECTION_IDS,
            required=False,
            allow_null=True,
            help_text=help_texts["connection_ids"],
        ),
        "grant_id": _reference_field(required=False, allow_null=True, help_text=help_texts["grant_id"]),
    }


class CallRoutingInput:
    """Mixin of the input serializers that run calls: the out-of-band fields, declared once, and their rule.

    A request's serializer lists it before its base and declares only its own
    fields; the routing fields follow them, in the contract's order, described
    by `ROUTING_HELP`. A connection named out of band must come with the grant
    that allows it: `validate`, and `SCHEMA_RULES` in the schema.
    """

    SCHEMA_RULES: Mapping[str, Any] = {  # the rule of `validate` below
        "if": {"properties": {"connection_id": {"type": "string"}}, "required": ["connection_id"]},
        "then": {"properties": {"grant_id": {"type": "string"}}, "required": ["grant_id"]},
    }
    ROUTING_HELP: Mapping[str, str] = ONE_CALL_ROUTING_HELP

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Add the routing fields after those DRF's metaclass has just collected from the class body."""
        super().__init_subclass__(**kwargs)
        cls._declared_fields.update(call_routing_fields(cls.ROUTING_HELP))  # type: ignore[attr-defined]

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("connection_id") and not attrs.get("grant_id"):
            raise serializers.ValidationError({"grant_id": "required whenever connection_id is given"})
        return attrs


# Built-in tools are the product's own (docs/architecture.md lists them), so the public schema may name those that take
# no connection; tools from MCP servers depend on the deployment and are refused by the gate alone.
BUILTIN_TOOLS_WITHOUT_CONNECTION = sorted(
    tool.contract.name for tool in BUILTIN_TOOLS if not tool.contract.requires_connection
)


@extend_schema_serializer(component_name="Exec")
class ExecInputSerializer(CallRoutingInput, StrictInputSerializer):
    """`POST /api/v1/tools/exec`. Absent `connection_ids` means `[connection_id]`; `[]` declares no connection."""

    SCHEMA_RULES: Mapping[str, Any] = {
        **CallRoutingInput.SCHEMA_RULES,
        "allOf": [
            {  # the connection gate's "this tool takes no connection"
                "if": {"properties": {"tool_id": {"enum": BUILTIN_TOOLS_WITHOUT_CONNECTION}}, "required": ["tool_id"]},
                "then": {"properties": {"connection_id": {"type": "null"}}},
            }
        ],
    }

    tool_id = StrictCharField(max_length=128, trim_whitespace=False, help_text="The tool to run.")
    args = JSONObjectField(
        required=False, default=dict, help_text=f"The tool's arguments; at most {MAX_ARGS_BYTES} bytes serialized."
    )
    tool_call_id = _id_field(help_text="Idempotency key of this call; generated when absent.")

    def run_validation(self, data: Any = serializers.empty) -> Any:
        """A plainly valid body skips DRF's per-field machinery (a tenth of the exec view's CPU).

        `plain_exec_fields` accepts only bodies every field would accept as
        they are, and returns what the fields would return; anything else, and
        every error, goes through the fields. A property test holds the two
        paths to the same answers.
        """
        fields = plain_exec_fields(data)
        if fields is None:
            return super().run_validation(data)
        try:
            return self.validate(fields)
        except serializers.ValidationError as exc:
            raise serializers.ValidationError(detail=serializers.as_serializer_error(exc)) from exc

    def validate_args(self, value: dict[str, Any]) -> dict[str, Any]:
        if _serialized_size(value) > MAX_ARGS_BYTES:
            raise serializers.ValidationError(f"args must be at most {MAX_ARGS_BYTES} bytes serialized")
        return value


EXEC_FIELDS = ("tool_id", "args", "tool_call_id", *CALL_ROUTING_FIELDS)
_SURROGATE = re.compile("[\ud800-\udfff]")


def _serialized_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def _plain_text(value: Any, max_length: int) -> bool:
    """What StrictCharField accepts untouched: a non-empty string, short enough, no NUL, no surrogate."""
    return (
        isinstance(value, str) and 0 < len(value) <= max_length and "\x00" not in value and not _SURROGATE.search(value)
    )


def plain_routing(data: Mapping[str, Any]) -> bool:
    """Whether CallRoutingInput's fields accept the routing fields of `data` as they are."""
    run_id = data.get("run_id")
    if run_id is not None and not (isinstance(run_id, str) and ID_RE.match(run_id)):
        return False
    for name in ("connection_id", "grant_id"):
        value = data.get(name)
        if value is not None and not _plain_text(value, 64):
            return False
    declared = data.get("connection_ids")
    return declared is None or (
        type(declared) is list
        and len(declared) <= MAX_CONNECTION_IDS
        and all(_plain_text(connection_id, 64) for connection_id in declared)
    )


def plain_exec_fields(data: Any) -> dict[str, Any] | None:
    """ExecInputSerializer's fields' answer for a body they all accept as it is, else None."""
    if type(data) is not dict or not data.keys() <= _EXEC_FIELD_SET:
        return None
    if not _plain_text(data.get("tool_id"), 128):
        return None
    args = data.get("args", {})
    if type(args) is not dict or _serialized_size(args) > MAX_ARGS_BYTES:
        return None
    tool_call_id = data.get("tool_call_id")
    if tool_call_id is not None and not (isinstance(tool_call_id, str) and ID_RE.match(tool_call_id)):
        return None
    if not plain_routing(data):
        return None
    fields = {name: data[name] for name in EXEC_FIELDS if name in data}
    fields["args"] = dict(args)
    if fields.get("connection_ids") is not None:
        fields["connection_ids"] = list(fields["connection_ids"])
    return fields


_EXEC_FIELD_SET = frozenset(EXEC_FIELDS)


def exec_input(data: Any) -> dict[str, Any]:
    """ExecInputSerializer's validated data for a request body; its refusal is its ValidationError (422).

    A plainly valid body that keeps the grant rule is answered without building
    the serializer at all: its construction and `is_valid` bookkeeping cost more
    than the plain check itself. Anything else, every error included, goes
    through the serializer (a property test holds both to the same answers).
    """
    fields = plain_exec_fields(data)
    if fields is not None and (fields.get("grant_id") or not fields.get("connection_id")):
        return fields
    serializer = ExecInputSerializer(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data  # type: ignore[no-any-return]


class _ApiTimestampField(serializers.DateTimeField):
    """DRF's DateTimeField in the default time zone (settings.TIME_ZONE, UTC).

    DRF asks for the *active* time zone on every value, a thread-local lookup
    that cost the exec answer more than rendering its two timestamps; the API
    never activates one, so the default is the one in force.
    """

    def default_timezone(self) -> tzinfo | None:
        return timezone.get_default_timezone() if settings.USE_TZ else None


_TIMESTAMP = _ApiTimestampField()


@extend_schema_serializer(component_name="ExecSuccess")
class ExecSuccessOutputSerializer(PrototypeFieldsSerializer):
    """The answer of every call that ran: the fields document it, `to_representation` builds it.

    Built directly rather than field by field: DRF's generic walk over these six
    fields cost as much CPU as any two stages of the pipeline. A test holds the
    result to what the declared fields render.
    """

    tool_call_id = serializers.CharField()
    tool_id = serializers.CharField()
    ok = serializers.BooleanField()
    value = serializers.JSONField(help_text="The tool's redacted result.")
    started_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField()

    def to_representation(self, instance: Any) -> dict[str, Any]:
        return {
            "tool_call_id": instance.tool_call_id,
            "tool_id": instance.tool_id,
            "ok": bool(instance.ok),
            "value": instance.value,
            "started_at": _TIMESTAMP.to_representation(instance.started_at),
            "ended_at": _TIMESTAMP.to_representation(instance.ended_at),
        }


@extend_schema_serializer(component_name="ExecFailure")
class ExecFailureOutputSerializer(PrototypeFieldsSerializer):
    """A call that ended without a value; `approval_id` and `errors` appear only with their codes."""

    tool_call_id = serializers.CharField()
    tool_id = serializers.CharField()
    ok = serializers.BooleanField()
    error_code = serializers.ChoiceField(choices=ERROR_CODES)
    safe_message = serializers.CharField()
    approval_id = serializers.CharField(required=False, help_text="With approval_required: the pending approval.")
    provider = serializers.CharField(
        required=False,
        source="connection_provider",
        help_text=(
            "With connection_required, or validation because several connections could be chosen: the provider "
            "whose connection the call needs (a call on a person's behalf that names none)."
        ),
    )
    errors = FieldErrorSerializer(many=True, required=False, help_text="With validation: what is wrong, and where.")
    content = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        help_text="With tool_error: the tool's own error blocks (MCP content blocks), for the model to read.",
    )

    def to_representation(self, instance: Any) -> dict[str, Any]:
        data = super().to_representation(instance)
        if instance.error_code != ErrorCode.VALIDATION:
            data.pop("errors", None)
        if instance.approval_id is None:
            data.pop("approval_id", None)
        if instance.connection_provider is None:
            data.pop("provider", None)
        if instance.error_code != ErrorCode.TOOL_ERROR or instance.content is None:
            data.pop("content", None)
        return data


_SUCCESS_SHAPE = ExecSuccessOutputSerializer()


def exec_succeeded(result: ToolExecResult) -> dict[str, Any]:
    """The body of a call that ran, as ExecSuccessOutputSerializer shapes it (one instance: it keeps no state)."""
    return _SUCCESS_SHAPE.to_representation(result)


def exec_failed(result: ToolExecResult) -> AppError:
    """A call that ended without a value, as the AppError the API's handler answers: this body, its code's status."""
    body = ExecFailureOutputSerializer(result).data
    return AppError(body["safe_message"], code=body["error_code"], extra=body, retry_after_s=result.retry_after_s)


@extend_schema_serializer(component_name="ExecToolError")
class ExecToolErrorOutputSerializer(serializers.Serializer):
    """The tool ran and answered an error meant for the model (HTTP 200): `content` is what it said."""

    tool_call_id = serializers.CharField()
    tool_id = serializers.CharField()
    ok = serializers.BooleanField(help_text="Always false.")
    error_code = serializers.RegexField(r"^tool_error$", help_text="Always `tool_error`.")
    safe_message = serializers.CharField(help_text="Toolgate's own words; the tool's are in `content`.")
    content = serializers.ListField(
        child=serializers.DictField(),
        help_text="The tool's own error blocks (MCP content blocks: text, image, audio, resource_link, resource).",
    )


@extend_schema_serializer(component_name="ToolSpec")
class ToolSpecOutputSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    input_schema = serializers.DictField(help_text="JSON Schema of the tool's args.")
    effect = serializers.ChoiceField(choices=[effect.value for effect in ToolEffect])
    requires_connection = serializers.BooleanField()
    provider = serializers.CharField(allow_null=True)
    consequence_level = serializers.ChoiceField(
        choices=[level.value for level in ConsequenceLevel], help_text="How much real-world harm a call can do."
    )
    requires_confirmation = serializers.BooleanField(
        help_text="Every call waits for a person's approval (202 `approval_required`), whatever the policy says."
    )
    tags = serializers.ListField(child=serializers.CharField(), help_text="Filter keys (`?tags=`).")
    version = serializers.CharField(allow_null=True)


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
    hint = serializers.CharField(
        required=False,
        help_text="Only when `tools` is empty: why (no policy applies, or it allows no enabled tool), who can fix it.",
    )


class ToolCatalogQuerySerializer(StrictQuerySerializer):
    format = serializers.ChoiceField(
        choices=list(FORMAT_NAMES),
        required=False,
        error_messages={"invalid_choice": f"must be {FORMAT_NAMES_IN_WORDS}"},
        help_text=f"{CATALOG_FORMATS_HELP}. Absent: Toolgate's ToolSpecs.",
    )
    tags = StrictRegexField(
        TAGS_QUERY_PATTERN,
        required=False,
        trim_whitespace=False,
        error_messages={"invalid": TAGS_QUERY_MESSAGE, "blank": TAGS_QUERY_MESSAGE},
        help_text="Comma-separated tags: only tools carrying every one of them (`?tags=github,issues`).",
    )

    toolset = StrictRegexField(
        r"\A[a-z0-9][a-z0-9_-]{0,63}\Z",
        required=False,
        trim_whitespace=False,
        error_messages={"invalid": "must be a toolset name: 1..64 lower-case letters, digits, '-' or '_'"},
        help_text="Only the tools of this toolset (the tenant's own, else a global one); unknown → 404 `not_found`.",
    )
    q = StrictRegexField(
        r"\A[^\x00]*[^\s\x00][^\x00]*\Z",
        required=False,
        max_length=200,
        trim_whitespace=False,
        error_messages={"invalid": "must contain a word"},
        help_text="Words describing the task: only matching tools, most relevant first (id, title, description, tags).",
    )
    limit = serializers.IntegerField(
        required=False, min_value=1, max_value=50, help_text="At most this many tools (with `q`: the best matches)."
    )

    def validate_tags(self, value: str) -> list[str]:
        return list(dict.fromkeys(value.split(",")))  # a repeated tag asks for nothing more


class InvocationListQuerySerializer(PageQuerySerializer):
    run_id = StrictCharField(required=False, max_length=128, trim_whitespace=False)
    tool_id = StrictCharField(required=False, max_length=128, trim_whitespace=False)
    ok = serializers.ChoiceField(
        choices=["true", "false"], required=False, error_messages={"invalid_choice": "must be true or false"}
    )
    subject_id = StrictCharField(
        required=False,
        max_length=64,
        trim_whitespace=False,
        help_text="Only the calls made on behalf of this person (`user:<id>`).",
    )


class BlankAsNullCharField(serializers.CharField):
    """Columns store "none" as an empty string; the API says null."""

    def to_representation(self, value: Any) -> str | None:
        return value or None


@extend_schema_serializer(component_name="Invocation")
class InvocationOutputSerializer(PrototypeFieldsSerializer):
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
    subject_id = BlankAsNullCharField(
        allow_null=True,
        help_text="The person the call was made for (`user:<id>`, from their subject token); null: no one.",
    )
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


APPROVAL_STATUSES = ("pending", "approved", "denied", "expired", "consumed")


@extend_schema_serializer(component_name="Approval")
class ApprovalOutputSerializer(serializers.Serializer):
    """Where one of the caller's approval requests stands (never its args)."""

    id = serializers.UUIDField()
    status = serializers.ChoiceField(
        choices=APPROVAL_STATUSES,
        help_text="`expired`: nobody decided in time, or an approval was not used before its expiry.",
    )
    tool_id = serializers.CharField()
    tool_call_id = serializers.CharField(help_text="The call this request approves: repeat it with this id.")
    consequence_level = serializers.ChoiceField(choices=[level.value for level in ConsequenceLevel])
    expires_at = serializers.DateTimeField()
    decided_at = serializers.DateTimeField(allow_null=True)
    reason = serializers.CharField(help_text="The approver's reason, if they gave one (empty otherwise).")

    def to_representation(self, instance: Any) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["status"] = instance.status_at(self.context["now"])
        return data
