"""`?mode=search` on `/mcp` and `/mcp/t/<toolset>`: two meta-tools instead of the whole catalog (issue 31).

A client lists only `toolgate__search_tools(query, limit)` and
`toolgate__call_tool(tool_id, arguments)`. Neither widens anything:

- the search ranks the caller's own catalog (policy ∩ subject rules ∩ toolset,
  from the same `CallerBackend.list_tools` a plain `tools/list` answers), so
  it can only name tools the caller could list anyway; `tool_search_call`
  writes its audit row like any call's (its own tool id, the found ids);
- the call is the target tool's own call: `CallerBackend.run_tool` with the same
  `_meta` (tool_call_id, run_id, connection ids, subject), which ends in
  `ToolRunner.exec(target, arguments, ctx)`: the runner audits it under the
  target's id and applies every stage. A target outside the catalog answers as
  an unknown tool, whether it exists or not.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from policies_app.selectors import Caller
from runner.types import ErrorCode, FieldError, ToolEffect, ToolExecResult, ToolSpec
from tools_app.mcp_server.views import CallerBackend, exec_request_of
from tools_app.mcp_server.wire import META_PREFIX, tool_entry
from tools_app.search import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    MAX_QUERY_LENGTH,
    SEARCH_TOOL,
    tool_search_call,
    unknown_tool_refusal,
)

CALL_TOOL = "toolgate__call_tool"
SEARCH_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_QUERY_LENGTH,
            "description": "What the task needs, in a few words (e.g. 'read a file from disk').",
        },
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
    },
    "required": ["query"],
    "additionalProperties": False,
}
CALL_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "tool_id": {"type": "string", "minLength": 1, "description": "A tool id that toolgate__search_tools returned."},
        "arguments": {"type": "object", "description": "The tool's arguments, as its inputSchema describes them."},
    },
    "required": ["tool_id"],
    "additionalProperties": False,
}


def _meta_spec(name: str, title: str, description: str, schema: Mapping[str, Any], effect: ToolEffect) -> ToolSpec:
    return ToolSpec(
        name=name,
        title=title,
        description=description,
        input_schema=schema,
        effect=effect,
        requires_connection=False,
        provider=None,
        schema_hash=hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).hexdigest(),
        tags=("toolgate",),
    )


META_SPECS: tuple[ToolSpec, ...] = (
    _meta_spec(
        CALL_TOOL,
        "Call a tool",
        "Call one of the tools toolgate__search_tools found, with arguments matching its inputSchema.",
        CALL_SCHEMA,
        ToolEffect.EXTERNAL_SIDE_EFFECT,  # it may run any tool of the catalog: the most cautious hints
    ),
    _meta_spec(
        SEARCH_TOOL,
        "Search tools",
        "Find the tools for a task among the many this gateway offers: returns the best matches, most "
        "relevant first, each with its name, description and inputSchema. Then call one with toolgate__call_tool.",
        SEARCH_SCHEMA,
        ToolEffect.READ_ONLY,
    ),
)


class SearchModeBackend:
    """The protocol's `Backend` in search mode: the two meta-tools over one caller's `CallerBackend`."""

    def __init__(self, *, inner: CallerBackend, caller: Caller, subject_token: str | None) -> None:
        self._inner = inner
        self._caller = caller
        self._subject_token = subject_token

    def list_tools(self, meta: Mapping[str, Any] | None = None) -> Sequence[ToolSpec]:
        self._inner.list_tools(meta)  # a subject token that cannot be used is refused here as in plain mode
        return META_SPECS

    def run_tool(self, name: str, arguments: dict[str, Any], meta: Mapping[str, Any]) -> ToolExecResult | None:
        if name == SEARCH_TOOL:
            return self._search(arguments, meta)
        if name == CALL_TOOL:
            return self._call(arguments, meta)
        return None  # everything else is unknown here: JSON-RPC -32602

    def _search(self, arguments: dict[str, Any], meta: Mapping[str, Any]) -> ToolExecResult:
        request = exec_request_of(SEARCH_TOOL, arguments, meta)  # the out-of-band fields, checked as for a call
        if isinstance(request, ToolExecResult):
            return request
        subject = meta.get(f"{META_PREFIX}subject", self._subject_token)
        return tool_search_call(
            caller=self._caller,
            request=request,
            specs=self._inner.list_tools(meta),
            present=_found_entry,
            subject_token=subject if isinstance(subject, str) else None,
            tool_scope=self._inner.tool_scope,
        )

    def _call(self, arguments: dict[str, Any], meta: Mapping[str, Any]) -> ToolExecResult | None:
        errors = _call_errors(arguments)
        tool_call_id = meta.get(f"{META_PREFIX}tool_call_id")
        tool_call_id = tool_call_id if isinstance(tool_call_id, str) else ""
        if errors:
            return ToolExecResult(
                tool_call_id=tool_call_id,
                tool_id=CALL_TOOL,
                ok=False,
                error_code=ErrorCode.VALIDATION,
                safe_message="the arguments are invalid",
                errors=tuple(errors),
            )
        tool_id: str = arguments["tool_id"]
        result = self._inner.run_tool(tool_id, arguments.get("arguments") or {}, meta)
        if result is not None:
            return result
        # Outside the catalog: the runner has audited the attempt; the answer is an unknown id's.
        return unknown_tool_refusal(tool_id=tool_id, tool_call_id=tool_call_id, catalog=self._inner.list_tools(meta))


def _found_entry(spec: ToolSpec) -> dict[str, Any]:
    """A found tool as `tools/list` would show it, without Toolgate's own `_meta`."""
    entry = tool_entry(spec)
    entry.pop("_meta", None)
    return entry


def _call_errors(arguments: Mapping[str, Any]) -> list[FieldError]:
    errors = [
        FieldError(path=f"arguments.{key}", message="unknown argument")
        for key in arguments
        if key not in ("tool_id", "arguments")
    ]
    if not isinstance(arguments.get("tool_id"), str) or not arguments["tool_id"]:
        errors.append(FieldError(path="arguments.tool_id", message="must be a non-empty string"))
    if not isinstance(arguments.get("arguments", {}), dict):
        errors.append(FieldError(path="arguments.arguments", message="must be an object"))
    return errors
