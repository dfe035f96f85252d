"""GET /api/v1/tools and /api/v1/tools/{tool_id}: the caller's catalog, from the real runtime."""

from __future__ import annotations

import pytest
from anthropic.types import ToolParam
from openai.types.responses import FunctionToolParam
from pydantic import TypeAdapter
from rest_framework.test import APIClient

from config.runtime import runtime
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import api_client, enable_tools

pytestmark = pytest.mark.django_db

CANARY = "canary-5d1e0b"
ANTHROPIC_TOOL = TypeAdapter(ToolParam)
RESPONSES_TOOL = TypeAdapter(FunctionToolParam)


def public_spec(tool_id: str) -> dict:
    return runtime().source.get(tool_id).spec.public_dict()


@pytest.fixture
def key():
    """A caller allowed core__get_current_time and github__get_user; core__wait is enabled but not allowed."""
    tenant = TenantFactory(slug="acme")
    enable_tools("core__get_current_time", "core__wait", "github__get_user")
    ToolPolicyFactory(
        tenant=tenant, allowed_tools=["core__get_current_time", "github__get_user", "github__create_issue"]
    )
    _account, clear_key = service_account_with_key(tenant, name="agent")
    return clear_key


def test_catalog_lists_the_enabled_tools_the_policy_allows(key):
    response = api_client(key).get("/api/v1/tools")

    assert response.status_code == 200
    assert response.json() == {"tools": [public_spec("core__get_current_time"), public_spec("github__get_user")]}
    assert set(response.json()["tools"][0]) == {
        "name",
        "description",
        "input_schema",
        "effect",
        "requires_connection",
        "provider",
        "consequence_level",
        "requires_confirmation",
        "tags",
        "version",
    }


def test_catalog_answers_the_seed_002_metadata_of_each_tool(key):
    tools = {tool["name"]: tool for tool in api_client(key).get("/api/v1/tools").json()["tools"]}

    assert {
        name: (tool["consequence_level"], tool["requires_confirmation"], tool["tags"], tool["version"])
        for name, tool in tools.items()
    } == {
        "core__get_current_time": ("low", False, ["time"], "1.0.0"),
        "github__get_user": ("low", False, ["github", "identity"], "1.0.0"),
    }


@pytest.mark.parametrize(
    ("tags", "names"),
    [
        ("github", ["github__get_user"]),
        ("github,identity", ["github__get_user"]),
        ("github,github", ["github__get_user"]),
        ("time", ["core__get_current_time"]),
        ("github,time", []),
        ("nothing", []),
    ],
)
def test_catalog_filters_by_every_given_tag(key, tags, names):
    response = api_client(key).get("/api/v1/tools", {"tags": tags})

    assert response.status_code == 200
    assert [tool["name"] for tool in response.json()["tools"]] == names


@pytest.mark.parametrize("tags", ["", "GitHub", "a b", "x,", ",x", "a" * 33, ",".join(f"t{i}" for i in range(17))])
def test_malformed_tags_answer_the_envelope_and_say_what_a_tag_is(key, tags):
    response = api_client(key).get("/api/v1/tools", {"tags": tags})

    assert response.status_code == 422
    body = response.json()
    assert body["error_code"] == "validation"
    assert body["errors"][0]["path"] == "tags"
    assert "comma-separated tags" in body["errors"][0]["message"]


def test_catalog_in_openai_format(key):
    response = api_client(key).get("/api/v1/tools", {"format": "openai"})

    assert response.status_code == 200
    tools = response.json()["tools"]
    assert [tool["function"]["name"] for tool in tools] == ["core__get_current_time", "github__get_user"]
    assert tools[0] == {
        "type": "function",
        "function": {
            "name": "core__get_current_time",
            "description": public_spec("core__get_current_time")["description"],
            "parameters": public_spec("core__get_current_time")["input_schema"],
        },
    }


def test_catalog_in_anthropic_format_has_exactly_the_messages_api_keys(key):
    response = api_client(key).get("/api/v1/tools", {"format": "anthropic"})

    assert response.status_code == 200
    spec = public_spec("github__get_user")
    tools = response.json()["tools"]
    assert [tool["name"] for tool in tools] == ["core__get_current_time", "github__get_user"]
    assert tools[1] == {"name": spec["name"], "description": spec["description"], "input_schema": spec["input_schema"]}
    for tool in tools:
        assert ANTHROPIC_TOOL.validate_python(tool) == tool


def test_catalog_in_openai_responses_format_is_flat_and_strict_where_allowed(key):
    response = api_client(key).get("/api/v1/tools", {"format": "openai_responses"})

    assert response.status_code == 200
    clock, user = response.json()["tools"]
    assert user == {
        "type": "function",
        "name": "github__get_user",
        "description": public_spec("github__get_user")["description"],
        "parameters": public_spec("github__get_user")["input_schema"],
        "strict": True,  # no properties, closed
    }
    assert clock["strict"] is False  # an optional timezone with a default: strict mode would require it
    for tool in (clock, user):
        assert RESPONSES_TOOL.validate_python(tool) == tool


def test_unknown_catalog_format_answers_422_without_echoing_it(key):
    response = api_client(key).get("/api/v1/tools", {"format": CANARY})

    assert response.status_code == 422
    assert response.json() == {
        "error_code": "validation",
        "safe_message": "the request is invalid",
        "errors": [{"path": "format", "message": "must be openai, openai_responses or anthropic"}],
    }


def test_tools_awaiting_approval_are_still_listed():
    tenant = TenantFactory()
    enable_tools("core__get_current_time")
    ToolPolicyFactory(
        tenant=tenant, allowed_tools=["core__get_current_time"], require_approval_for_effects=["read_only"]
    )
    _account, key = service_account_with_key(tenant)

    response = api_client(key).get("/api/v1/tools")

    assert [tool["name"] for tool in response.json()["tools"]] == ["core__get_current_time"]


def test_tool_detail_answers_one_spec(key):
    response = api_client(key).get("/api/v1/tools/github__get_user")

    assert response.status_code == 200
    assert response.json() == public_spec("github__get_user")


@pytest.mark.parametrize(
    "tool_id",
    [
        "core__wait",  # enabled, not in the policy
        "github__create_issue",  # in the policy, disabled
        "core__nope",  # no such tool
    ],
)
def test_tool_outside_the_catalog_answers_404_unavailable(key, tool_id):
    response = api_client(key).get(f"/api/v1/tools/{tool_id}")

    assert response.status_code == 404
    assert response.json() == {"error_code": "unavailable", "safe_message": "no such tool"}


def test_another_tenants_caller_does_not_see_this_tenants_catalog(key):
    other_tenant = TenantFactory(slug="globex")
    ToolPolicyFactory(tenant=other_tenant, allowed_tools=["core__wait"])
    _account, other_key = service_account_with_key(other_tenant, name="agent")

    listed = api_client(other_key).get("/api/v1/tools")
    detail = api_client(other_key).get("/api/v1/tools/core__get_current_time")

    assert listed.json() == {"tools": [public_spec("core__wait")]}
    assert detail.status_code == 404


@pytest.mark.parametrize("catalog_format", [None, "openai"])
def test_caller_without_a_policy_sees_an_empty_catalog_and_why(catalog_format):
    enable_tools("core__get_current_time")
    _account, key = service_account_with_key(TenantFactory(slug="acme"), name="bot")

    response = api_client(key).get("/api/v1/tools", {"format": catalog_format} if catalog_format else {})

    assert response.json() == {
        "tools": [],
        "hint": "no tool policy applies to the service account acme/bot, so no tool is allowed (deny by default); "
        "an operator adds a policy for it, its tenant or everyone in admin (Policies > Tool policies) "
        "or with `manage.py policy import`",
    }


def test_a_policy_that_allows_no_enabled_tool_is_named_in_the_hint():
    tenant = TenantFactory(slug="acme")
    ToolPolicyFactory(tenant=tenant, name="narrow", allowed_tools=["core__wait"])  # core__wait stays disabled
    _account, key = service_account_with_key(tenant, name="bot")

    response = api_client(key).get("/api/v1/tools")

    assert response.json() == {
        "tools": [],
        "hint": "the policy 'narrow' that applies to acme/bot allows no tool that is enabled now; "
        "an operator enables tools in admin (Tools > Tools) or adds them to the policy",
    }


def test_catalog_needs_the_tools_exec_scope(key):
    tenant = TenantFactory(slug="acme")
    _account, manage_key = service_account_with_key(tenant, name="manager", scopes=("connections:manage",))

    response = api_client(manage_key).get("/api/v1/tools")

    assert response.status_code == 403
    assert response.json() == {"error_code": "forbidden", "safe_message": "the API key lacks the tools:exec scope"}


def test_catalog_needs_a_key():
    response = APIClient().get("/api/v1/tools")

    assert response.status_code == 401
    assert response.json()["error_code"] == "unauthenticated"
