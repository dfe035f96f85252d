"""Client ID Metadata Documents: a client whose client_id is an https URL publishes its metadata there.

Fetching one makes Toolgate connect where a stranger said, so it goes through
the outbound URL guard (core/netguard.py): the host
is resolved once, every address must pass the guard, and the connection goes
to the checked address. The answer is bounded in decoded size and in total
time and kept on the client's row for METADATA_DOCUMENT_TTL (the cache); a
document that cannot be fetched or read leaves the client unknown.

A fetch holds a web worker while it waits, so only the authorization step
fetches (a person is logged in there), never the token or revocation endpoint
(anyone may call those): they know a document client only from its stored
row. Fetches are bounded per process and per requesting address, and a
refused document is remembered for REFUSAL_TTL_S so that asking again costs
nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import httpx2
from django.conf import settings
from django.core.cache import cache

from core.errors import AppError
from core.netguard import (
    PinnedTransport,
    ResponseTooLarge,
    UnaskedContentEncoding,
    UpstreamAddressRefused,
    is_private_address,
    literal_address,
    parse_endpoint,
    resolve_checked,
)
from signin.models import SigninClient
from signin.services import (
    client_id_well_formed,
    signin_client_any,
    signin_client_from_document,
    signin_client_is_stale,
)

logger = logging.getLogger(__name__)

MAX_DOCUMENT_BYTES = 16 * 1024  # decoded
FETCH_DEADLINE_S = 2.0  # resolving, connecting and reading, all of it
MAX_URL_LENGTH = 500
MAX_CONCURRENT_FETCHES = 4  # per process
MAX_FETCHES_PER_ADDRESS = 2  # at once, per address asking, across processes (the shared cache)
REFUSAL_TTL_S = 300
LOOPBACK_NAMES = ("localhost", "localhost.localdomain")

_fetch_slots = threading.BoundedSemaphore(MAX_CONCURRENT_FETCHES)


class DocumentUnavailable(Exception):
    """The document could not be fetched or is not a client's metadata; the message is safe to show."""


class DocumentsBusy(DocumentUnavailable):
    """Too many documents are being fetched right now: worth retrying in a moment, so not remembered."""


def is_metadata_document_url(client_id: str) -> bool:
    """Whether a client_id names a metadata document: an https URL with a path (http only where loopback is allowed)."""
    if len(client_id) > MAX_URL_LENGTH or not client_id_well_formed(client_id):
        return False
    parts = urlsplit(client_id)
    schemes = ("https", "http") if settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS else ("https",)
    return parts.scheme in schemes and bool(parts.hostname) and parts.path not in ("", "/")


def document_client_allowed(row: SigninClient) -> bool:
    """Whether a stored client may still be used under today's settings (registered clients always may).

    A document client accepted while private networks were allowed (an http://
    URL, a loopback or private host, a document served from a private address)
    stops working once they are not: its URL and the address its document came
    from are judged again on every use, without connecting anywhere.
    """
    if row.kind != SigninClient.Kind.METADATA_DOCUMENT:
        return True
    if settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS:
        return is_metadata_document_url(row.client_id)
    if not is_metadata_document_url(row.client_id):
        return False
    host = (urlsplit(row.client_id).hostname or "").rstrip(".").lower()
    literal = literal_address(host)
    if literal is not None and is_private_address(literal):
        return False
    if host in LOOPBACK_NAMES or host.endswith(".localhost"):
        return False
    return row.registered_from is None or not is_private_address(row.registered_from)


def metadata_document_load(*, client_id: str, source: str | None) -> SigninClient | None:
    """The authorization step's client for a document URL: its cached row, fetched when missing or stale.

    None when no document client may have this id (revoked, or another kind of
    client). DocumentUnavailable says why the document cannot be used.
    """
    row = signin_client_any(client_id=client_id)
    if row is not None and (row.revoked_at is not None or row.kind != SigninClient.Kind.METADATA_DOCUMENT):
        return None
    if row is not None and not signin_client_is_stale(row) and document_client_allowed(row):
        return row
    document, address = fetch_metadata_document(client_id, source=source)
    try:
        return signin_client_from_document(client_id=client_id, document=document, fetched_from=address)
    except AppError as refused:
        _remember_refusal(client_id, refused.safe_message)
        raise DocumentUnavailable(refused.safe_message) from None


def fetch_metadata_document(url: str, *, source: str | None) -> tuple[dict, str]:
    """GET the document through the address guard: its JSON object and the address it came from.

    At most MAX_DOCUMENT_BYTES (decoded) within FETCH_DEADLINE_S, one of at
    most MAX_CONCURRENT_FETCHES in this process and MAX_FETCHES_PER_ADDRESS for
    `source` (the address asking). A URL refused within REFUSAL_TTL_S is
    refused again without connecting.
    """
    remembered = cache.get(_refusal_key(url))
    if remembered is not None:
        raise DocumentUnavailable(f"{remembered} (refused less than {REFUSAL_TTL_S // 60} minutes ago)")
    if not _fetch_slots.acquire(blocking=False):
        raise DocumentsBusy("too many client metadata documents are being fetched; try again in a few seconds")
    try:
        if not _address_slot_claim(source):
            raise DocumentsBusy("this address is already fetching client metadata documents; try again shortly")
        try:
            raw, address = _fetch_in_own_loop(url)
        finally:
            _address_slot_release(source)
    except DocumentsBusy:
        raise
    except DocumentUnavailable as refused:
        _remember_refusal(url, str(refused))
        raise
    finally:
        _fetch_slots.release()
    try:
        document = json.loads(raw)
    except ValueError:
        document = None
    if not isinstance(document, dict):
        _remember_refusal(url, "the metadata document is not a JSON object")
        raise DocumentUnavailable("the metadata document is not a JSON object")
    return document, address


def _fetch_in_own_loop(url: str) -> tuple[bytes, str]:
    with ThreadPoolExecutor(max_workers=1) as pool:  # its own event loop, whatever the calling thread runs
        return pool.submit(asyncio.run, _fetch(url)).result()


async def _fetch(url: str) -> tuple[bytes, str]:
    try:
        async with asyncio.timeout(FETCH_DEADLINE_S):
            return await _fetch_unbounded(url)
    except TimeoutError:
        raise DocumentUnavailable(f"the metadata document did not arrive within {FETCH_DEADLINE_S:g} s") from None


async def _fetch_unbounded(url: str) -> tuple[bytes, str]:
    try:
        endpoint = parse_endpoint(url)
        address = await resolve_checked(endpoint, allow_private=settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS)
    except UpstreamAddressRefused as refused:
        raise DocumentUnavailable(str(refused)) from None
    transport = PinnedTransport(address=address, hostname=endpoint.host, max_response_bytes=MAX_DOCUMENT_BYTES)
    try:
        async with httpx2.AsyncClient(transport=transport, timeout=FETCH_DEADLINE_S, trust_env=False) as client:
            response = await client.get(url, headers={"Accept": "application/json"})
    except ResponseTooLarge:
        raise DocumentUnavailable("the metadata document is too large") from None
    except UnaskedContentEncoding as refused:
        raise DocumentUnavailable(f"the metadata document could not be read: {refused}") from None
    except (httpx2.HTTPError, OSError) as failed:
        raise DocumentUnavailable(f"the metadata document could not be fetched ({type(failed).__name__})") from None
    if response.status_code != 200:
        raise DocumentUnavailable(f"the metadata document answered HTTP {response.status_code}")
    return response.content, address


def _refusal_key(url: str) -> str:
    return f"toolgate:signin-document-refused:{hashlib.sha256(url.encode()).hexdigest()}"


def _remember_refusal(url: str, reason: str) -> None:
    logger.warning("client metadata document refused: %s", reason)
    cache.set(_refusal_key(url), reason, timeout=REFUSAL_TTL_S)


def _address_key(source: str | None) -> str:
    return f"toolgate:signin-document-fetching:{source or 'unknown'}"


def _address_slot_claim(source: str | None) -> bool:
    """One of MAX_FETCHES_PER_ADDRESS slots for `source`; the counter expires by itself if a process dies."""
    key = _address_key(source)
    cache.add(key, 0, timeout=int(FETCH_DEADLINE_S * 5))
    try:
        taken = cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.add(key, 1, timeout=int(FETCH_DEADLINE_S * 5))
        taken = 1
    if taken > MAX_FETCHES_PER_ADDRESS:
        _address_slot_release(source)
        return False
    return True


def _address_slot_release(source: str | None) -> None:
    with contextlib.suppress(ValueError):  # already expired
        cache.decr(_address_key(source))
