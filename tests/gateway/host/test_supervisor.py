"""The MCP host's supervisor on its own loop, with the SDK's stdio server as a real child."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from mcp import MCPError

from gateway.host.children import ChildSpec, HostConfig, HostError, Supervisor, spec_fingerprint
from gateway.host.sandbox import Limits
from tests.support.threads import run_in_own_thread

SCRIPT = Path(__file__).resolve().parents[2] / "support" / "stdio_server.py"
COMMAND = (sys.executable, str(SCRIPT))


def test_a_call_that_arrives_while_an_exited_child_is_being_stopped_meets_the_backoff(tmp_path):
    """The sweep forgets an exited child and then waits for the SDK to stop it (which takes a while
    on a loaded machine); a call arriving in between must find the backoff, not start a new child."""
    spec = ChildSpec(slug="kit", connection_id="", command=COMMAND, env={}, fingerprint=spec_fingerprint(COMMAND, {}))
    supervisor = Supervisor(HostConfig(root=tmp_path, hidden=(), limits=Limits(), bwrap=None))

    async def run() -> str:
        child = await supervisor.child(spec)
        with pytest.raises(MCPError):  # the child exits mid-call
            await child.client.call_tool("crash", {})
        while not child.dead:
            await asyncio.sleep(0.01)
        sweeping = asyncio.create_task(supervisor.sweep())
        await asyncio.sleep(0)  # the sweep has forgotten the child and awaits its stop
        try:
            await supervisor.child(spec)
        except HostError as exc:
            return str(exc)
        finally:
            await sweeping
            for started in supervisor.children():
                await started.stop()
        return "a new child was started"

    assert run_in_own_thread(run).startswith("the server exited and is started again in")
