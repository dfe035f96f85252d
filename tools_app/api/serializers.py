"""Input and output shapes of the tools API (CONTRACT.md §4).

Input serializers check the request's shape only (types, sizes, charsets);
what a call may do is the runner's to decide. Output serializers describe the
bodies for the OpenAPI schema and shape them. Error messages name the rule
that failed, never the value that failed it.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any

from django.core.validators import MaxLengthValidator, MinLengthValidator
from drf_spectacular.extensions import OpenApiSerializerExtension, OpenApiSerializerFieldExtension
from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from runner import wording
from runner.types import ConsequenceLevel, Decision, ErrorCode, ToolEffect
from tools_app.api.pagination import PAGE_PARAMETERS
from tools_app.models import ToolInvocation

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


# What the JSON parser refuses in every string (config/api.py), said in the schema too.
# Lone surrogates are refused as well; JSON Schema has no pattern for them (see the API description).
NUL_FREE_PATTERN = "^[^\\x00]*$"


class StrictCharField(serializers.CharField):
    """A JSON string and nothing else: DRF's CharField would turn `1` into `"1"`."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return str(super().to_internal_value(data))


class StrictRegexField(serializers.RegexField):
    """A JSON string matching the pattern; a number is refused, never turned into a string."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return str(super().to_internal_value(data))


class StrictCharFieldExtension(OpenApiSerializerFieldExtension):
    """Free strings say in the schema that NUL is refused (patterns of regex fields already exclude it)."""

    target_class = StrictCharField
    match_subclasses = True

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        schema: dict[str, Any] = auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        schema.setdefault("pattern", NUL_FREE_PATTERN)
        # drf-spectacular marks a nullable field again after an extension: leave that to it.
        if isinstance(schema.get("type"), list):
            types = [kind for kind in schema["type"] if kind != "null"]
            schema["type"] = types[0] if len(types) == 1 else types
        return schema


class JSONObjectField(serializers.DictField):
    """A JSON object of any content (a tool's args, a credential): its strings are NUL-free too.

    A string holding a JSON object is the usual slip (OpenAI hands a tool
    call's arguments over as such a string): the answer says to parse it.
    """

    default_error_messages = {"json_string": wording.JSON_STRING_HINT}

    def to_internal_value(self, data: Any) -> dict[Any, Any]:
        if wording.is_json_object_text(data):
            self.fail("json_string")
        return super().to_internal_value(data)


def plain_messages(field: serializers.Field) -> None:
    """Say a field's problems in runner.wording's words instead of DRF's; messages set on purpose stay.

    DRF's defaults are written for forms ("This field is required.", "Expected
    a dictionary of items but got type \"str\".") and differ from the runner's;
    the API answers both in one wording.
    """
    defaults: dict[str, Any] = {}
    for cls in reversed(type(field).__mro__):
        defaults.update(getattr(cls, "default_error_messages", {}))
    plain = {
        "required": wording.REQUIRED,
        "null": wording.NOT_NULL,
        "blank": wording.NOT_EMPTY,
        "empty": wording.NOT_EMPTY,
        "not_a_dict": wording.must_be(wording.OBJECT),
        "not_a_list": wording.must_be("a list"),
    }
    type_messages, limits = _type_messages(field)
    plain.update(type_messages)
    for code, message in plain.items():
        if code in defaults and field.error_messages.get(code) == defaults[code]:
            field.error_messages[code] = message
    for code, template in limits.items():
        limit = getattr(field, code, None)
        if limit is not None and field.error_messages.get(code) == defaults.get(code):
            _set_validator_message(field, code, template.format(limit, "" if limit == 1 else "s"))
    child = getattr(field, "child", None)
    if isinstance(child, serializers.Field):
        plain_messages(child)


def _type_messages(field: serializers.Field) -> tuple[dict[str, str], dict[str, str]]:
    """The messages of what a field of this kind expects, and the templates of its length limits."""
    plain: dict[str, str] = {}
    limits: dict[str, str] = {}
    if isinstance(field, serializers.CharField):
        plain["invalid"] = wording.must_be("a string")
        limits = {"max_length": "must be at most {} characters", "min_length": "must be at least {} characters"}
    elif isinstance(field, serializers.ListField):
        limits = {"max_length": "must have at most {} item{}", "min_length": "must have at least {} item{}"}
    elif isinstance(field, serializers.BooleanField):
        plain["invalid"] = wording.must_be("true or false")
    elif isinstance(field, serializers.IntegerField):
        plain["invalid"] = wording.must_be("an integer")
    elif isinstance(field, serializers.DateTimeField):
        plain["invalid"] = plain["date"] = wording.must_be("an ISO 8601 date-time")
    elif isinstance(field, serializers.UUIDField):
        plain["invalid"] = wording.must_be("a UUID")
    elif isinstance(field, serializers.ChoiceField):
        choices = ", ".join(str(choice) for choice in field.choices).replace("{", "{{").replace("}", "}}")
        plain["invalid_choice"] = f"must be one of: {choices}"
    return plain, limits


def _set_validator_message(field: serializers.Field, code: str, message: str) -> None:
    """DRF builds a field's length validators, message included, when the field is made: reword them."""
    field.error_messages[code] = message
    kind = MaxLengthValidator if code == "max_length" else MinLengthValidator
    for validator in field.validators:
        if isinstance(validator, kind):
            validator.message = message


# How deep the schema spells out the NUL rule inside a free-form object. The rule holds at
# every depth (the parser checks every string); a recursive schema would say so exactly, but
# schemathesis cannot generate from one, so deeper values are described as any JSON.
JSON_SCHEMA_DEPTH = 3


def json_object_schema(depth: int = JSON_SCHEMA_DEPTH) -> dict[str, Any]:
    """A JSON object whose keys and strings hold no NUL, spelled out `depth` levels down."""
    return {
        "type": "object",
        "propertyNames": {"pattern": NUL_FREE_PATTERN},
        "additionalProperties": _json_value_schema(depth - 1),
    }


def _json_value_schema(depth: int) -> dict[str, Any]:
    if depth <= 0:
        return {}
    return {
        "anyOf": [
            {"type": "null"},
            {"type": "string", "pattern": NUL_FREE_PATTERN},
            {"type": "number"},
            {"type": "boolean"},
            {"type": "array", "items": _json_value_schema(depth - 1)},
            json_object_schema(depth),
        ]
    }


class JSONObjectFieldExtension(OpenApiSerializerFieldExtension):
    target_class = JSONObjectField
    match_subclasses = True

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        return json_object_schema()


class StrictInputSerializerExtension(OpenApiSerializerExtension):
    """The schema says what StrictInputSerializer does: a field it does not declare is refused."""

    target_class = "tools_app.api.serializers.StrictInputSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        schema: dict[str, Any] = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        schema["additionalProperties"] = False
        schema.update(getattr(self.target, "SCHEMA_RULES", {}))
        return schema


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


class PrototypeFieldsSerializer(serializers.Serializer):
    """Deep-copies its declared fields once per class instead of once per instance.

    DRF's `Serializer.get_fields` deep-copies every declared field for every
    serializer it builds: on the exec hot path that was most of the serializers'
    cost (two per call). Here each instance gets shallow copies of a per-class
    prototype, which DRF then binds to it as usual (`bind` sets the per-instance
    state: name, parent, source). Nothing a field holds beyond that is mutated
    per request; fields that need the serializer's context do not fit this base.
    """

    _prototype_fields: dict[str, serializers.Field]

    def get_fields(self) -> dict[str, serializers.Field]:
        cls = type(self)
        if "_prototype_fields" not in cls.__dict__:
            cls._prototype_fields = super().get_fields()
            for field in cls._prototype_fields.values():
                plain_messages(field)
        return {name: copy.copy(field) for name, field in cls._prototype_fields.items()}


class StrictInputSerializer(PrototypeFieldsSerializer):
    """Refuses fields it does not declare: a typo must not silently become a default.

    `SCHEMA_RULES`: JSON Schema keywords that state the serializer's rules across
    fields (its `validate`), merged into its OpenAPI component.
    """

    SCHEMA_RULES: Mapping[str, Any] = {}

    def to_internal_value(self, data: Any) -> Any:
        errors: dict[str, Any] = {}
        value = None
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            errors.update(exc.detail if isinstance(exc.detail, Mapping) else {"non_field_errors": exc.detail})
        unknown = [str(key) for key in data if key not in self.fields] if isinstance(data, Mapping) else []
        if unknown:
            # Reported once, at the body, never by name: a caller may put anything in a key, a secret included.
            errors.setdefault("non_field_errors", []).append(self.unknown_message(unknown))
        if errors:
            raise serializers.ValidationError(errors)
        return value

    def unknown_message(self, unknown: list[str]) -> str:
        return wording.unknown_field_message(unknown, self.fields)


class StrictQuerySerializer(StrictInputSerializer):
    """Query parameters: a name the operation does not take is refused, like an unknown body field.

    `?fromat=openai` would otherwise answer the default format as if asked for.
    Lists also take the pagination parameters, which their paginator checks.
    """

    PAGINATED = False

    def to_internal_value(self, data: Any) -> Any:
        # A plain dict, not the QueryDict: DRF reads an empty value in form data as "absent",
        # so `?format=` would silently mean the default. Here it is a value, checked as such.
        if isinstance(data, Mapping):
            skipped = PAGE_PARAMETERS if self.PAGINATED else ()
            data = {key: data[key] for key in data if key not in skipped}
        return super().to_internal_value(data)

    def unknown_message(self, unknown: list[str]) -> str:
        names = [*self.fields, *(PAGE_PARAMETERS if self.PAGINATED else ())]
        message = wording.unknown_field_message(unknown, names, allowed_phrase="this operation takes")
        return message.replace("unknown field", "unknown query parameter", 1)


class PageQuerySerializer(StrictQuerySerializer):
    """A list that takes only `limit` and `offset`."""

    PAGINATED = True


@extend_schema_serializer(component_name="Exec")
class GrantWithConnectionRule:
    """Inputs that name a connection out of band must name the grant that allows it (and say so in the schema)."""

    SCHEMA_RULES: Mapping[str, Any] = {  # the rule of `validate` below
        "if": {"properties": {"connection_id": {"type": "string"}}, "required": ["connection_id"]},
        "then": {"properties": {"grant_id": {"type": "string"}}, "required": ["grant_id"]},
    }

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("connection_id") and not attrs.get("grant_id"):
            raise serializers.ValidationError({"grant_id": "required whenever connection_id is given"})
        return attrs


class ExecInputSerializer(GrantWithConnectionRule, StrictInputSerializer):
    """`POST /api/v1/tools/exec`. Absent `connection_ids` means `[connection_id]`; `[]` declares no connection."""

    tool_id = StrictCharField(max_length=128, trim_whitespace=False, help_text="The tool to run.")
    args = JSONObjectField(
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
        help_text=(
            "The connections the caller declares for its run; absent (or null) means [connection_id]; "
            "[] declares none, so a call naming a connection is refused (policy_denied)."
        ),
    )
    grant_id = _reference_field(
        required=False, allow_null=True, help_text="The execution grant; required with a connection_id."
    )

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


EXEC_FIELDS = ("tool_id", "args", "tool_call_id", "run_id", "connection_id", "connection_ids", "grant_id")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _serialized_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def _plain_text(value: Any, max_length: int) -> bool:
    """What StrictCharField accepts untouched: a non-empty string, short enough, no NUL, no surrogate."""
    return (
        isinstance(value, str) and 0 < len(value) <= max_length and "\x00" not in value and not _SURROGATE.search(value)
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
    for name in ("tool_call_id", "run_id"):
        value = data.get(name)
        if value is not None and not (isinstance(value, str) and ID_RE.match(value)):
            return None
    for name in ("connection_id", "grant_id"):
        value = data.get(name)
        if value is not None and not _plain_text(value, 64):
            return None
    declared = data.get("connection_ids")
    if declared is not None and not (
        type(declared) is list
        and len(declared) <= MAX_CONNECTION_IDS
        and all(_plain_text(connection_id, 64) for connection_id in declared)
    ):
        return None
    fields = {name: data[name] for name in EXEC_FIELDS if name in data}
    fields["args"] = dict(args)
    if declared is not None:
        fields["connection_ids"] = list(declared)
    return fields


_EXEC_FIELD_SET = frozenset(EXEC_FIELDS)


class FieldErrorSerializer(PrototypeFieldsSerializer):
    path = serializers.CharField(help_text="Where the problem is, e.g. `args.timezone`; empty for the whole body.")
    message = serializers.CharField(help_text="What is wrong; never the offending value.")


@extend_schema_serializer(component_name="Error")
class ErrorOutputSerializer(serializers.Serializer):
    """The contract's error envelope; some errors add fields (e.g. `errors` for validation)."""

    error_code = serializers.CharField()
    safe_message = serializers.CharField()
    errors = FieldErrorSerializer(many=True, required=False)


_TIMESTAMP = serializers.DateTimeField()


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
        choices=["openai", "openai_responses", "anthropic"],
        required=False,
        error_messages={"invalid_choice": "must be openai, openai_responses or anthropic"},
        help_text=(
            "`openai`: Chat Completions function tools; `openai_responses`: Responses API function tools; "
            "`anthropic`: Messages API tools. Absent: Toolgate's ToolSpecs."
        ),
    )
    tags = StrictRegexField(
        TAGS_QUERY_PATTERN,
        required=False,
        trim_whitespace=False,
        error_messages={"invalid": TAGS_QUERY_MESSAGE, "blank": TAGS_QUERY_MESSAGE},
        help_text="Comma-separated tags: only tools carrying every one of them (`?tags=github,issues`).",
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
