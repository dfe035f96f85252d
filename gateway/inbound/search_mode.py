"""`?mode=search` on `/mcp` and `/mcp/t/<toolset>`: two meta-tools instead of the whole catalog.

A client lists only `toolgate__search_tools(query, limit)` and
`toolgate__call_tool(tool_id, arguments)`. Neither widens anything:

- the search is a governed tool of its own (tools_app/tools/search_tools.py):
  its call goes through `ToolRunner.exec` like any tool's, so its kill switch,
  the caller's policy and the person's delegation decide whether it runs, its
  budgets apply and the runner audits it; refused as a tool outside the
  catalog is (-32602), it is not listed either. It ranks only the caller's
  own catalog (policy ∩ subject rules ∩ toolset), through the capability the
  runner binds to the call's context. On a toolset's endpoint the search tool
  itself is reachable (it is part of every search-mode endpoint), while what
  it ranks is the toolset's tools. Its answer names each match; search mode
  shows each as `tools/list` would, from the same caller's catalog;
- `toolgate__call_tool` is no tool of the runner's: it is a pass-through to
  the target's own call, `CallerBackend.run_tool` with the same `_meta`
  (tool_call_id, run_id, connection ids, subject), which ends in
  `ToolRunner.exec(target, arguments, ctx)`: the runner audits it under the
  target's id and applies every stage. A target outside the catalog answers
  as an unknown tool, whether it exists or not.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from gateway.elicitation import PersonNeeded
from gateway.inbound.asking import PLAIN_CALL, CallEnvelope
from gateway.inbound.views import CallerBackend
from gateway.inbound.wire import META_PREFIX, tool_entry
from runner.types import ErrorCode, FieldError, ToolEffect, ToolExecResult, ToolSpec
from tools_app.search import SEARCH_TOOL, unknown_tool_refusal

CALL_TOOL = "toolgate__call_tool"
CALL_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "tool_id": {"type": "string", "minLength": 1, "description": "A tool id that toolgate__search_tools returned."},
        "arguments": {"type": "object", "description": "The tool's arguments, as its inputSchema describes them."},
    },
    "required": ["tool_id"],
    "additionalProperties": False,
}
CALL_SPEC = ToolSpec(
    name=CALL_TOOL,
    title="Call a tool",
    description="Call one of the tools toolgate__search_tools found, with arguments matching its inputSchema.",
    input_schema=CALL_SCHEMA,
    effect=ToolEffect.EXTERNAL_SIDE_EFFECT,  # it may run any tool of the catalog: the most cautious hints
    requires_connection=False,
    provider=None,
    schema_hash=hashlib.sha256(json.dumps(CALL_SCHEMA, sort_keys=True).encode()).hexdigest(),
    tags=("toolgate",),
)


class SearchModeBackend:
    """The protocol's `Backend` in search mode: the two meta-tools over one caller's backends.

    `inner` is the endpoint's own backend (its toolset, if any): the catalog
    `toolgate__call_tool` reaches and search results are shown from. `search`
    is the same caller's backend with the search tool added to the toolset (on
    `/mcp`, the same as `inner`): the search tool is called through it.
    """

    def __init__(self, *, inner: CallerBackend, search: CallerBackend) -> None:
        self._inner = inner
        self._search_backend = search

    def list_tools(self, meta: Mapping[str, Any] | None = None) -> Sequence[ToolSpec]:
        # A subject token that cannot be used is refused here as in plain mode. The search tool is listed
        # only where it may be called (switched on, in the policy, and the person's delegation).
        specs = [CALL_SPEC]
        for spec in self._search_backend.list_tools(meta):
            if spec.name == SEARCH_TOOL:
                # Its answer here carries more than its own output schema (each match's inputSchema ...).
                specs.append(replace(spec, output_schema=None))
        return specs

    def may_ask_client(self, name: str) -> bool:
        """Never: a 2025-era client's calls through `toolgate__call_tool` are not streamed for questions."""
        return False

    def serves_logs(self, meta: Mapping[str, Any]) -> bool:
        """`toolgate__call_tool` reaches the endpoint's own catalog: log messages come from its upstream tools."""
        return self._inner.serves_logs(meta)

    def run_tool(
        self, name: str, arguments: dict[str, Any], meta: Mapping[str, Any], envelope: CallEnvelope = PLAIN_CALL
    ) -> ToolExecResult | PersonNeeded | None:
        if name == SEARCH_TOOL:
            return self._search(arguments, meta)
        if name == CALL_TOOL:
            return self._call(arguments, meta, envelope)
        return None  # everything else is unknown here: JSON-RPC -32602

    def _search(self, arguments: dict[str, Any], meta: Mapping[str, Any]) -> ToolExecResult | PersonNeeded | None:
        """The search tool's own call (None: refused as a tool outside the catalog is), its matches shown in full."""
        result = self._search_backend.run_tool(SEARCH_TOOL, arguments, meta)
        if not isinstance(result, ToolExecResult) or not result.ok:
            return result
        # The same caller's catalog on this endpoint: a match is shown only if it is in it (a policy
        # change between the two looks drops it rather than showing more).
        listed = {spec.name: spec for spec in self._inner.list_tools(meta)}
        matches = [listed[found["name"]] for found in result.value["tools"] if found["name"] in listed]
        return replace(result, value={"tools": [_found_entry(spec) for spec in matches]}, content=None)

    def _call(
        self, arguments: dict[str, Any], meta: Mapping[str, Any], envelope: CallEnvelope
    ) -> ToolExecResult | PersonNeeded | None:
        """A pass-through: the target's own call through the runner (its audit row has the target's id)."""
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
        # The target's person is asked as for a direct call (its confirmation names the target tool).
        result = self._inner.run_tool(tool_id, arguments.get("arguments") or {}, meta, envelope)
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
