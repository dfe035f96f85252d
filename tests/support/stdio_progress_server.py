"""A stdio MCP server that reports progress, for the host's progress relay tests (SDK only).

`count` reports `steps` progress events a little apart, then answers; `hang` reports once,
then waits until cancelled, writing "cancelled" to the file its `marker` names when it is
(the test reads it: the child is another process). `leak` reports a progress message holding
an environment variable's value (the host must blank a declared secret's). `talk` logs a debug
line, an info line, and a warning holding an environment variable's value (the host must drop it).
"""

import asyncio
import os
import sys
import warnings

from mcp.server.mcpserver import Context, MCPServer

app = MCPServer(name="stdio-progress")


@app.tool()
async def count(steps: int, ctx: Context) -> str:
    """Report `steps` progress events, then answer."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step}")
        await asyncio.sleep(0.05)
    return f"counted {steps}"


@app.tool()
async def hang(marker: str, ctx: Context) -> str:
    """Report once, then wait until cancelled (and say so in `marker`)."""
    await ctx.report_progress(1, None, "started")
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        with open(marker, "w") as handle:
            handle.write("cancelled")
        raise
    return "never"


@app.tool()
async def leak(name: str, ctx: Context) -> str:
    """Report one progress event whose message holds an environment variable's value."""
    await ctx.report_progress(1, 1, f"working with {os.environ.get(name, '')}")
    return "leaked"


@app.tool()
async def talk(name: str, ctx: Context) -> str:
    """Log a debug line, an info line, then a warning holding the environment variable `name`'s value."""
    await ctx.log("debug", "debug line", logger_name="talk")
    await ctx.log("info", {"said": "info line"}, logger_name="talk")
    await ctx.log("warning", f"the secret is {os.environ.get(name, '')}")
    return "talked"


if __name__ == "__main__":
    warnings.simplefilter("ignore")  # the SDK marks logging deprecated (2026-07-28); stderr stays for real news
    print("stdio-progress ready", file=sys.stderr, flush=True)
    app.run("stdio")
