"""A stdio MCP server for tests: the official SDK's MCPServer, run over stdin/stdout.

Run as `python stdio_server.py` (the MCP host starts it as a child). It reports
what tests need to see from inside a child: its environment (names, and a digest
of each value so that no secret is ever echoed), its process group, its limits,
whether it can read a path or open a TCP connection, what an HTTP request through the
proxy its environment names answers; it can leave an orphan behind and exit on demand. Standard library and the
SDK only: it must run without Toolgate's tree (under bubblewrap it is passed as
`python -c SOURCE`).
"""

import base64
import hashlib
import http.client
import json
import os
import resource
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

app = MCPServer(name="stdio-test")


@app.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@app.tool()
def environment() -> str:
    """The child's environment as JSON: each name with the SHA-256 of its value."""
    return json.dumps({name: hashlib.sha256(value.encode()).hexdigest() for name, value in os.environ.items()})


@app.tool()
def process() -> str:
    """Who the child is: pid, process group, session, limits, working directory."""
    limits = {
        name: resource.getrlimit(getattr(resource, name))[0]
        for name in ("RLIMIT_CPU", "RLIMIT_DATA", "RLIMIT_NOFILE", "RLIMIT_NPROC")
    }
    return json.dumps(
        {"pid": os.getpid(), "pgid": os.getpgid(0), "sid": os.getsid(0), "limits": limits, "cwd": os.getcwd()}
    )


@app.tool()
def can_read(path: str) -> str:
    """Whether the child can list (a directory) or read (a file) `path`."""
    try:
        if os.path.isdir(path):
            return "listed:" + ",".join(sorted(os.listdir(path))[:20])
        with open(path, "rb") as handle:
            return f"read:{len(handle.read(64))}"
    except OSError as exc:
        return f"refused:{type(exc).__name__}"


@app.tool()
def can_write(path: str) -> str:
    """Whether the child can create `path`."""
    try:
        with open(path, "w") as handle:
            handle.write("x")
        return "written"
    except OSError as exc:
        return f"refused:{type(exc).__name__}"


@app.tool()
def shout(text: str) -> str:
    """Write `text` to stderr, then answer."""
    print(text, file=sys.stderr, flush=True)
    return "shouted"


@app.tool()
def leak(name: str, form: str = "raw") -> str:
    """Answer an environment variable's value, raw, base64-encoded or spaced out (the host must withhold a secret's)."""
    value = os.environ.get(name, "")
    if form == "base64":
        return "data:" + base64.b64encode(f"k={value}".encode()).decode()
    if form == "spaced":
        return " ".join(value[i : i + 3] for i in range(0, len(value), 3))
    return value


@app.tool()
def refuse(reason: str) -> str:
    """Fail the way a tool tells the model what went wrong (the SDK answers isError with the text)."""
    raise ToolError(reason)


@app.tool()
def connect(host: str, port: int) -> str:
    """Whether a TCP connection to host:port opens from inside the child (no proxy)."""
    try:
        with socket.create_connection((host, port), timeout=3):
            return "connected"
    except OSError as exc:
        return f"refused:{type(exc).__name__}"


@app.tool()
def fetch(url: str, tunnel: bool = False) -> str:
    """GET `url` the way HTTP clients do: through HTTP_PROXY (absolute form) or, with tunnel, a CONNECT."""
    try:
        if not tunnel:
            with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - honours HTTP_PROXY
                return f"{response.status}:{response.read(200).decode(errors='replace')}"
        proxy, target = urlsplit(os.environ.get("HTTPS_PROXY", "")), urlsplit(url)
        if not proxy.hostname:
            return "failed:no HTTPS_PROXY"
        connection = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=10)
        connection.set_tunnel(target.hostname, target.port)
        connection.request("GET", target.path or "/")
        response = connection.getresponse()
        return f"{response.status}:{response.read(200).decode(errors='replace')}"
    except urllib.error.HTTPError as exc:
        return f"{exc.code}:{exc.read(200).decode(errors='replace')}"
    except OSError as exc:
        return f"failed:{type(exc).__name__}:{str(exc)[:200]}"


@app.tool()
def orphan(marker: str) -> str:
    """Leave a process behind that double-forks into a session of its own (the host must still stop it)."""
    code = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(600)\n"
    subprocess.Popen(
        [sys.executable, "-c", code, marker],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ).wait()
    return "left"


@app.tool()
def crash() -> str:
    """Exit the process at once, mid-call."""
    os._exit(3)


if __name__ == "__main__":
    app.run("stdio")
