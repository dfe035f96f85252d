"""TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS in one place: `add` refuses what the services would refuse, and says so.

On a development clone the services read `.env`; a value exported in one
shell reaches only that shell's command. Operators' messages name the
setting; the caller's never does.
"""

from __future__ import annotations

import io
import logging

import pytest
from django.core.management import CommandError, call_command

from gateway.models import McpServer
from gateway.upstream.services import DiscoveryFailed, mcp_server_discover, mcp_server_register, mcp_tool_approve
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import api_client
from tools_app.services import tool_set_enabled

pytestmark = pytest.mark.django_db

SETTING = "TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS"


@pytest.fixture
def clone(settings, tmp_path):
    """A development clone whose shell exported the setting: DEBUG on, allowed in this process."""
    settings.DEBUG = True
    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = True
    settings.DOTENV_FILE = tmp_path / ".env"
    return settings.DOTENV_FILE


def test_add_refuses_a_loopback_url_allowed_only_in_this_shell_and_names_the_fix(clone, upstream):
    with pytest.raises(CommandError) as refused:
        call_command("mcp_upstream", "add", "acme", "--url", upstream.url, stdout=io.StringIO())

    assert str(refused.value) == (
        f"mcp server 'acme': {SETTING}=true is set in this shell only; the web server, the worker and the MCP "
        f"host read {clone} and would refuse every call to this server. Add the line {SETTING}=true to "
        f"{clone}, restart `make run`, then run this again"
    )
    assert not McpServer.objects.exists()
    assert upstream.requests == []


def test_add_accepts_the_url_once_env_holds_the_setting(clone, upstream):
    clone.write_text(f"# the clone's settings\n{SETTING}=true\n", encoding="utf-8")

    call_command("mcp_upstream", "add", "acme", "--url", upstream.url, stdout=io.StringIO())

    assert McpServer.objects.filter(slug="acme").exists()


def test_a_deployment_sets_one_environment_for_every_service_and_is_trusted(clone, settings, upstream):
    settings.DEBUG = False

    call_command("mcp_upstream", "add", "acme", "--url", upstream.url, stdout=io.StringIO())

    assert McpServer.objects.filter(slug="acme").exists()


def test_a_refused_discovery_tells_the_operator_which_setting_allows_it(settings, upstream):
    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = True
    server, _ = mcp_server_register(slug="acme", url=upstream.url)
    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = False

    with pytest.raises(DiscoveryFailed):
        mcp_server_discover(server_id=server.pk)

    server.refresh_from_db()
    assert server.last_discovery_error == (
        "the URL points at an address that is not allowed (loopback, private, link-local or reserved) "
        f"(an operator may set {SETTING}=true in .env, or the environment of every service, for upstreams on a "
        "private network, and restart web, worker and the MCP host)"
    )
    assert upstream.requests == []


def test_a_refused_call_names_the_setting_in_the_operators_log_only(settings, upstream, caplog):
    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = True
    server, _ = mcp_server_register(slug="acme", url=upstream.url)
    mcp_server_discover(server_id=server.pk)
    mcp_tool_approve(tool_id="mcp__acme__add", via="test")
    tool_set_enabled(tool_ids=["mcp__acme__add"], enabled=True)
    tenant = TenantFactory(slug="acme-co")
    _account, key = service_account_with_key(tenant, name="agent")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["mcp__acme__add"])
    upstream.clear()
    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = False  # what a web server started without the setting has

    with caplog.at_level(logging.WARNING, logger="gateway.upstream.source"):
        response = api_client(key).post(
            "/api/v1/tools/exec", {"tool_id": "mcp__acme__add", "args": {"a": 1, "b": 2}}, format="json"
        )

    body = response.json()
    assert body["ok"] is False
    assert "address that is not allowed" in body["safe_message"]
    assert SETTING not in response.content.decode()
    [record] = [r for r in caplog.records if r.name == "gateway.upstream.source"]
    assert record.getMessage().startswith("mcp server acme: call refused: the URL points at an address that is not")
    assert f"{SETTING}=true in .env" in record.getMessage()
    assert upstream.calls() == 0
