"""The code registry: every tool definition shipped in code, by id.

Built once at startup (AppConfig.ready): an id collision or a schema outside
the subset stops the process instead of silently shadowing a tool.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache
from types import MappingProxyType

from runner.contracts import ToolDefinition
from runner.errors import ContractError
from runner.schema import to_tool_spec
from runner.types import ToolSpec
from tools_app.tools import BUILTIN_TOOLS


class ToolIdCollision(ContractError):
    pass


def build_registry(definitions: Iterable[ToolDefinition]) -> Mapping[str, ToolDefinition]:
    registry: dict[str, ToolDefinition] = {}
    for definition in definitions:
        if definition.tool_id in registry:
            raise ToolIdCollision(f"two tools share the id {definition.tool_id!r}")
        to_tool_spec(definition.contract)  # refuse bad schemas at registration, not at first call
        registry[definition.tool_id] = definition
    return MappingProxyType(registry)


@cache
def code_registry() -> Mapping[str, ToolDefinition]:
    return build_registry(BUILTIN_TOOLS)


def code_specs() -> list[ToolSpec]:
    return [to_tool_spec(definition.contract) for definition in code_registry().values()]
