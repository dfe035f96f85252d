"""A NUL character in a URL outside the API answers 400 before any view queries the database; the API's own list."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.test import Client, override_settings

from config.middleware import middleware_chain
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import enable_tools

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "url",
    [
        "/admin/tools_app/tool/%00/change/",  # a string primary key: PostgreSQL answered this with a 500
        "/admin/tools_app/toolinvocation/?tool_id=%00",
        "/admin/tools_app/toolinvocation/?q=a%00b",
        "/activity/?run=%00",
        "/accounts/login/?next=%00",
        "/admin/?%00=1",
    ],
)
def test_a_nul_in_a_url_answers_400_to_an_operator(client, url, django_assert_num_queries):
    client.force_login(User.objects.create_superuser("op", "op@example.com", "a-long-password-1"))

    with django_assert_num_queries(0):
        response = client.get(url)

    assert response.status_code == 400
    assert response.content == b"URLs must not contain NUL characters (%00)."


def test_api_paths_are_left_to_the_api_which_answers_its_envelope(client):
    response = client.get("/api/v1/invocations/%00")

    assert response.status_code == 401  # the API's own gate, not this middleware
    assert response.json()["error_code"] == "unauthenticated"


# --- the API's middleware list (settings.API_MIDDLEWARE) -------------------------------------

# What changes from one answer to the next whatever the list: the request's id and the clock.
VARYING_HEADERS = frozenset({"x-request-id", "expires"})


def _answered(client, method: str, path: str, **extra):
    response = getattr(client, method)(path, **extra)
    headers = {name.lower(): value for name, value in response.headers.items() if name.lower() not in VARYING_HEADERS}
    return response.status_code, headers, response.content


def _both_lists(method: str, path: str, **extra):
    """The same request through the API's list and, with no path routed to it, through the site's whole list."""
    through_api_list = _answered(Client(), method, path, **extra)
    with override_settings(API_MIDDLEWARE_PATHS=()):
        through_site_list = _answered(Client(), method, path, **extra)
    return through_api_list, through_site_list


@pytest.mark.parametrize(
    ("method", "path", "extra"),
    [
        ("get", "/healthz/api", {}),
        ("get", "/api/v1/tools", {}),  # no key: 401 and its WWW-Authenticate
        ("get", "/api/v1/tools", {"HTTP_AUTHORIZATION": "Token abc"}),
        ("post", "/api/v1/tools/exec", {"data": b"{", "content_type": "application/json"}),
        ("post", "/api/v1/tools/exec", {"data": b"x=1", "content_type": "application/x-www-form-urlencoded"}),
        ("get", "/api/v1/no-such-endpoint", {}),
        ("post", "/api/v1/no-such-endpoint/", {}),
        ("get", "/api/v1/invocations/%00", {}),
        ("get", "/api/v1/tools", {"HTTP_HOST": "evil.example"}),  # the Host check stays (CommonMiddleware)
        ("post", "/mcp", {}),  # no token: 401, its JSON-RPC error and the protected resource's metadata
        ("post", "/mcp", {"data": b"{", "content_type": "application/json", "HTTP_AUTHORIZATION": "Bearer x"}),
        ("get", "/mcp", {"HTTP_ACCEPT": "text/event-stream"}),
        ("post", "/mcp/t/writers", {}),
        ("post", "/mcp", {"HTTP_HOST": "evil.example"}),
        ("get", "/mcpx", {}),  # not an MCP endpoint: the same 404 whichever list it went through
    ],
)
def test_the_api_list_answers_what_the_site_list_answers(method, path, extra):
    through_api_list, through_site_list = _both_lists(method, path, **extra)

    assert through_api_list == through_site_list


def test_an_api_call_that_runs_answers_the_same_headers_through_either_list():
    enable_tools("core__get_current_time")
    tenant = TenantFactory(slug="acme")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["core__get_current_time"])
    _account, key = service_account_with_key(tenant, name="agent")
    call = {"data": {"tool_id": "core__get_current_time", "args": {}}, "content_type": "application/json"}

    through_api_list, through_site_list = _both_lists(
        "post", "/api/v1/tools/exec", HTTP_AUTHORIZATION=f"Bearer {key}", **call
    )

    assert through_api_list[0] == through_site_list[0] == 200
    assert through_api_list[1] == through_site_list[1]
    assert "content-security-policy" in through_api_list[1]
    assert through_api_list[1]["x-frame-options"] == "DENY"


def test_an_mcp_tools_call_answers_the_same_headers_through_either_list():
    enable_tools("core__get_current_time")
    tenant = TenantFactory(slug="acme")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["core__get_current_time"])
    _account, key = service_account_with_key(tenant, name="agent")
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "core__get_current_time"}}
    call = {"data": message, "content_type": "application/json", "HTTP_MCP_PROTOCOL_VERSION": "2025-11-25"}

    through_api_list, through_site_list = _both_lists("post", "/mcp", HTTP_AUTHORIZATION=f"Bearer {key}", **call)

    assert through_api_list[0] == through_site_list[0] == 200
    assert through_api_list[1] == through_site_list[1]
    assert b'"isError":false' in through_api_list[2]


def test_mcp_paths_are_left_to_the_endpoint_which_answers_json_rpc(client):
    _account, key = service_account_with_key(TenantFactory(slug="acme"), name="agent")
    listing = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}'

    anonymous = client.post("/mcp/t/%00", listing, content_type="application/json")
    signed_in = client.post(
        "/mcp/t/a%00b", listing, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key}"
    )

    assert anonymous.status_code == 401  # the endpoint's own gate, not the site's NUL check
    assert anonymous.json()["jsonrpc"] == "2.0"
    assert signed_in.status_code == 404  # no toolset has that name: no query ran with it
    assert signed_in.json()["error"]["message"]


def test_the_api_list_skips_the_sites_own_middleware():
    with override_settings(API_MIDDLEWARE_PATHS=()):
        site = Client().get("/healthz")
    api = Client().get("/healthz/api")

    assert site.wsgi_request.session is not None  # SessionMiddleware ran
    assert not hasattr(api.wsgi_request, "session")
    assert not hasattr(api.wsgi_request, "user")  # no Django user: the API authenticates its own callers
    assert api.headers["X-Request-ID"]  # the request log wraps both lists


def test_a_middleware_with_view_hooks_cannot_join_the_api_list():
    with pytest.raises(ImproperlyConfigured, match="CsrfViewMiddleware needs process_view"):
        middleware_chain(["django.middleware.csrf.CsrfViewMiddleware"])
