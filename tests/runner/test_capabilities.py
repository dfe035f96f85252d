"""HttpCapability against real HTTP servers on loopback, and the auth capabilities' secrecy.

Two loopback servers on different ports are two origins: server A stands in
for the configured upstream, server B for whatever a path trick or a redirect
would like to reach. No database is needed.
"""

from __future__ import annotations

import asyncio
import gzip
import threading
import time

import httpx
import pytest

from core.netguard import parse_endpoint, resolve_checked_now
from runner.capabilities import DEFAULT_MAX_RESPONSE_BYTES, MAX_REDIRECTS, BasicAuth, BearerAuth, HttpCapability
from runner.errors import CapabilityError
from tests.support.loopback import LoopbackServer, RecordedRequest, json_answer, redirect_answer

TOKEN = "canary-token-5f1e0c"  # a secret that must reach only the configured origin
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def at_port(template: str, server: LoopbackServer) -> str:
    """Templates name the other server's port as {port}; the rest of the text stays literal."""
    return template.replace("{port}", str(server.port))


def echo(request: RecordedRequest) -> tuple[int, dict[str, str], bytes]:
    return json_answer(200, {"method": request.method, "path": request.path})


# --- paths stay on the configured origin -----------------------------------------------


@pytest.mark.parametrize("path", ["/user", "user"])
def test_relative_path_reaches_the_base_url(upstream: LoopbackServer, path: str) -> None:
    upstream.route("GET", "/user", json={"login": "octocat"})
    http = HttpCapability(upstream.url)

    response = asyncio.run(http.get(path, headers=AUTH))

    assert response.status_code == 200
    assert response.json() == {"login": "octocat"}
    assert [(r.method, r.target) for r in upstream.requests] == [("GET", "/user")]
    assert upstream.requests[0].headers["authorization"] == f"Bearer {TOKEN}"


@pytest.mark.parametrize("base_suffix", ["/api/v3/", "/api/v3"])
@pytest.mark.parametrize("path", ["/user", "user"])
def test_relative_path_keeps_the_base_url_prefix(upstream: LoopbackServer, base_suffix: str, path: str) -> None:
    upstream.route("GET", "/api/v3/user", json={"login": "octocat"})
    http = HttpCapability(upstream.url + base_suffix)

    response = asyncio.run(http.get(path))

    assert response.status_code == 200
    assert [r.target for r in upstream.requests] == ["/api/v3/user"]


def test_query_params_are_sent(upstream: LoopbackServer) -> None:
    upstream.handle("GET", "/search", echo)

    asyncio.run(HttpCapability(upstream.url).get("/search", params={"q": "a b&c"}))

    assert upstream.requests[0].query_params() == {"q": ["a b&c"]}


@pytest.mark.parametrize(
    "path_template",
    [
        "http://127.0.0.1:{port}/x",
        "//127.0.0.1:{port}/x",
        "///127.0.0.1:{port}/x",
        "http:127.0.0.1:{port}/x",
        "HTTP://127.0.0.1:{port}/x",
        "http://other/x",
        "//evil.example/x",
        "file:///etc/passwd",
        "javascript:alert(1)",
    ],
    ids=["absolute", "scheme-relative", "triple-slash", "no-slashes", "upper-scheme", "other", "evil", "file", "js"],
)
def test_absolute_and_scheme_relative_urls_are_refused(upstream, elsewhere, path_template) -> None:
    http = HttpCapability(upstream.url)

    with pytest.raises(CapabilityError, match="only paths relative to the configured base URL are allowed"):
        asyncio.run(http.get(at_port(path_template, elsewhere), headers=AUTH))

    assert upstream.requests == []
    assert elsewhere.requests == []


def test_absolute_url_to_the_configured_origin_itself_is_refused(upstream: LoopbackServer) -> None:
    # Tools name paths, never URLs: even the right origin spelled absolutely is refused.
    http = HttpCapability(upstream.url)

    with pytest.raises(CapabilityError):
        asyncio.run(http.get(f"{upstream.url}/user"))

    assert upstream.requests == []


@pytest.mark.parametrize(
    "path_template",
    [
        "\t//127.0.0.1:{port}/x",  # urljoin drops tabs and newlines...
        "/\n//127.0.0.1:{port}/x",
        " //127.0.0.1:{port}/x",  # ...and leading blanks
    ],
    ids=["tab", "newline", "space"],
)
def test_paths_that_urljoin_turns_into_another_origin_are_refused(upstream, elsewhere, path_template) -> None:
    http = HttpCapability(upstream.url + "/api/v3/")

    with pytest.raises(CapabilityError, match="request left the configured origin"):
        asyncio.run(http.get(at_port(path_template, elsewhere), headers=AUTH))

    assert upstream.requests == []
    assert elsewhere.requests == []


def test_a_path_with_an_invalid_port_is_refused_as_capability_error(upstream: LoopbackServer) -> None:
    # Fixed bug: this used to escape as a bare ValueError from urllib.
    http = HttpCapability(upstream.url)

    with pytest.raises(CapabilityError, match="path does not form a valid URL"):
        asyncio.run(http.get(" //127.0.0.1:99999/x"))

    assert upstream.requests == []


@pytest.mark.parametrize(
    ("path_template", "target_template"),
    [
        ("/../../x", "/x"),
        ("../../../../x", "/x"),
        ("/..//127.0.0.1:{port}/x", "/api/127.0.0.1:{port}/x"),
        ("/%2e%2e/%2e%2e/x", "/api/v3/%2e%2e/%2e%2e/x"),
        ("/..%2f..%2fx", "/api/v3/..%2f..%2fx"),
        ("%2F%2F127.0.0.1:{port}/x", "/api/v3/%2F%2F127.0.0.1:{port}/x"),
        ("@127.0.0.1:{port}/x", "/api/v3/@127.0.0.1:{port}/x"),
        ("/\\\\127.0.0.1:{port}/x", "/api/v3/\\\\127.0.0.1:{port}/x"),
        ("?next=//127.0.0.1:{port}/x", "/api/v3/?next=//127.0.0.1:{port}/x"),
    ],
    ids=["dotdot", "many-dotdot", "dotdot-double-slash", "encoded-dots", "encoded-slash", "encoded-authority",
         "userinfo", "backslashes", "query"],
)  # fmt: skip
def test_dot_segments_and_encoded_tricks_stay_on_the_configured_server(
    upstream, elsewhere, path_template, target_template
) -> None:
    http = HttpCapability(upstream.url + "/api/v3/")

    response = asyncio.run(http.get(at_port(path_template, elsewhere), headers=AUTH))

    assert response.status_code == 404  # the loopback's answer for unknown routes: it was reached
    assert [r.target for r in upstream.requests] == [at_port(target_template, elsewhere)]
    assert elsewhere.requests == []


# --- redirects ---------------------------------------------------------------------------


def test_same_origin_redirect_keeps_authorization(upstream: LoopbackServer) -> None:
    upstream.route("GET", "/old", status=302, headers={"Location": "/new"})
    upstream.route("GET", "/new", json={"ok": True})

    response = asyncio.run(HttpCapability(upstream.url).get("/old", headers=AUTH))

    assert response.status_code == 200
    assert [r.path for r in upstream.requests] == ["/old", "/new"]
    assert [r.headers.get("authorization") for r in upstream.requests] == [f"Bearer {TOKEN}"] * 2


def test_cross_origin_redirect_drops_authorization(upstream: LoopbackServer, elsewhere: LoopbackServer) -> None:
    upstream.route("GET", "/moved", status=302, headers={"Location": f"{elsewhere.url}/landing"})
    elsewhere.route("GET", "/landing", json={"here": True})

    response = asyncio.run(HttpCapability(upstream.url).get("/moved", headers={**AUTH, "X-Trace": "t-1"}))

    assert response.status_code == 200
    assert response.json() == {"here": True}
    assert upstream.requests[0].headers["authorization"] == f"Bearer {TOKEN}"
    [landed] = elsewhere.requests
    assert landed.path == "/landing"
    assert "authorization" not in landed.headers
    assert landed.headers["x-trace"] == "t-1"  # only the credential is dropped
    assert TOKEN not in repr(landed)


def test_same_port_other_host_name_is_another_origin(upstream: LoopbackServer) -> None:
    # "localhost" and "127.0.0.1" reach the same socket but are different origins.
    upstream.route("GET", "/moved", status=302, headers={"Location": f"http://localhost:{upstream.port}/landing"})
    upstream.route("GET", "/landing", json={})

    asyncio.run(HttpCapability(upstream.url).get("/moved", headers=AUTH))

    assert [r.path for r in upstream.requests] == ["/moved", "/landing"]
    assert "authorization" not in upstream.requests[1].headers


def _address_guard(*, allow_private: bool):
    """The address rule the composition root binds (config/runtime.py), with the private-networks switch given."""

    def guard(url: str) -> None:
        resolve_checked_now(parse_endpoint(url), allow_private=allow_private)

    return guard


@pytest.mark.parametrize("blocking", [False, True])
@pytest.mark.parametrize(
    "location",
    [
        "http://169.254.169.254/latest/meta-data/",  # cloud metadata: decided, never connected to
        "http://10.0.0.1/internal",
        "http://[::1]:{port}/landing",
        "http://localhost:{port}/landing",  # a name: resolved and judged by its addresses
    ],
)
def test_a_cross_origin_redirect_to_an_address_the_guard_refuses_is_not_followed(
    upstream: LoopbackServer, elsewhere: LoopbackServer, location: str, blocking: bool
) -> None:
    upstream.route("GET", "/moved", status=302, headers={"Location": at_port(location, elsewhere)})
    http = HttpCapability(upstream.url, redirect_guard=_address_guard(allow_private=False))

    def follow() -> object:
        if blocking:
            return http.request_blocking("GET", "/moved", headers=AUTH, deadline=time.monotonic() + 10)
        return asyncio.run(http.get("/moved", headers=AUTH))

    started = time.monotonic()
    with pytest.raises(CapabilityError, match=r"^redirect to another origin refused: ") as refused:
        follow()

    assert time.monotonic() - started < 5  # refused when decided: no connect to wait for
    assert [r.path for r in upstream.requests] == ["/moved"]
    assert elsewhere.requests == []
    assert "169.254" not in str(refused.value)  # the rule is named, not the address


def test_a_cross_origin_redirect_the_guard_accepts_is_followed_without_authorization(upstream, elsewhere) -> None:
    upstream.route("GET", "/moved", status=302, headers={"Location": f"{elsewhere.url}/landing"})
    elsewhere.route("GET", "/landing", json={"here": True})
    http = HttpCapability(upstream.url, redirect_guard=_address_guard(allow_private=True))

    response = asyncio.run(http.get("/moved", headers=AUTH))

    assert response.json() == {"here": True}
    assert "authorization" not in elsewhere.requests[0].headers


def test_a_same_origin_redirect_is_not_put_to_the_guard(upstream: LoopbackServer) -> None:
    upstream.route("GET", "/old", status=301, headers={"Location": "/new"})
    upstream.route("GET", "/new", json={})
    http = HttpCapability(upstream.url, redirect_guard=_address_guard(allow_private=False))

    assert asyncio.run(http.get("/old", headers=AUTH)).status_code == 200  # the operator chose this origin


def test_authorization_dropped_once_stays_dropped_when_redirected_back(upstream, elsewhere) -> None:
    upstream.route("GET", "/start", status=302, headers={"Location": f"{elsewhere.url}/bounce"})
    elsewhere.route("GET", "/bounce", status=302, headers={"Location": f"{upstream.url}/end"})
    upstream.route("GET", "/end", json={})

    response = asyncio.run(HttpCapability(upstream.url).get("/start", headers=AUTH))

    assert response.status_code == 200
    assert [r.path for r in upstream.requests] == ["/start", "/end"]
    assert "authorization" not in elsewhere.requests[0].headers
    assert "authorization" not in upstream.requests[1].headers


@pytest.mark.parametrize("status", [301, 302, 303])
def test_redirect_turns_post_into_get_without_body(upstream: LoopbackServer, status: int) -> None:
    upstream.route("POST", "/submit", status=status, headers={"Location": "/result"})
    upstream.handle("GET", "/result", echo)

    response = asyncio.run(HttpCapability(upstream.url).post("/submit", json_body={"title": "x"}, headers=AUTH))

    assert response.json() == {"method": "GET", "path": "/result"}
    first, second = upstream.requests
    assert (first.method, first.json()) == ("POST", {"title": "x"})
    assert (second.method, second.body) == ("GET", b"")
    assert "content-type" not in second.headers
    assert "content-length" not in second.headers


@pytest.mark.parametrize("status", [307, 308])
def test_redirect_307_308_repeat_the_post_with_its_body(upstream: LoopbackServer, status: int) -> None:
    upstream.route("POST", "/submit", status=status, headers={"Location": "/again"})
    upstream.route("POST", "/again", status=201, json={"number": 1})

    response = asyncio.run(HttpCapability(upstream.url).post("/submit", json_body={"title": "x"}, headers=AUTH))

    assert response.status_code == 201
    second = upstream.requests[1]
    assert (second.method, second.path, second.json()) == ("POST", "/again", {"title": "x"})
    assert second.headers["authorization"] == f"Bearer {TOKEN}"


def test_303_after_get_stays_get(upstream: LoopbackServer) -> None:
    upstream.route("GET", "/a", status=303, headers={"Location": "/b"})
    upstream.handle("GET", "/b", echo)

    response = asyncio.run(HttpCapability(upstream.url).get("/a"))

    assert response.json() == {"method": "GET", "path": "/b"}


def test_query_params_are_not_carried_to_the_redirect_target(upstream: LoopbackServer) -> None:
    upstream.route("GET", "/a", status=302, headers={"Location": "/b?page=2"})
    upstream.handle("GET", "/b", echo)

    asyncio.run(HttpCapability(upstream.url).get("/a", params={"page": "1"}))

    assert [r.target for r in upstream.requests] == ["/a?page=1", "/b?page=2"]


def test_exactly_max_redirects_are_followed(upstream: LoopbackServer) -> None:
    for hop in range(MAX_REDIRECTS):
        upstream.route("GET", f"/hop{hop}", status=302, headers={"Location": f"/hop{hop + 1}"})
    upstream.route("GET", f"/hop{MAX_REDIRECTS}", json={"arrived": True})

    response = asyncio.run(HttpCapability(upstream.url).get("/hop0"))

    assert response.json() == {"arrived": True}
    assert len(upstream.requests) == MAX_REDIRECTS + 1


def test_more_than_max_redirects_fail(upstream: LoopbackServer) -> None:
    upstream.route("GET", "/loop", status=302, headers={"Location": "/loop"})

    with pytest.raises(CapabilityError, match="too many redirects"):
        asyncio.run(HttpCapability(upstream.url).get("/loop"))

    assert MAX_REDIRECTS == 5
    assert len(upstream.requests) == MAX_REDIRECTS + 1  # the first request and five redirects, no seventh


@pytest.mark.parametrize(
    ("location", "keep_alive", "message"),
    [
        ("ftp://127.0.0.1/x", True, "redirect to a non-HTTP URL"),
        ("file:///etc/passwd", True, "redirect to a non-HTTP URL"),
        ("javascript:alert(1)", True, "redirect to a non-HTTP URL"),
        ("data:text/plain,hi", True, "redirect to a non-HTTP URL"),
        # through httpx2's own client (a proxy, tracing) the same plan follows redirects: the same refusals
        ("ftp://127.0.0.1/x", False, "redirect to a non-HTTP URL"),
        ("javascript:alert(1)", False, "redirect to a non-HTTP URL"),
        ("data:text/plain,hi", False, "redirect to a non-HTTP URL"),
    ],
)
def test_redirect_to_a_non_http_scheme_fails(
    upstream: LoopbackServer, location: str, keep_alive: bool, message: str
) -> None:
    upstream.route("GET", "/r", status=302, headers={"Location": location})

    with pytest.raises(CapabilityError, match=f"^{message}$"):
        asyncio.run(HttpCapability(upstream.url, keep_alive_transport=keep_alive).get("/r", headers=AUTH))

    assert [r.path for r in upstream.requests] == ["/r"]


def test_redirect_to_an_unparseable_url_fails_as_capability_error(upstream: LoopbackServer) -> None:
    # Fixed bug: a port out of range in Location escaped as a bare ValueError.
    upstream.route("GET", "/r", status=302, headers={"Location": "http://127.0.0.1:99999/x"})

    with pytest.raises(CapabilityError, match="redirect to an invalid URL"):
        asyncio.run(HttpCapability(upstream.url).get("/r"))


def test_redirect_status_without_location_is_returned_as_is(upstream: LoopbackServer) -> None:
    upstream.route("GET", "/r", status=302, body=b"no location")

    response = asyncio.run(HttpCapability(upstream.url).get("/r"))

    assert (response.status_code, response.content) == (302, b"no location")
    assert len(upstream.requests) == 1


# --- bounded responses and time ---------------------------------------------------------


def test_response_at_the_size_limit_is_read(upstream: LoopbackServer) -> None:
    upstream.route("GET", "/blob", body=b"x" * 1000)

    response = asyncio.run(HttpCapability(upstream.url, max_response_bytes=1000).get("/blob"))

    assert response.content == b"x" * 1000


def test_response_over_the_size_limit_fails(upstream: LoopbackServer) -> None:
    upstream.route("GET", "/blob", body=b"x" * 1001)

    with pytest.raises(CapabilityError, match="upstream response too large"):
        asyncio.run(HttpCapability(upstream.url, max_response_bytes=1000).get("/blob"))


def test_huge_response_fails_at_the_default_limit(upstream: LoopbackServer) -> None:
    upstream.handle("GET", "/huge", lambda _request: (200, {}, b"x" * (DEFAULT_MAX_RESPONSE_BYTES + 1)))

    with pytest.raises(CapabilityError, match="upstream response too large"):
        asyncio.run(HttpCapability(upstream.url).get("/huge"))


def test_size_limit_counts_decompressed_bytes(upstream: LoopbackServer) -> None:
    bomb = gzip.compress(b"\0" * 2_000_000)
    assert len(bomb) < 10_000
    upstream.route("GET", "/bomb", body=bomb, headers={"Content-Encoding": "gzip"})

    with pytest.raises(CapabilityError, match="upstream response too large"):
        asyncio.run(HttpCapability(upstream.url, max_response_bytes=100_000).get("/bomb"))


def test_slow_upstream_times_out_quickly(upstream: LoopbackServer) -> None:
    release = threading.Event()

    def stall(_request: RecordedRequest) -> tuple[int, dict[str, str], bytes]:
        release.wait(10)
        return json_answer(200, {})

    upstream.handle("GET", "/slow", stall)
    http = HttpCapability(upstream.url, timeout=httpx.Timeout(0.2))

    started = time.monotonic()
    try:
        with pytest.raises(CapabilityError, match=r"^upstream timed out$"):
            asyncio.run(http.get("/slow"))
        elapsed = time.monotonic() - started
    finally:
        release.set()

    assert elapsed < 2.0
    assert [r.path for r in upstream.requests] == ["/slow"]


def test_unreachable_upstream_fails_as_capability_error() -> None:
    with LoopbackServer() as gone:
        url = gone.url
    http = HttpCapability(url, timeout=httpx.Timeout(1.0))

    with pytest.raises(CapabilityError, match=r"^upstream request failed \(ConnectError\)$"):
        asyncio.run(http.get("/x"))


def test_non_json_body_fails_as_capability_error(upstream: LoopbackServer) -> None:
    upstream.route("GET", "/html", body=b"<html>secret upstream page</html>")
    response = asyncio.run(HttpCapability(upstream.url).get("/html"))

    with pytest.raises(CapabilityError) as caught:
        response.json()

    assert str(caught.value) == "upstream answered with a body that is not JSON"


def test_one_capability_serves_successive_event_loops(upstream: LoopbackServer) -> None:
    upstream.route("GET", "/ping", json={})
    http = HttpCapability(upstream.url)

    statuses = [asyncio.run(http.get("/ping")).status_code for _ in range(2)]

    assert statuses == [200, 200]
    assert len(upstream.requests) == 2


@pytest.mark.parametrize("keep_alive", [True, False])
def test_a_cookie_an_answer_sets_is_not_sent_with_the_next_call(upstream: LoopbackServer, keep_alive: bool) -> None:
    # one capability serves every tenant's connections: what one call's answer sets stays there
    upstream.route("GET", "/login", json={}, headers={"Set-Cookie": "session=tenant-a; Path=/"})
    upstream.route("GET", "/user", json={})
    http = HttpCapability(upstream.url, keep_alive_transport=keep_alive)

    async def two_calls() -> None:
        await http.get("/login", headers=AUTH)
        await http.get("/user")

    asyncio.run(two_calls())

    assert [r.path for r in upstream.requests] == ["/login", "/user"]
    assert "cookie" not in upstream.requests[1].headers


# --- construction and credentials --------------------------------------------------------


@pytest.mark.parametrize(
    "base_url",
    ["ftp://example.com/", "file:///etc/passwd", "example.com", "/api/v3", "", "http://", "https:///path"],
)
def test_constructor_rejects_non_http_base_urls(base_url: str) -> None:
    with pytest.raises(ValueError, match="base URL must be absolute http"):
        HttpCapability(base_url)


def test_base_url_is_normalised_with_one_trailing_slash() -> None:
    assert HttpCapability("https://api.github.com").base_url == "https://api.github.com/"
    assert HttpCapability("https://ghe.example/api/v3///").base_url == "https://ghe.example/api/v3/"


def test_bearer_auth_headers_and_secrecy() -> None:
    auth = BearerAuth(TOKEN)

    assert auth.headers() == {"Authorization": f"Bearer {TOKEN}"}
    assert auth.access_token() == TOKEN
    for shown in (repr(auth), str(auth), f"{auth}", f"{auth!r}", repr([auth]), repr({"auth": auth})):
        assert TOKEN not in shown
    assert repr(auth) == "BearerAuth(<redacted>)"
    assert not hasattr(auth, "__dict__")


def test_basic_auth_headers_and_secrecy() -> None:
    auth = BasicAuth("octocat", TOKEN)

    assert auth.headers() == {"Authorization": "Basic b2N0b2NhdDpjYW5hcnktdG9rZW4tNWYxZTBj"}
    assert auth.access_token() == TOKEN
    for shown in (repr(auth), str(auth), f"{auth}", repr([auth])):
        assert TOKEN not in shown
    assert repr(auth) == "BasicAuth(<redacted>)"
    assert not hasattr(auth, "__dict__")


def test_basic_auth_reaches_the_server_as_sent(upstream: LoopbackServer) -> None:
    upstream.route("GET", "/user", json={})

    asyncio.run(HttpCapability(upstream.url).get("/user", headers=BasicAuth("octocat", TOKEN).headers()))

    assert upstream.requests[0].headers["authorization"] == "Basic b2N0b2NhdDpjYW5hcnktdG9rZW4tNWYxZTBj"


def test_http_capability_repr_names_only_the_base_url(upstream: LoopbackServer) -> None:
    assert repr(HttpCapability(upstream.url)) == f"HttpCapability('{upstream.url}/')"


def test_default_user_agent_and_accept_are_sent(upstream: LoopbackServer) -> None:
    upstream.route("GET", "/user", json={})

    asyncio.run(HttpCapability(upstream.url).get("/user"))

    headers = upstream.requests[0].headers
    assert (headers["user-agent"], headers["accept"]) == ("toolgate", "application/json")


def test_redirect_answer_helper_builds_a_location(upstream: LoopbackServer) -> None:
    upstream.handle("GET", "/r", lambda _request: redirect_answer("/target", 307))
    upstream.route("GET", "/target", json={"ok": 1})

    response = asyncio.run(HttpCapability(upstream.url).get("/r"))

    assert response.json() == {"ok": 1}
    assert [r.path for r in upstream.requests] == ["/r", "/target"]
