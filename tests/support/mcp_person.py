"""A person at an MCP client, through Toolgate's /mcp: the official SDK client acting for a delegated subject.

The elicitation tests (a confirmation, an approval, a connection to choose) all drive the
same client: a service's key plus the person's delegation token, and a URL-elicitation
callback standing for the person who opens the page and comes back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import URL_ELICITATION_REQUIRED, ElicitResult

T = TypeVar("T")


def as_person(
    url: str,
    key: str,
    subject: str,
    mode: str,
    fn: Callable[[Client], Awaitable[T]],
    *,
    on_page: Callable[[str], str] | None = None,
) -> T:
    """`fn(client)` with an SDK client for `subject`; `on_page(url)` is the person at their client: it returns
    the ElicitResult action (without it, the client declares no elicitation)."""

    async def elicited(context: Any, params: Any) -> ElicitResult:
        assert params.mode == "url"
        return ElicitResult(action=on_page(params.url))

    async def run() -> T:
        async with (
            create_mcp_http_client(headers={"Authorization": f"Bearer {key}", "X-Toolgate-Subject": subject}) as http,
            Client(
                streamable_http_client(f"{url}/mcp", http_client=http),
                mode=mode,
                elicitation_callback=elicited if on_page is not None else None,
            ) as client,
        ):
            return await fn(client)

    return asyncio.run(run())


def leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


async def elicitation_required(client: Client, tool: str) -> Any:
    """A 2025-11-25 call that must answer -32042: the error's data, as the SDK hands it to the app."""
    with pytest.raises(MCPError) as raised:
        await client.call_tool(tool, {})
    error = leaf(raised.value)
    assert isinstance(error, MCPError)
    assert error.error.code == URL_ELICITATION_REQUIRED
    return error.error.data
