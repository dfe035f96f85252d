"""Client ID Metadata Documents under load and abuse: against real, slow or hostile HTTP servers on loopback.

The token and revocation endpoints are open to anyone, so they never fetch; the
authorization step (a person is logged in) fetches within a short deadline, a
bounded number at a time per process and per asking address, and remembers a
refusal. A document is counted after decompression, and a document client
stops working when the settings that allowed its URL change.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from urllib.parse import urlencode

import pytest
from django.core.cache import cache
from django.utils import timezone

from signin.documents import (
    MAX_CONCURRENT_FETCHES,
    MAX_DOCUMENT_BYTES,
    MAX_FETCHES_PER_ADDRESS,
    DocumentsBusy,
    DocumentUnavailable,
    document_client_allowed,
    fetch_metadata_document,
)
from signin.models import SigninClient
from signin.services import signin_client_from_document
from tests.support.loopback import LoopbackServer, RecordedRequest, json_answer
from tests.support.signin import (
    REDIRECT,
    authorize_query,
    code_from,
    consent,
    exchange,
    pkce,
    refresh,
    signin_tenant,
    web,
)

pytestmark = pytest.mark.django_db

PATH = "/oauth/client.json"


@pytest.fixture(autouse=True)
def _clean(settings):
    settings.ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = True  # the documents live on loopback here
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def acme():
    return signin_tenant()


@pytest.fixture
def host() -> Iterator[LoopbackServer]:
    with LoopbackServer() as server:
        yield server


def document_for(url: str, **extra: object) -> dict:
    return {"client_id": url, "client_name": "Docs Client", "redirect_uris": [REDIRECT], **extra}


def publish(server: LoopbackServer, path: str = PATH) -> str:
    url = f"{server.url}{path}"
    server.route("GET", path, json=document_for(url))
    return url


def held(release: threading.Event, url_of: dict[str, str]):
    """A handler that answers each document only once `release` is set (a slow client web server)."""

    def answer(request: RecordedRequest):
        release.wait(10)
        return json_answer(200, document_for(url_of[request.path]))

    return answer


def wait_for_requests(server: LoopbackServer, count: int) -> None:
    deadline = time.monotonic() + 5
    while len(server.requests) < count:
        assert time.monotonic() < deadline, f"only {len(server.requests)} of {count} requests arrived"
        time.sleep(0.01)


def _timed(call):
    started = time.monotonic()
    answer = call()
    return answer, time.monotonic() - started


def authorize_page(user, client_id: str):
    browser = web()
    browser.force_login(user)
    _verifier, challenge = pkce()
    return browser.get(f"/oauth/authorize?{urlencode(authorize_query(client_id, challenge))}")


# --- the open endpoints never fetch ----------------------------------------------------------------------


def test_the_token_endpoint_answers_an_unknown_document_client_at_once_without_fetching(host):
    # given a client web server that would take 5 s to answer
    url = f"{host.url}{PATH}"
    host.handle("GET", PATH, lambda _request: (time.sleep(5), json_answer(200, document_for(url)))[1])
    calls = [
        lambda: exchange(url, "some-code", "v" * 43),
        lambda: refresh(url, "tgr_whatever"),
        lambda: web().post("/oauth/revoke", {"token": "tga_whatever", "client_id": url}),
    ]

    timed = [_timed(call) for call in calls]

    assert [(answer.status_code, answer.json()["error"]) for answer, _ in timed] == [(400, "invalid_client")] * 3
    assert max(seconds for _, seconds in timed) < 2.0  # a fetch would have waited the server's 5 s
    assert host.requests == []
    assert not SigninClient.objects.exists()


def test_a_known_document_client_refreshes_without_fetching_even_when_its_cache_is_stale(acme, host):
    _tenant, ada, _account, _key = acme
    url = publish(host)
    browser = web()
    browser.force_login(ada)
    verifier, challenge = pkce()
    tokens = exchange(url, code_from(consent(browser, url, challenge)), verifier).json()
    SigninClient.objects.update(metadata_fetched_at=timezone.now() - timedelta(days=2))

    answer = refresh(url, tokens["refresh_token"])

    assert answer.status_code == 200, answer.content
    assert [request.path for request in host.requests] == [PATH]  # the authorization step's fetch only


# --- the authorization step's fetches are bounded ----------------------------------------------------------


def test_fetches_are_bounded_per_process(host):
    release = threading.Event()
    urls = {f"/c{n}.json": f"{host.url}/c{n}.json" for n in range(MAX_CONCURRENT_FETCHES + 1)}
    for path in urls:
        host.handle("GET", path, held(release, urls))
    paths = list(urls)
    with ThreadPoolExecutor(MAX_CONCURRENT_FETCHES) as pool:
        running = [
            pool.submit(fetch_metadata_document, urls[path], source=f"192.0.2.{n}") for n, path in enumerate(paths[:-1])
        ]
        wait_for_requests(host, MAX_CONCURRENT_FETCHES)
        started = time.monotonic()

        with pytest.raises(DocumentsBusy, match="too many client metadata documents are being fetched"):
            fetch_metadata_document(urls[paths[-1]], source="192.0.2.200")

        assert time.monotonic() - started < 0.5
        assert len(host.requests) == MAX_CONCURRENT_FETCHES
        release.set()
        fetched = [future.result()[0]["client_id"] for future in running]
    assert fetched == [urls[path] for path in paths[:-1]]
    # the slots came back: the refused one goes through now (a busy refusal is not remembered)
    assert fetch_metadata_document(urls[paths[-1]], source="192.0.2.200")[0]["client_id"] == urls[paths[-1]]


def test_fetches_are_bounded_per_asking_address(host):
    release = threading.Event()
    urls = {f"/a{n}.json": f"{host.url}/a{n}.json" for n in range(MAX_FETCHES_PER_ADDRESS + 2)}
    for path in urls:
        host.handle("GET", path, held(release, urls))
    paths = list(urls)
    with ThreadPoolExecutor(MAX_FETCHES_PER_ADDRESS + 1) as pool:
        running = [
            pool.submit(fetch_metadata_document, urls[path], source="198.51.100.7")
            for path in paths[:MAX_FETCHES_PER_ADDRESS]
        ]
        wait_for_requests(host, MAX_FETCHES_PER_ADDRESS)

        with pytest.raises(DocumentsBusy, match="this address is already fetching"):
            fetch_metadata_document(urls[paths[-2]], source="198.51.100.7")
        other = pool.submit(fetch_metadata_document, urls[paths[-1]], source="198.51.100.8")
        wait_for_requests(host, MAX_FETCHES_PER_ADDRESS + 1)

        release.set()
        assert other.result()[0]["client_id"] == urls[paths[-1]]
        assert all(future.result()[0]["client_id"] for future in running)
    assert [request.path for request in host.requests if request.path == paths[-2]] == []


def test_a_slow_document_is_given_up_at_the_deadline(acme, host):
    # given a client web server that answers after 4 s (a per-read timeout of 5 s would wait for it)
    _tenant, ada, _account, _key = acme
    url = f"{host.url}{PATH}"
    host.handle("GET", PATH, lambda _request: (time.sleep(4.0), json_answer(200, document_for(url)))[1])
    started = time.monotonic()

    page = authorize_page(ada, url)

    assert time.monotonic() - started < 3.0
    assert page.status_code == 400
    assert "did not arrive within 2 s" in page.content.decode()
    assert not SigninClient.objects.exists()


def test_a_refused_document_is_remembered_and_not_fetched_again(acme, host):
    _tenant, ada, _account, _key = acme
    url = f"{host.url}{PATH}"  # no route: the client's server answers 404

    first = authorize_page(ada, url)
    second = authorize_page(ada, url)

    assert (first.status_code, second.status_code) == (400, 400)
    assert "the metadata document answered HTTP 404" in first.content.decode()
    assert "the metadata document answered HTTP 404 (refused less than 5 minutes ago)" in second.content.decode()
    assert [request.path for request in host.requests] == [PATH]
    with pytest.raises(DocumentUnavailable, match="refused less than"):
        fetch_metadata_document(url, source="192.0.2.1")
    assert len(host.requests) == 1


def test_a_document_that_breaks_the_rules_is_remembered_too(acme, host):
    _tenant, ada, _account, _key = acme
    url = f"{host.url}{PATH}"
    host.route("GET", PATH, json=document_for("https://someone-else.example/client.json"))

    authorize_page(ada, url)
    page = authorize_page(ada, url)

    assert "not its own URL (refused less than 5 minutes ago)" in page.content.decode()
    assert len(host.requests) == 1


# --- decoded bytes --------------------------------------------------------------------------------------


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_a_compressed_document_is_counted_after_decoding(acme, host, coding):
    _tenant, ada, _account, _key = acme
    url = f"{host.url}{PATH}"
    plain = json.dumps(document_for(url, padding=" " * (1024 * 1024))).encode()
    body = gzip.compress(plain) if coding == "gzip" else zlib.compress(plain, 9)
    assert len(body) < MAX_DOCUMENT_BYTES // 4
    host.route("GET", PATH, body=body, headers={"Content-Type": "application/json", "Content-Encoding": coding})

    page = authorize_page(ada, url)

    assert page.status_code == 400
    assert "the metadata document is too large" in page.content.decode()
    assert not SigninClient.objects.exists()
    assert host.requests[0].headers["accept-encoding"] == "gzip, deflate"


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_a_small_compressed_document_is_read(acme, host, coding):
    _tenant, ada, _account, _key = acme
    url = f"{host.url}{PATH}"
    plain = json.dumps(document_for(url)).encode()
    body = gzip.compress(plain) if coding == "gzip" else zlib.compress(plain)
    host.route("GET", PATH, body=body, headers={"Content-Type": "application/json", "Content-Encoding": coding})

    page = authorize_page(ada, url)

    assert page.status_code == 200, page.content.decode()
    assert SigninClient.objects.get().client_name == "Docs Client"


def test_a_document_in_an_encoding_not_asked_for_is_refused(acme, host):
    _tenant, ada, _account, _key = acme
    url = f"{host.url}{PATH}"
    host.route("GET", PATH, body=b"\x00" * 64, headers={"Content-Type": "application/json", "Content-Encoding": "br"})

    page = authorize_page(ada, url)

    assert page.status_code == 400
    assert "a content encoding Toolgate did not ask for" in page.content.decode()
    assert not SigninClient.objects.exists()


# --- a stored client does not outlive the settings that allowed it ----------------------------------------


def test_a_loopback_document_client_stops_working_when_private_networks_are_turned_off(acme, host, settings):
    # given a client signed in while loopback documents were allowed
    _tenant, ada, _account, _key = acme
    url = publish(host)
    browser = web()
    browser.force_login(ada)
    verifier, challenge = pkce()
    tokens = exchange(url, code_from(consent(browser, url, challenge)), verifier).json()
    assert SigninClient.objects.get().registered_from == "127.0.0.1"

    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = False
    refreshed = refresh(url, tokens["refresh_token"])
    page = authorize_page(ada, url)

    assert (refreshed.status_code, refreshed.json()["error"]) == (400, "invalid_client")
    assert page.status_code == 400
    assert "Location" not in page
    assert len(host.requests) == 1  # nothing fetched once it was no longer allowed

    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = True  # and it works again when allowed again
    assert refresh(url, tokens["refresh_token"]).status_code == 200


@pytest.mark.parametrize(
    ("client_id", "fetched_from", "allowed_without_private"),
    [
        ("https://client.example/oauth/client.json", "93.184.215.14", True),
        ("https://client.example/oauth/client.json", "10.0.0.5", False),  # a public name on a private address
        ("https://127.0.0.1:8443/oauth/client.json", "127.0.0.1", False),
        ("https://[::1]:8443/oauth/client.json", "::1", False),
        ("https://localhost:8443/oauth/client.json", "127.0.0.1", False),
        ("https://app.localhost/oauth/client.json", "93.184.215.14", False),
        ("http://client.example/oauth/client.json", "93.184.215.14", False),
    ],
)
def test_a_stored_document_client_is_judged_again_on_every_use(
    settings, client_id, fetched_from, allowed_without_private
):
    row = signin_client_from_document(client_id=client_id, document=document_for(client_id), fetched_from=fetched_from)

    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = False
    assert document_client_allowed(row) is allowed_without_private
    answer = refresh(client_id, "tgr_whatever")
    assert answer.json()["error"] == ("invalid_grant" if allowed_without_private else "invalid_client")

    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = True
    assert document_client_allowed(row) is True
