"""A tool bound to its capabilities: what a ToolSource hands the runner.

Binding happens once, in the composition root: the contract is compiled to a
ToolSpec (rejecting schemas outside the subset), the allowlist is parsed, and
every capability the contract declares must be supplied or binding fails.
What depends on the call (its credential, its context's catalog) is added per
call by `capabilities`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from runner import wording
from runner.capabilities import (
    AuthCapability,
    CatalogIndex,
    CatalogSearch,
    ClockCapability,
    HttpCapability,
    ToolCapabilities,
)
from runner.contracts import ToolContract, ToolDefinition
from runner.errors import ContractError, InputInvalid, OutputInvalid
from runner.redaction import Trie, compile_allowlist, redact
from runner.schema import to_tool_spec
from runner.types import FieldError, ToolInvocationContext, ToolSpec


@dataclass(frozen=True, slots=True)
class BoundTool:
    definition: ToolDefinition
    spec: ToolSpec
    allowlist: Trie | None
    http: HttpCapability | None = None
    # Property names the input and output schemas declare: the only keys an error path may name.
    input_names: frozenset[str] = frozenset()
    output_names: frozenset[str] = frozenset()
    catalog: CatalogIndex | None = None
    # The tool may ask the caller's client mid-call (an upstream tool an operator allowed to:
    # runner/asking.py); interfaces that must prepare for questions (a stream) look here first.
    may_ask_client: bool = False

    @property
    def contract(self) -> ToolContract:
        return self.definition.contract

    @property
    def tool_id(self) -> str:
        return self.definition.contract.name

    def validate_input(self, raw_args: Any) -> BaseModel:
        try:
            return self.contract.input_model.model_validate(raw_args)
        except ValidationError as exc:
            raise InputInvalid(field_errors(exc, known_names=self.input_names)) from None

    def validate_output(self, raw_output: Any) -> dict[str, Any]:
        """The output as plain JSON data, checked against the declared fields."""
        model = self.contract.output_model
        try:
            if not isinstance(raw_output, model):
                raw_output = model.model_validate(raw_output)
            dumped: dict[str, Any] = raw_output.model_dump(mode="json")
            return dumped
        except ValidationError as exc:
            raise OutputInvalid(
                field_errors(exc, known_names=self.output_names, unknown_message="not a field of the output schema")
            ) from None
        except (TypeError, ValueError):
            raise OutputInvalid((FieldError(path="", message="output is not JSON-serialisable"),)) from None

    def redact(self, value: dict[str, Any]) -> Any:
        return redact(value, self.allowlist)

    def capabilities(
        self, *, clock: ClockCapability, auth: AuthCapability | None, ctx: ToolInvocationContext
    ) -> ToolCapabilities:
        """What this call may use: the bound ones, its credential, and a catalog search bound to its context."""
        catalog = CatalogSearch(self.catalog, ctx) if self.catalog is not None else None
        return ToolCapabilities(clock=clock, http=self.http, auth=auth, catalog=catalog)


def bind_tool(
    definition: ToolDefinition, *, http: HttpCapability | None = None, catalog: CatalogIndex | None = None
) -> BoundTool:
    """Compile and check a definition; fail loudly at startup, never at call time."""
    contract = definition.contract
    for name, bound in (("http", http), ("catalog", catalog)):
        if name in contract.capabilities and bound is None:
            raise ContractError(f"{contract.name} declares the {name} capability but none was bound")
        if name not in contract.capabilities and bound is not None:
            raise ContractError(f"{contract.name} was bound a {name} capability it does not declare")
    allowlist = None if contract.redaction_allowlist is None else compile_allowlist(contract.redaction_allowlist)
    spec = to_tool_spec(contract)
    return BoundTool(
        definition=definition,
        spec=spec,
        allowlist=allowlist,
        http=http,
        catalog=catalog,
        input_names=property_names(spec.input_schema),
        output_names=property_names(contract.output_model.model_json_schema()),
    )


UNKNOWN_FIELD = wording.UNKNOWN_FIELD
UNKNOWN_FIELD_MESSAGE = "unknown field; the tool's input_schema lists the fields it accepts"


def property_names(schema: Mapping[str, Any]) -> frozenset[str]:
    """Every name under a `properties` keyword of a JSON Schema, nested definitions included."""

    def walk(node: Any) -> Iterator[str]:
        if isinstance(node, Mapping):
            properties = node.get("properties")
            if isinstance(properties, Mapping):
                yield from (name for name in properties if isinstance(name, str))
            for value in node.values():
                yield from walk(value)
        elif isinstance(node, list):
            for value in node:
                yield from walk(value)

    return frozenset(walk(schema))


def field_errors(
    exc: ValidationError, *, known_names: frozenset[str] = frozenset(), unknown_message: str = UNKNOWN_FIELD_MESSAGE
) -> tuple[FieldError, ...]:
    """Paths and messages of a pydantic error, in runner.wording's words, without the values it carries.

    A key the schema does not declare is the caller's own text, which may be
    anything, a secret pasted in the wrong place included: it is never echoed.
    An undeclared key is reported at the path of the object holding it, with
    the closest declared name as a suggestion; elsewhere in a path such a key
    reads `(unknown field)`. Declared names and list indexes are kept. The
    undeclared key ends the path: by name when it is a typo of a declared name,
    else as `(unknown field)` (`wording.unknown_field_name`).
    """
    errors = []
    for error in exc.errors(include_url=False, include_input=True, include_context=True):
        location = list(error["loc"])
        named = ""
        if error["type"] == "extra_forbidden":
            unknown = [str(location.pop())]
            message = unknown_message
            guess = wording.unknown_field_message(unknown, sorted(known_names)).partition(";")[0]
            if guess != "unknown field":
                message = unknown_message.replace("unknown field", guess, 1)
            named = wording.unknown_field_name(unknown[0], sorted(known_names))
        else:
            message = wording.pydantic_message(error)
        parts = [str(part) if isinstance(part, int) or part in known_names else UNKNOWN_FIELD for part in location]
        path = ".".join([*parts, named] if named else parts)
        errors.append(FieldError(path=path, message=message))
    return tuple(errors)
