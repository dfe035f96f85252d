"""A 2025-era stdio MCP server whose tools ask the client mid-call, for the host's asking tests (SDK only).

It serves the handshake era only (`serve_loop`, as 2025-era servers do: `server/discover` is
not answered), so its questions are server requests on stdio while the tool waits, not an
InputRequiredResult. With `--modern` it serves both eras (`MCPServer.run`), so the host speaks
2026-07-28 to it and `book` answers an InputRequiredResult of its own (a resolver's question).

`order` asks the person to confirm (elicitation) and writes what it was answered to stderr, which
the host logs (a test reads that a "decline" reached the child); `summarise` asks the client's
model (sampling); `reveal` asks a question whose text holds an environment variable's value
(the host must refuse a declared secret's).
"""

import os
import sys
from typing import Annotated

import anyio
import mcp_types as types
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server
from pydantic import BaseModel

app = MCPServer(name="stdio-asking")


class Choice(BaseModel):
    confirm: bool


@app.tool()
async def order(item: str, ctx: Context) -> str:
    """Order an item once the person confirms."""
    answer = await ctx.elicit(f"Order {item}?", Choice)
    print(f"order {item} answered {answer.action}", file=sys.stderr, flush=True)
    if answer.action == "accept" and answer.data.confirm:
        return f"ordered {item}"
    return f"kept {item} ({answer.action})"


@app.tool()
async def summarise(text: str, ctx: Context) -> str:
    """Summarise a text with the client's model."""
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=f"Summarise: {text}"))
    sampled = await ctx.session.create_message(messages=[message], max_tokens=50, related_request_id=ctx.request_id)
    content = sampled.content
    return f"summary: {content.text if isinstance(content, types.TextContent) else '?'}"


@app.tool()
async def reveal(name: str, ctx: Context) -> str:
    """Ask a question whose text holds the environment variable `name`'s value."""
    answer = await ctx.elicit(f"Is {os.environ.get(name, '')} right?", Choice)
    return f"revealed ({answer.action})"


async def ask_confirm(item: str) -> Elicit[Choice]:
    return Elicit(f"Book {item}?", Choice)


@app.tool()
async def book(item: str, choice: Annotated[Choice, Resolve(ask_confirm)]) -> str:
    """Book an item once the person confirms (a resolver: asked however the era asks)."""
    return f"booked {item}" if choice.confirm else f"kept {item}"


async def main() -> None:
    server = app._lowlevel_server
    async with server.lifespan(server) as state, stdio_server() as (read, write):
        await serve_loop(server, read, write, lifespan_state=state, init_options=server.create_initialization_options())


if __name__ == "__main__":
    print("stdio-asking ready", file=sys.stderr, flush=True)
    if "--modern" in sys.argv:
        app.run("stdio")
    else:
        anyio.run(main)
