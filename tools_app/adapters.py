"""tools_app's side of the runner's ports: the tool source and the audit sink."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from runner.bound import BoundTool
from runner.types import ToolInvocationRecord
from tools_app.selectors import tool_is_enabled
from tools_app.services import invocation_record


class CatalogToolSource:
    """Bound code tools, switched on and off by their Tool rows."""

    def __init__(self, tools: Mapping[str, BoundTool]) -> None:
        self._tools = dict(tools)
        self._ordered = tuple(self._tools[tool_id] for tool_id in sorted(self._tools))

    def get(self, tool_id: str) -> BoundTool | None:
        return self._tools.get(tool_id)

    def list(self) -> Sequence[BoundTool]:
        return self._ordered

    def is_enabled(self, tool_id: str) -> bool:
        return tool_is_enabled(tool_id=tool_id)


class DatabaseAuditSink:
    def record(self, record: ToolInvocationRecord) -> None:
        invocation_record(record)
