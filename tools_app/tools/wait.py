"""core__wait: sleep for a while. A diagnostic for budgets and timeouts."""

from __future__ import annotations

import asyncio

from pydantic import Field

from runner.capabilities import ToolCapabilities
from runner.contracts import ToolArgs, ToolContract, ToolDefinition, ToolOutput
from runner.types import ConsequenceLevel, ToolEffect, ToolInvocationContext


class WaitArgs(ToolArgs):
    ms: int = Field(ge=0, le=60_000, description="How long to wait, in milliseconds")


class WaitResult(ToolOutput):
    waited_ms: int


async def execute(args: WaitArgs, ctx: ToolInvocationContext, caps: ToolCapabilities) -> WaitResult:
    await asyncio.sleep(args.ms / 1000)
    return WaitResult(waited_ms=args.ms)


TOOL = ToolDefinition(
    contract=ToolContract(
        name="core__wait",
        description="Wait for the given number of milliseconds (0 to 60000), then return. For diagnostics.",
        input_model=WaitArgs,
        output_model=WaitResult,
        effect=ToolEffect.READ_ONLY,
        consequence_level=ConsequenceLevel.LOW,
        requires_confirmation=False,
        tags=("diagnostics",),
        version="1.0.0",
        redaction_allowlist=("waited_ms",),
        default_timeout_ms=61_000,
    ),
    execute=execute,
)
