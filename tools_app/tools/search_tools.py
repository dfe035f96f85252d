"""toolgate__search_tools: the caller's own catalog ranked by relevance to a few words.

A governed tool like any other: it arrives disabled, an operator switches it on
and allows it in a policy, and every search runs through the pipeline (kill
switch, policy, person, budgets, validation, redaction, result size, audit).
`?mode=search` on `/mcp` lists it beside `toolgate__call_tool`; wherever a
policy allows it, the plain catalogs list it too.

It reads the catalog only through the `catalog` capability, which the runner
binds to the call's own context: it ranks what this caller could list now
(policy ∩ the person's delegation ∩ the toolset the call came through), so a
result can never name a tool the caller could not call. It never lists itself.

A plain `def`: the search is a database query made on the request's thread
(Django's connections belong to it), bounded by the full-text index; one that
took longer than the runtime budget is answered `timeout` all the same.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from runner.capabilities import ToolCapabilities
from runner.contracts import ToolArgs, ToolContract, ToolDefinition, ToolOutput
from runner.types import ConsequenceLevel, ToolEffect, ToolInvocationContext

NAME = "toolgate__search_tools"
MAX_QUERY_LENGTH = 200
DEFAULT_LIMIT = 10
MAX_LIMIT = 50


class SearchToolsArgs(ToolArgs):
    query: str = Field(
        min_length=1,
        max_length=MAX_QUERY_LENGTH,
        description="What the task needs, in a few words (e.g. 'read a file from disk').",
    )
    limit: int = Field(default=DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="How many tools to answer at most.")

    @field_validator("query")
    @classmethod
    def _has_words(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must say what the task needs, not only blanks")
        return value


class FoundTool(ToolOutput):
    name: str
    title: str | None = None
    description: str


class SearchToolsResult(ToolOutput):
    tools: list[FoundTool]


def execute(args: SearchToolsArgs, ctx: ToolInvocationContext, caps: ToolCapabilities) -> SearchToolsResult:
    # One more than asked: the search may rank this tool itself, which is never an answer.
    found = [spec for spec in caps.require_catalog().search(args.query, args.limit + 1) if spec.name != NAME]
    tools = [FoundTool(name=spec.name, title=spec.title, description=spec.description) for spec in found]
    return SearchToolsResult(tools=tools[: args.limit])


TOOL = ToolDefinition(
    contract=ToolContract(
        name=NAME,
        title="Search tools",
        description=(
            "Find the tools for a task among the many this gateway offers: returns the best matches, most "
            "relevant first, each with its name, title and description. In ?mode=search on /mcp, each match "
            "also carries its inputSchema; call it with toolgate__call_tool."
        ),
        input_model=SearchToolsArgs,
        output_model=SearchToolsResult,
        effect=ToolEffect.READ_ONLY,
        consequence_level=ConsequenceLevel.LOW,
        requires_confirmation=False,
        tags=("toolgate", "search"),
        version="1.0.0",
        redaction_allowlist=("tools[].name", "tools[].title", "tools[].description"),
        capabilities=frozenset({"catalog"}),
    ),
    execute=execute,
)
