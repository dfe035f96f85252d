"""Client ID Metadata Documents: a client whose client_id is an https URL publishes its metadata there.

Fetching one makes Toolgate connect where a stranger said, so it goes through
the upstream servers' address guard (tools_app/upstream/netguard.py): the host
is resolved once, every address must pass the guard, and the connection goes
to the checked address. The answer is bounded in size and time and kept on
the client's row for METADATA_DOCUMENT_TTL (the cache); a document that
cannot be fetched or read leaves the client unknown.
"""

from __future__ import annotations

import asyncio
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import httpx2
from django.conf import settings

from policies_app.errors import AppError
from policies_app.models import SigninClient
from policies_app.signin import (
    client_id_well_formed,
    signin_client_any,
    signin_client_from_document,
    signin_client_is_stale,
)
from tools_app.upstream.netguard import (
    PinnedTransport,
    ResponseTooLarge,
    UpstreamAddressRefused,
    parse_endpoint,
    resolve_checked,
)

logger = logging.getLogger(__name__)

MAX_DOCUMENT_BYTES = 16 * 1024
FETCH_TIMEOUT_S = 5.0
MAX_URL_LENGTH = 500


class DocumentUnavailable(Exception):
    """The document could not be fetched or is not a client's metadata; the message is safe to log."""


def is_metadata_document_url(client_id: str) -> bool:
    """Whether a client_id names a metadata document: an https URL with a path (http only where loopback is allowed)."""
    if len(client_id) > MAX_URL_LENGTH or not client_id_well_formed(client_id):
        return False
    parts = urlsplit(client_id)
    schemes = ("https", "http") if settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS else ("https",)
    return parts.scheme in schemes and bool(parts.hostname) and parts.path not in ("", "/")


def metadata_document_client(client_id: str) -> SigninClient | None:
    """The client this document URL names: its cached row, refreshed from the document when stale."""
    row = signin_client_any(client_id=client_id)
    if row is not None and (row.revoked_at is not None or row.kind != SigninClient.Kind.METADATA_DOCUMENT):
        return None
    if row is not None and not signin_client_is_stale(row):
        return row
    try:
        document = fetch_metadata_document(client_id)
        return signin_client_from_document(client_id=client_id, document=document)
    except (DocumentUnavailable, AppError) as refused:
        logger.warning("client metadata document refused: %s", refused)
        return None


def fetch_metadata_document(url: str) -> dict:
    """GET the document through the address guard, at most MAX_DOCUMENT_BYTES within FETCH_TIMEOUT_S."""
    with ThreadPoolExecutor(max_workers=1) as pool:  # its own event loop, whatever the calling thread runs
        raw = pool.submit(asyncio.run, _fetch(url)).result()
    try:
        document = json.loads(raw)
    except ValueError:
        raise DocumentUnavailable("the metadata document is not JSON") from None
    if not isinstance(document, dict):
        raise DocumentUnavailable("the metadata document is not a JSON object")
    return document


async def _fetch(url: str) -> bytes:
    allow_private = settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS
    try:
        endpoint = parse_endpoint(url)
        address = await resolve_checked(endpoint, allow_private=allow_private)
    except UpstreamAddressRefused as refused:
        raise DocumentUnavailable(str(refused)) from None
    transport = PinnedTransport(address=address, hostname=endpoint.host, max_response_bytes=MAX_DOCUMENT_BYTES)
    try:
        async with httpx2.AsyncClient(transport=transport, timeout=FETCH_TIMEOUT_S, trust_env=False) as client:
            response = await asyncio.wait_for(
                client.get(url, headers={"Accept": "application/json"}), timeout=FETCH_TIMEOUT_S
            )
    except ResponseTooLarge:
        raise DocumentUnavailable("the metadata document is too large") from None
    except (httpx2.HTTPError, TimeoutError, OSError) as failed:
        raise DocumentUnavailable(f"the metadata document could not be fetched ({type(failed).__name__})") from None
    if response.status_code != 200:
        raise DocumentUnavailable(f"the metadata document answered HTTP {response.status_code}")
    return response.content
