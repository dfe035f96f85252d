"""A loopback GitHub wired into the runtime, and a caller whose policy allows the github tools.

The URL conf hands the views `config.runtime.runtime`, a cached function: the
`github` fixture points TOOLGATE_GITHUB_API_URL at a LoopbackServer and clears
that cache, so the next request binds the github tools to the loopback server;
it clears the cache again at teardown so no later test meets a runtime bound to
a closed port.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from config.runtime import runtime
from connections_app.models import Connection, ExecutionGrant
from policies_app.models import ServiceAccount, Tenant
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import api_client, enable_tools
from tests.support.loopback import LoopbackServer

EXEC_URL = "/api/v1/tools/exec"
GITHUB_TOOLS = ("github__get_user", "github__create_issue")


@pytest.fixture
def github(settings) -> Iterator[LoopbackServer]:
    """A real HTTP server on 127.0.0.1 standing in for GitHub, the one the API's runtime calls."""
    with LoopbackServer() as server:
        settings.TOOLGATE_GITHUB_API_URL = server.url
        runtime.cache_clear()
        yield server
    runtime.cache_clear()


@pytest.fixture
def tenant() -> Tenant:
    return TenantFactory(slug="acme")


@pytest.fixture
def caller(tenant) -> tuple[ServiceAccount, str]:
    """A tools:exec service account of `acme`; its tenant policy allows both github tools, no approvals."""
    enable_tools(*GITHUB_TOOLS)
    account, key = service_account_with_key(tenant, name="agent")
    ToolPolicyFactory(tenant=tenant, allowed_tools=list(GITHUB_TOOLS), require_approval_for_effects=[])
    return account, key


@pytest.fixture
def call_tool(caller) -> Callable[..., Any]:
    """POST /api/v1/tools/exec as `caller`, using `connection` under `grant` (rows or ids)."""
    _account, key = caller
    client = api_client(key)

    def call(
        connection: Connection | str,
        grant: ExecutionGrant | str,
        *,
        tool_id: str = "github__get_user",
        args: dict[str, Any] | None = None,
        **body: Any,
    ):
        payload = {
            "tool_id": tool_id,
            "args": args or {},
            "connection_id": str(getattr(connection, "pk", connection)),
            "grant_id": str(getattr(grant, "pk", grant)),
            **body,
        }
        return client.post(EXEC_URL, payload, format="json")

    return call
