"""Contract -> ToolSpec: the schema subset, connection-id refusal, and the schema hash."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import jsonschema
import pytest
from pydantic import BaseModel, ConfigDict, Field, create_model

from runner.bound import bind_tool
from runner.contracts import MAX_TIMEOUT_MS, ToolArgs, ToolContract, ToolDefinition, ToolOutput
from runner.errors import ContractError, SchemaError
from runner.redaction import compile_allowlist, redact
from runner.schema import canonical_json, check_schema_subset, redacted_schema, to_tool_spec
from runner.types import ConsequenceLevel, ToolEffect
from tools_app.tools import BUILTIN_TOOLS

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CONNECTION_LIKE_NAMES = (
    "connectionId",
    "connection_id",
    "ConnectionID",
    "connection-ids",
    "conn_id",
    "connectionIdentifier",
    "connection_uuid",
    "connections",
)
HARMLESS_NAMES = ("connector_name", "connections_note")


class EchoArgs(ToolArgs):
    text: str


class EchoOutput(ToolOutput):
    text: str


def make_contract(input_model: type[ToolArgs], **overrides: Any) -> ToolContract:
    fields: dict[str, Any] = {
        "name": "test__echo",
        "description": "Echo the text back.",
        "input_model": input_model,
        "output_model": EchoOutput,
        "effect": ToolEffect.READ_ONLY,
        "redaction_allowlist": ("text",),
    }
    return ToolContract(**{**fields, **overrides})


def args_model(**fields: Any) -> type[ToolArgs]:
    """A ToolArgs subclass with the given `name=(type, FieldInfo)` fields."""
    return create_model("Args", __base__=ToolArgs, **fields)


def closed_object(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "additionalProperties": False}


def objects_in(node: Any) -> Iterator[dict[str, Any]]:
    """Every object schema anywhere in a JSON Schema document."""
    if isinstance(node, dict):
        node_type = node.get("type")
        if node_type == "object" or (isinstance(node_type, list) and "object" in node_type):
            yield node
        for child in node.values():
            yield from objects_in(child)
    elif isinstance(node, list):
        for child in node:
            yield from objects_in(child)


# --- forbidden keywords ------------------------------------------------------------


@pytest.mark.parametrize(
    ("keyword", "value"),
    [
        ("anyOf", [{"type": "integer"}, {"type": "string"}]),
        ("oneOf", [{"type": "integer"}, {"type": "string"}]),
        ("allOf", [{"type": "integer"}, {"minimum": 0}]),
        ("not", {"type": "null"}),
        ("if", {"minimum": 0}),
        ("then", {"maximum": 10}),
        ("else", {"maximum": 0}),
        ("patternProperties", {"^x_": {"type": "string"}}),
        ("dependentSchemas", {"a": {"required": ["b"]}}),
    ],
)
def test_check_schema_subset_rejects_a_forbidden_keyword_naming_it(keyword: str, value: Any) -> None:
    schema = closed_object(count={"type": "integer", keyword: value})

    with pytest.raises(SchemaError) as excinfo:
        check_schema_subset(schema, tool_id="test__x")

    assert str(excinfo.value) == f"test__x: #/properties/count uses forbidden keyword {keyword}"


@pytest.mark.parametrize(
    ("schema", "path"),
    [
        ({**closed_object(), "allOf": [{"required": []}]}, "#"),
        (
            {**closed_object(tags={"type": "array", "items": {"anyOf": [{"type": "string"}]}})},
            "#/properties/tags/items",
        ),
        (
            {**closed_object(), "$defs": {"Owner": {**closed_object(), "oneOf": [{"required": ["a"]}]}}},
            "#/$defs/Owner",
        ),
        ({**closed_object(pair={"type": "array", "prefixItems": [{"not": {}}]})}, "#/properties/pair/prefixItems/0"),
    ],
)
def test_check_schema_subset_finds_forbidden_keywords_at_any_depth(schema: dict[str, Any], path: str) -> None:
    with pytest.raises(SchemaError) as excinfo:
        check_schema_subset(schema, tool_id="test__x")

    assert str(excinfo.value).startswith(f"test__x: {path} uses forbidden keyword ")


def test_check_schema_subset_names_the_first_keyword_of_if_then_else() -> None:
    schema = closed_object(count={"type": "integer", "if": {"minimum": 0}, "then": {}, "else": {}})

    with pytest.raises(SchemaError) as excinfo:
        check_schema_subset(schema, tool_id="test__x")

    assert str(excinfo.value) == "test__x: #/properties/count uses forbidden keyword else"


def test_check_schema_subset_treats_property_names_as_data_not_keywords() -> None:
    # given properties whose *names* are forbidden keywords
    schema = closed_object(**{"not": {"type": "boolean"}, "if": {"type": "string"}, "anyOf": {"type": "integer"}})

    # when / then: accepted, because only schemas are checked for keywords
    check_schema_subset(schema, tool_id="test__x")


def test_check_schema_subset_requires_an_object_at_the_root() -> None:
    with pytest.raises(SchemaError) as excinfo:
        check_schema_subset({"type": "array", "items": {"type": "string"}}, tool_id="test__x")

    assert str(excinfo.value) == "test__x: input schema must be an object"


def test_to_tool_spec_rejects_a_union_field_as_any_of() -> None:
    # given `x: int | str`, which pydantic compiles to anyOf
    class UnionArgs(ToolArgs):
        x: int | str

    # when / then
    with pytest.raises(SchemaError) as excinfo:
        to_tool_spec(make_contract(UnionArgs))

    assert str(excinfo.value) == "test__echo: #/properties/x uses forbidden keyword anyOf"


@pytest.mark.parametrize(
    ("keyword", "value"),
    [
        ("allOf", [{"minimum": 0}]),
        ("oneOf", [{"minimum": 0}, {"maximum": -10}]),
        ("not", {"const": 0}),
        ("if", {"minimum": 0}),
        ("then", {"maximum": 10}),
        ("else", {"maximum": 0}),
    ],
)
def test_to_tool_spec_rejects_forbidden_keywords_from_json_schema_extra(keyword: str, value: Any) -> None:
    model = args_model(count=(int, Field(json_schema_extra={keyword: value})))

    with pytest.raises(SchemaError) as excinfo:
        to_tool_spec(make_contract(model))

    assert str(excinfo.value) == f"test__echo: #/properties/count uses forbidden keyword {keyword}"


def test_to_tool_spec_rejects_pattern_properties_from_the_model_config() -> None:
    class PatternArgs(ToolArgs):
        model_config = ConfigDict(json_schema_extra={"patternProperties": {"^x_": {"type": "string"}}})

        text: str

    with pytest.raises(SchemaError) as excinfo:
        to_tool_spec(make_contract(PatternArgs))

    assert str(excinfo.value) == "test__echo: # uses forbidden keyword patternProperties"


# --- $ref ----------------------------------------------------------------------------


@pytest.mark.parametrize("ref", ["https://example.com/x.json", "other.json#/a", "#/definitions/Owner", "/$defs/Owner"])
def test_check_schema_subset_rejects_a_ref_outside_local_defs(ref: str) -> None:
    schema = {**closed_object(owner={"$ref": ref}), "$defs": {"Owner": closed_object()}}

    with pytest.raises(SchemaError) as excinfo:
        check_schema_subset(schema, tool_id="test__x")

    assert str(excinfo.value) == "test__x: #/properties/owner has a non-local $ref"


def test_to_tool_spec_accepts_a_nested_model_as_a_local_defs_ref() -> None:
    # given
    class Owner(ToolArgs):
        login: str

    class RepoArgs(ToolArgs):
        owner: Owner
        name: str

    # when
    spec = to_tool_spec(make_contract(RepoArgs))

    # then
    assert spec.input_schema == {
        "$defs": {
            "Owner": {
                "type": "object",
                "properties": {"login": {"type": "string"}},
                "required": ["login"],
                "additionalProperties": False,
            }
        },
        "type": "object",
        "properties": {"owner": {"$ref": "#/$defs/Owner"}, "name": {"type": "string"}},
        "required": ["owner", "name"],
        "additionalProperties": False,
    }


# --- open objects --------------------------------------------------------------------


def test_to_tool_spec_rejects_a_nested_model_that_allows_extra_fields() -> None:
    class Extras(BaseModel):
        model_config = ConfigDict(extra="allow")

        label: str

    class ExtrasArgs(ToolArgs):
        extras: Extras

    with pytest.raises(SchemaError) as excinfo:
        to_tool_spec(make_contract(ExtrasArgs))

    assert str(excinfo.value) == "test__echo: #/$defs/Extras is an open object (additionalProperties must be false)"


def test_to_tool_spec_rejects_a_nested_model_that_ignores_extra_fields() -> None:
    # given a plain BaseModel (extra="ignore"): its schema says nothing about additionalProperties
    class Loose(BaseModel):
        label: str

    class LooseArgs(ToolArgs):
        loose: Loose

    with pytest.raises(SchemaError) as excinfo:
        to_tool_spec(make_contract(LooseArgs))

    assert str(excinfo.value) == "test__echo: #/$defs/Loose is an open object (additionalProperties must be false)"


def test_to_tool_spec_rejects_a_dict_field_as_an_open_object() -> None:
    class CountsArgs(ToolArgs):
        counts: dict[str, int]

    with pytest.raises(SchemaError) as excinfo:
        to_tool_spec(make_contract(CountsArgs))

    assert (
        str(excinfo.value) == "test__echo: #/properties/counts is an open object (additionalProperties must be false)"
    )


@pytest.mark.parametrize("additional", [True, {}, {"type": "string"}, None])
def test_check_schema_subset_rejects_any_object_not_closed_by_false(additional: Any) -> None:
    inner: dict[str, Any] = {"type": ["object", "null"], "properties": {}}
    if additional is not None:
        inner["additionalProperties"] = additional

    with pytest.raises(SchemaError) as excinfo:
        check_schema_subset(closed_object(meta=inner), tool_id="test__x")

    assert str(excinfo.value) == "test__x: #/properties/meta is an open object (additionalProperties must be false)"


# --- connection ids ------------------------------------------------------------------


@pytest.mark.parametrize("name", CONNECTION_LIKE_NAMES)
def test_check_schema_subset_rejects_a_connection_id_like_property(name: str) -> None:
    with pytest.raises(SchemaError) as excinfo:
        check_schema_subset(closed_object(**{name: {"type": "string"}}), tool_id="test__x")

    assert str(excinfo.value) == (f"test__x: # declares {name!r}; connection ids travel in the context, never in args")


@pytest.mark.parametrize("name", CONNECTION_LIKE_NAMES)
def test_to_tool_spec_rejects_a_connection_id_like_field_alias(name: str) -> None:
    model = args_model(target=(str, Field(alias=name)))

    with pytest.raises(SchemaError) as excinfo:
        to_tool_spec(make_contract(model))

    assert str(excinfo.value) == (
        f"test__echo: # declares {name!r}; connection ids travel in the context, never in args"
    )


@pytest.mark.parametrize("name", CONNECTION_LIKE_NAMES)
def test_to_tool_spec_rejects_a_connection_id_like_field_in_a_nested_model(name: str) -> None:
    # given a nested model hiding the connection id one level down
    nested = create_model("Target", __base__=ToolArgs, target=(str, Field(alias=name)))
    model = args_model(where=(nested, ...))

    # when / then
    with pytest.raises(SchemaError) as excinfo:
        to_tool_spec(make_contract(model))

    assert str(excinfo.value) == (
        f"test__echo: #/$defs/Target declares {name!r}; connection ids travel in the context, never in args"
    )


def test_check_schema_subset_rejects_a_connection_id_inside_array_items() -> None:
    schema = closed_object(targets={"type": "array", "items": closed_object(connectionId={"type": "string"})})

    with pytest.raises(SchemaError) as excinfo:
        check_schema_subset(schema, tool_id="test__x")

    assert str(excinfo.value) == (
        "test__x: #/properties/targets/items declares 'connectionId';"
        " connection ids travel in the context, never in args"
    )


@pytest.mark.parametrize("name", HARMLESS_NAMES)
def test_to_tool_spec_accepts_a_name_that_only_starts_like_connection(name: str) -> None:
    model = args_model(**{name: (str, ...)})

    spec = to_tool_spec(make_contract(model))

    assert spec.input_schema["properties"] == {name: {"type": "string"}}


# --- nullable fields -----------------------------------------------------------------


def test_to_tool_spec_compiles_optional_scalars_to_a_type_list() -> None:
    class PageArgs(ToolArgs):
        limit: int | None = None
        cursor: str | None = Field(default=None, max_length=32)

    spec = to_tool_spec(make_contract(PageArgs))

    assert spec.input_schema == {
        "type": "object",
        "properties": {
            "limit": {"type": ["integer", "null"], "default": None},
            "cursor": {"type": ["string", "null"], "maxLength": 32, "default": None},
        },
        "additionalProperties": False,
    }
    assert "anyOf" not in json.dumps(spec.input_schema)


def test_to_tool_spec_lists_null_among_the_values_of_an_optional_literal() -> None:
    # given Literal | None, which pydantic accepts as null
    class FilterArgs(ToolArgs):
        state: Literal["open", "closed"] | None = None
        kind: Literal["issue"] | None = None

    # when
    spec = to_tool_spec(make_contract(FilterArgs))

    # then the schema accepts null too, as validation does
    assert spec.input_schema["properties"] == {
        "state": {"type": ["string", "null"], "enum": ["open", "closed", None], "default": None},
        "kind": {"type": ["string", "null"], "enum": ["issue", None], "default": None},
    }
    assert FilterArgs.model_validate({"state": None, "kind": None}) == FilterArgs()


# --- schema hash ---------------------------------------------------------------------


def build_echo_contract(**overrides: Any) -> ToolContract:
    """A fresh model class each call, so two contracts share nothing but their shape."""

    class FreshEchoArgs(ToolArgs):
        text: str = Field(max_length=100, description="What to echo")

    return make_contract(FreshEchoArgs, **overrides)


def test_schema_hash_is_equal_for_independently_built_identical_contracts() -> None:
    first = build_echo_contract()
    second = build_echo_contract()

    assert first.input_model is not second.input_model
    assert to_tool_spec(first).schema_hash == to_tool_spec(second).schema_hash


def test_schema_hash_is_the_sha256_of_the_public_spec_without_its_metadata_as_canonical_json() -> None:
    spec = to_tool_spec(build_echo_contract())
    metadata = ("consequence_level", "requires_confirmation", "tags", "version")
    definition = {key: value for key, value in spec.public_dict().items() if key not in metadata}

    assert spec.schema_hash == hashlib.sha256(canonical_json(definition)).hexdigest()


def test_metadata_is_carried_into_the_spec_and_kept_out_of_the_schema_hash() -> None:
    plain = to_tool_spec(build_echo_contract())
    tagged = to_tool_spec(
        build_echo_contract(
            consequence_level=ConsequenceLevel.HIGH, requires_confirmation=True, tags=("echo", "demo"), version="2.1.0"
        )
    )

    assert (tagged.consequence_level, tagged.requires_confirmation, tagged.tags, tagged.version) == (
        ConsequenceLevel.HIGH,
        True,
        ("echo", "demo"),
        "2.1.0",
    )
    assert tagged.public_dict()["tags"] == ["echo", "demo"]
    assert (plain.consequence_level, plain.requires_confirmation, plain.tags, plain.version) == (
        ConsequenceLevel.LOW,
        False,
        (),
        None,
    )
    assert tagged.schema_hash == plain.schema_hash  # metadata is synced apart from the definition's review stamp


@pytest.mark.parametrize(
    ("tags", "problem"),
    [
        (("Echo",), "lower-case"),
        (("a b",), "lower-case"),
        (("x", "x"), "must not repeat"),
        (tuple(f"t{i}" for i in range(17)), "at most 16"),
        ("echo", "list of strings"),
    ],
)
def test_malformed_tags_are_refused_by_the_contract(tags, problem) -> None:
    with pytest.raises(ContractError, match=problem):
        build_echo_contract(tags=tags)


def test_a_version_longer_than_32_characters_is_refused() -> None:
    with pytest.raises(ContractError, match="version"):
        build_echo_contract(version="1" * 33)


@pytest.mark.parametrize("title", ["", "   ", "T" * 129])
def test_a_blank_or_overlong_title_is_refused(title: str) -> None:
    with pytest.raises(ContractError, match="title"):
        build_echo_contract(title=title)


def test_a_title_reaches_the_spec_but_not_the_schema_hash() -> None:
    """Display metadata, like tags: a new title needs no review of the definition."""
    titled = to_tool_spec(build_echo_contract(title="Echo chamber"))
    plain = to_tool_spec(build_echo_contract())

    assert (titled.title, plain.title) == ("Echo chamber", None)
    assert titled.schema_hash == plain.schema_hash


@pytest.mark.parametrize(
    "overrides",
    [
        {"description": "Echo the text back, loudly."},
        {"effect": ToolEffect.STATE_CHANGE},
        {"name": "test__echo2"},
        {"requires_connection": True, "provider": "github", "capabilities": frozenset({"auth"})},
    ],
    ids=["description", "effect", "name", "connection"],
)
def test_schema_hash_changes_with_the_contract(overrides: dict[str, Any]) -> None:
    assert to_tool_spec(build_echo_contract(**overrides)).schema_hash != to_tool_spec(build_echo_contract()).schema_hash


def test_schema_hash_changes_when_a_field_changes() -> None:
    class LongerEchoArgs(ToolArgs):
        text: str = Field(max_length=101, description="What to echo")

    assert to_tool_spec(make_contract(LongerEchoArgs)).schema_hash != to_tool_spec(build_echo_contract()).schema_hash


BUILTIN_HASHES_SCRIPT = """
import json
from runner.schema import to_tool_spec
from tools_app.tools import BUILTIN_TOOLS
print(json.dumps({tool.tool_id: to_tool_spec(tool.contract).schema_hash for tool in BUILTIN_TOOLS}))
"""


def builtin_hashes_in_a_new_process(hash_seed: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(PROJECT_ROOT)}
    completed = subprocess.run(
        [sys.executable, "-c", BUILTIN_HASHES_SCRIPT],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(completed.stdout)


def test_schema_hash_of_builtin_tools_is_stable_across_processes() -> None:
    # given
    in_process = {tool.tool_id: to_tool_spec(tool.contract).schema_hash for tool in BUILTIN_TOOLS}

    # when
    first = builtin_hashes_in_a_new_process("1")
    second = builtin_hashes_in_a_new_process("4242")

    # then
    assert first == second == in_process
    assert sorted(in_process) == [
        "core__get_current_time",
        "core__wait",
        "github__create_issue",
        "github__get_user",
        "toolgate__search_tools",
    ]


# --- built-in tools ------------------------------------------------------------------


@pytest.mark.parametrize("tool", BUILTIN_TOOLS, ids=lambda tool: tool.tool_id)
def test_builtin_tool_compiles_to_closed_objects_only(tool: ToolDefinition) -> None:
    spec = to_tool_spec(tool.contract)

    objects = list(objects_in(spec.input_schema))
    assert objects, "the input schema has no object at all"
    assert [node.get("additionalProperties") for node in objects] == [False] * len(objects)


def test_builtin_wait_tool_schema_is_exact() -> None:
    (wait,) = [tool for tool in BUILTIN_TOOLS if tool.tool_id == "core__wait"]

    assert to_tool_spec(wait.contract).input_schema == {
        "type": "object",
        "properties": {
            "ms": {
                "type": "integer",
                "minimum": 0,
                "maximum": 60_000,
                "description": "How long to wait, in milliseconds",
            }
        },
        "required": ["ms"],
        "additionalProperties": False,
    }


# --- ToolContract --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["get_time", "Core__x", "core__", "__x", "core__get time", "core__" + "x" * 59])
def test_tool_contract_refuses_a_non_namespaced_id(name: str) -> None:
    with pytest.raises(ContractError) as excinfo:
        make_contract(EchoArgs, name=name)

    assert str(excinfo.value) == f"tool id {name!r} is not a namespaced id like core__get_time"


@pytest.mark.parametrize("name", ["core__get_time", "mcp__server__tool", "github__get-user", "core__" + "x" * 58])
def test_tool_contract_accepts_a_namespaced_id(name: str) -> None:
    assert make_contract(EchoArgs, name=name).name == name


def test_tool_contract_refuses_a_connection_tool_without_provider() -> None:
    with pytest.raises(ContractError) as excinfo:
        make_contract(EchoArgs, requires_connection=True, capabilities=frozenset({"auth"}))

    assert str(excinfo.value) == "tool test__echo requires a connection but names no provider"


def test_tool_contract_refuses_a_connection_tool_without_the_auth_capability() -> None:
    with pytest.raises(ContractError) as excinfo:
        make_contract(EchoArgs, requires_connection=True, provider="github", capabilities=frozenset({"http"}))

    assert str(excinfo.value) == "tool test__echo requires a connection but not the auth capability"


@pytest.mark.parametrize("timeout_ms", [0, -1, MAX_TIMEOUT_MS + 1])
def test_tool_contract_refuses_a_timeout_outside_what_leases_and_the_server_allow(timeout_ms: int) -> None:
    with pytest.raises(ContractError) as excinfo:
        make_contract(EchoArgs, default_timeout_ms=timeout_ms)

    assert str(excinfo.value) == f"tool test__echo's timeout must be between 1 and {MAX_TIMEOUT_MS} ms"


def test_tool_contract_refuses_unknown_capabilities() -> None:
    with pytest.raises(ContractError) as excinfo:
        make_contract(EchoArgs, capabilities=frozenset({"clock", "filesystem", "env"}))

    assert str(excinfo.value) == "tool test__echo declares unknown capabilities ['env', 'filesystem']"


@pytest.mark.parametrize("path", ["txet", "missing.login", "missing[].name", "missing[][]"])
def test_to_tool_spec_refuses_an_allowlist_path_naming_no_output_field(path: str) -> None:
    # given a contract that constructs fine
    contract = make_contract(EchoArgs, redaction_allowlist=("text", path))

    # when / then: refused at compilation
    with pytest.raises(ContractError) as excinfo:
        to_tool_spec(contract)

    assert str(excinfo.value) == f"test__echo: redaction path {path!r} names no output field"


def test_to_tool_spec_accepts_allowlist_paths_rooted_in_output_fields() -> None:
    class RichOutput(ToolOutput):
        owner: dict[str, Any]
        labels: list[dict[str, Any]]
        matrix: list[list[int]]

    contract = make_contract(
        EchoArgs, output_model=RichOutput, redaction_allowlist=("owner.login", "labels[].name", "matrix[][]")
    )

    assert to_tool_spec(contract).name == "test__echo"


# --- the output schema describes the redacted value -----------------------------------------


class Owner(BaseModel):
    login: str
    id: int
    email: str


class Label(BaseModel):
    name: str
    color: Literal["red", "green"]
    secret_note: str


class IssueOutput(ToolOutput):
    number: int
    title: str
    owner: Owner
    assignee: Owner | None = None
    labels: list[Label]
    tags: list[str]
    body: str


ISSUE_ALLOWLIST = ("number", "owner.login", "assignee.login", "labels[].name", "labels[].color", "tags", "extra")
ISSUE = {
    "number": 7,
    "title": "cut",
    "owner": {"login": "octocat", "id": 1, "email": "o@example.com"},
    "assignee": None,
    "labels": [{"name": "bug", "color": "red", "secret_note": "x"}],
    "tags": ["a", "b"],
    "body": "not allowlisted",
    "extra": 3,
}


async def _no_execute(args: Any, ctx: Any, caps: Any) -> Any:
    return None


def test_output_schema_is_the_model_cut_to_the_allowlist_and_validates_the_redacted_value() -> None:
    # given a tool whose allowlist drops required fields of its output model
    contract = make_contract(
        EchoArgs,
        output_model=IssueOutput,
        redaction_allowlist=(*ISSUE_ALLOWLIST[:-1], "title"),
    )
    bound = bind_tool(ToolDefinition(contract=contract, execute=_no_execute))

    # when the pipeline's own output stages produce the value a caller receives
    value = bound.redact(bound.validate_output(ISSUE))
    schema = bound.spec.output_schema

    # then the schema describes exactly that value, self-contained
    assert schema is not None
    jsonschema.validate(value, schema)
    assert "$ref" not in json.dumps(schema)
    assert schema["required"] == ["number", "title", "owner", "labels", "tags"]
    assert schema["properties"]["owner"] == closed_object(login={"type": "string"}) | {"required": ["login"]}
    assert schema["properties"]["labels"]["items"]["properties"] == {
        "name": {"type": "string"},
        "color": {"enum": ["red", "green"], "type": "string"},
    }
    with pytest.raises(jsonschema.ValidationError):  # the model's own schema would refuse it
        jsonschema.validate(value, IssueOutput.model_json_schema(mode="serialization"))


def test_optional_nested_objects_keep_null_and_undeclared_fields_accept_anything() -> None:
    allowlist = compile_allowlist(ISSUE_ALLOWLIST)
    schema = redacted_schema(IssueOutput.model_json_schema(mode="serialization"), allowlist)
    value = redact(ISSUE, allowlist)

    assert schema["properties"]["extra"] == {}
    for assignee in (None, {"login": "hubot"}):
        jsonschema.validate({**value, "assignee": assignee, "extra": [1, "x"]}, schema)
    with pytest.raises(jsonschema.ValidationError):  # kept objects are closed: nothing unreviewed slips in
        jsonschema.validate({**value, "assignee": {"login": "hubot", "email": "h@example.com"}}, schema)


def test_a_tool_without_an_allowlist_declares_no_output_schema() -> None:
    assert to_tool_spec(make_contract(EchoArgs, redaction_allowlist=None)).output_schema is None


def test_builtin_tools_declare_the_output_schema_of_their_allowlist() -> None:
    specs = {tool.contract.name: to_tool_spec(tool.contract) for tool in BUILTIN_TOOLS}

    assert specs["core__wait"].output_schema == closed_object(waited_ms={"type": "integer"}) | {
        "required": ["waited_ms"]
    }
    assert set(specs["github__get_user"].output_schema["properties"]) == {"login", "id", "name", "html_url"}
