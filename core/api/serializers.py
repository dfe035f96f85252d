"""The shapes every /api/v1/ input and the error envelope share: strict fields and serializers.

Every API app uses these, not a copy of its own. Input serializers here refuse what they do not declare and
never coerce one JSON type into another; their messages name the rule that
failed, never the value. The OpenAPI extensions say the same in the schema.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from django.core.validators import MaxLengthValidator, MinLengthValidator
from drf_spectacular.extensions import OpenApiSerializerExtension, OpenApiSerializerFieldExtension
from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from core.api.pagination import PAGE_PARAMETERS
from core.api.spectacular import plain_field_schema, plain_serializer_schema
from runner import wording

# What the JSON parser refuses in every string (core/api/parser.py), said in the schema too.
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
        schema = plain_field_schema(auto_schema, self.target, direction)
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

    target_class = "core.api.serializers.StrictInputSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        schema = plain_serializer_schema(auto_schema, self.target, direction)
        schema["additionalProperties"] = False
        schema.update(getattr(self.target, "SCHEMA_RULES", {}))
        return schema


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
            # Reported where they are: by name when a key is a typo of a declared one, else as `(unknown field)`
            # (a caller may put anything in a key, a secret included: runner.wording.unknown_field_name).
            for name in sorted({wording.unknown_field_name(key, self.unknown_allowed()) for key in unknown}):
                keys = [key for key in unknown if wording.unknown_field_name(key, self.unknown_allowed()) == name]
                errors.setdefault(name, []).append(self.unknown_message(keys))
        if errors:
            raise serializers.ValidationError(errors)
        return value

    def unknown_allowed(self) -> list[str]:
        return list(self.fields)

    def unknown_message(self, unknown: list[str]) -> str:
        return wording.unknown_field_message(unknown, self.unknown_allowed())


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

    def unknown_allowed(self) -> list[str]:
        return [*self.fields, *(PAGE_PARAMETERS if self.PAGINATED else ())]

    def unknown_message(self, unknown: list[str]) -> str:
        message = wording.unknown_field_message(unknown, self.unknown_allowed(), allowed_phrase="this operation takes")
        return message.replace("unknown field", "unknown query parameter", 1)


class PageQuerySerializer(StrictQuerySerializer):
    """A list that takes only `limit` and `offset`."""

    PAGINATED = True


class FieldErrorSerializer(PrototypeFieldsSerializer):
    path = serializers.CharField(help_text="Where the problem is, e.g. `args.timezone`; empty for the whole body.")
    message = serializers.CharField(help_text="What is wrong; never the offending value.")


@extend_schema_serializer(component_name="Error")
class ErrorOutputSerializer(serializers.Serializer):
    """The contract's error envelope; some errors add fields (e.g. `errors` for validation)."""

    error_code = serializers.CharField()
    safe_message = serializers.CharField()
    errors = FieldErrorSerializer(many=True, required=False)
