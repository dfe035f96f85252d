"""`mcp-remote` (the stdio bridge Claude Desktop and others use for remote servers) signing in to a live Toolgate.

The SDK's stdio client plays the desktop client: it starts `mcp-remote`, which
finds /mcp's protected-resource metadata, registers itself, and asks for a
browser. There is no browser here, so it prints the authorization URL on its
stderr; the person's part is played by a plain HTTP client that logs in,
allows the consent page and follows the redirect to `mcp-remote`'s own
loopback callback. The bridge then exchanges the code and the SDK lists and
calls tools through it, on behalf of the person, in both of its protocol modes.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urljoin

import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from signin.models import SigninClient
from tests.factories import PASSWORD
from tests.support.node_tools import node_at_least, npm_install
from tests.support.signin import TIME, WAIT, page_form, signin_tenant
from tests.support.threads import run_in_own_thread
from tools_app.models import ToolInvocation

# The first run installs mcp-remote (about half a minute here).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(600)]

MCP_REMOTE = "mcp-remote"
MCP_REMOTE_VERSION = "0.15.1"
PROMPT = "Please authorize this client by visiting:"
SIGN_IN_WAIT_S = 60


@pytest.fixture(scope="module")
def mcp_remote() -> list[str]:
    """The argv that starts the bridge."""
    node = node_at_least(20)
    prefix = npm_install(MCP_REMOTE, MCP_REMOTE_VERSION)
    return [node, str(prefix / "node_modules" / MCP_REMOTE / "dist" / "proxy.js")]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _authorization_url(stderr: Path, deadline: float) -> str:
    """The URL the bridge asks the person to open, once it has printed it."""
    while time.monotonic() < deadline:
        lines = stderr.read_text(errors="replace").splitlines()
        for index, line in enumerate(lines[:-1]):
            if PROMPT in line and lines[index + 1].startswith("http"):
                return lines[index + 1].strip()
        time.sleep(0.1)
    raise AssertionError(f"mcp-remote never asked for a browser: {stderr.read_text()[-800:]}")


class Person:
    """Ada at a browser without scripts: opens the URL, logs in, allows, and lands on the bridge's callback."""

    def __init__(self, stderr: Path, callback: str) -> None:
        self.stderr = stderr
        self.callback = callback
        self.pages: list[str] = []
        self.landed: int | None = None
        self.error: BaseException | None = None

    def sign_in(self) -> None:
        try:
            url = _authorization_url(self.stderr, time.monotonic() + SIGN_IN_WAIT_S)
            with httpx.Client(follow_redirects=False, timeout=10) as http:
                response = http.get(url)
                while response.status_code in (301, 302, 303):
                    location = urljoin(str(response.url), response.headers["location"])
                    response = http.get(location)
                    if location.startswith(self.callback):
                        self.landed = response.status_code
                        return
                    self.pages.append(response.text)
                    if response.status_code == 200:
                        action, fields = page_form(response.text)
                        if "username" in fields:
                            fields.update(username=["ada"], password=[PASSWORD])
                        else:
                            fields["tg_decision"] = ["allow"]
                        response = http.post(urljoin(str(response.url), action), data=fields)
                raise AssertionError(f"sign-in ended at HTTP {response.status_code}: {response.text[:300]}")
        except BaseException as error:  # handed to the test's thread
            self.error = error


@pytest.mark.parametrize("protocol", ["legacy", "auto"])
def test_mcp_remote_signs_in_and_calls_on_behalf_of_the_person(live_server, mcp_remote, tmp_path, protocol):
    _tenant, ada, account, _key = signin_tenant()
    port = _free_port()
    stderr = tmp_path / "mcp-remote.log"
    stderr.touch()
    person = Person(stderr, f"http://127.0.0.1:{port}/oauth/callback")
    browser = threading.Thread(target=person.sign_in, daemon=True)
    bridge = StdioServerParameters(
        command=mcp_remote[0],
        args=[mcp_remote[1], f"{live_server.url}/mcp", str(port), "--host", "127.0.0.1", "--protocol", protocol],
        # Its token store and the opener it tries: a home of its own, and no desktop to open a browser on.
        env={"HOME": str(tmp_path), "MCP_REMOTE_CONFIG_DIR": str(tmp_path / "auth"), "PATH": "/usr/bin:/bin"},
    )

    async def run() -> tuple[list[str], object]:
        with stderr.open("w") as errlog:
            async with Client(stdio_client(bridge, errlog=errlog), mode="legacy") as client:
                listed = await client.list_tools()
                called = await client.call_tool(TIME, {"timezone": "UTC"})
                return [tool.name for tool in listed.tools], called

    browser.start()
    try:
        names, called = run_in_own_thread(lambda: asyncio.wait_for(run(), timeout=120))
    except TimeoutError:
        raise AssertionError(f"{person.error}; mcp-remote said: {stderr.read_text()[-1500:]}") from None
    browser.join(timeout=10)

    assert person.error is None, person.error
    assert person.landed == 200  # the bridge's callback took the code
    assert any("use Toolgate for you?" in page for page in person.pages)  # the person saw the consent page
    assert names == [TIME, WAIT]
    assert called.is_error is False, called.content
    row = ToolInvocation.objects.get(tool_id=TIME)
    assert (row.subject_id, str(row.service_account_id), row.ok, row.executed) == (
        f"user:{ada.pk}",
        str(account.pk),
        True,
        True,
    )
    assert SigninClient.objects.get().redirect_uris == [f"http://127.0.0.1:{port}/oauth/callback"]
