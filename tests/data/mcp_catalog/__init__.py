"""A catalog of real MCP tools, as published servers list them (collect.py says where each list came from).

`catalog(size)` flattens the lists into Toolgate catalog rows: ids as Toolgate
maps upstream tools (`mcp__<slug>__<name>`, gateway.upstream.definitions),
the server's own description and input schema, and the server's slug as the
tool's tag (how an operator would tag them). Shorter lists first (then by
slug), tools in their listed order, cut at `size`: the same catalog every run,
and a cut trims only the longest list (GitHub's official server's).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.upstream.definitions import tool_ids_for

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True, slots=True)
class CatalogTool:
    id: str
    description: str
    input_schema: dict[str, Any]
    tags: tuple[str, ...]
    source: str


def server_lists() -> dict[str, dict[str, Any]]:
    return {path.stem: json.loads(path.read_text()) for path in sorted(HERE.glob("*.json"))}


def catalog(size: int | None = None) -> list[CatalogTool]:
    tools: list[CatalogTool] = []
    lists = sorted(server_lists().items(), key=lambda item: (len(item[1]["tools"]), item[0]))
    for slug, listed in lists:
        ids = tool_ids_for(slug, [tool["name"] for tool in listed["tools"]])
        tag = slug.replace("_", "-")
        tools += [
            CatalogTool(
                id=ids[tool["name"]],
                description=tool["description"],
                input_schema=tool["inputSchema"],
                tags=(tag,),
                source=listed["source"],
            )
            for tool in listed["tools"]
        ]
    return tools[:size] if size is not None else tools


def install(tools: list[CatalogTool]) -> None:
    """The tools as enabled catalog rows (upstream MCP tools an operator approved), in bulk."""
    from django.utils import timezone  # noqa: PLC0415 - Django is set up by whoever installs

    from tools_app.models import Tool  # noqa: PLC0415

    now = timezone.now()
    Tool.objects.bulk_create(
        [
            Tool(
                id=tool.id,
                description=tool.description,
                input_schema=tool.input_schema,
                schema_hash="0" * 64,
                schema_changed_at=now,
                effect="read_only",
                source=Tool.Source.MCP,
                tags=list(tool.tags),
                is_enabled=True,
            )
            for tool in tools
        ],
        batch_size=1000,
    )


def specs(tools: list[CatalogTool]) -> list[Any]:
    """The tools as the catalog hands them to search (ToolSpecs)."""
    from runner.types import ToolEffect, ToolSpec  # noqa: PLC0415

    return [
        ToolSpec(
            name=tool.id,
            description=tool.description,
            input_schema=tool.input_schema,
            effect=ToolEffect.READ_ONLY,
            requires_connection=False,
            provider=None,
            schema_hash="0" * 64,
            tags=tool.tags,
        )
        for tool in tools
    ]
