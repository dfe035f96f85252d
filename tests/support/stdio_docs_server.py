"""A stdio MCP server with one resource, one resource template and one prompt (no tools): the SDK's MCPServer.

Run as `python stdio_docs_server.py` (the MCP host starts it as a child). Standard library and
the SDK only, like stdio_server.py.
"""

from mcp.server.mcpserver import MCPServer

app = MCPServer(name="stdio-docs")


@app.resource("note://welcome", name="welcome", description="A welcome note.", mime_type="text/plain")
def welcome() -> str:
    return "welcome from stdio"


@app.resource("note://day/{day}", name="day", description="One day's note.")
def day(day: str) -> str:
    return f"note of {day}"


@app.prompt(name="summarise", description="Summarise a text.")
def summarise(text: str) -> str:
    return f"Summarise: {text}"


if __name__ == "__main__":
    app.run("stdio")
