"""The sign-in consent page as a person reads it: tools by server, described and marked; untick all; the login.

Driven through Django's test client; tests/e2e/test_signin_consent_browser.py
looks at the same page in Chromium at two widths.
"""

from __future__ import annotations

import re
from urllib.parse import urlencode

import pytest
from django.core.cache import cache
from django.utils import timezone

from policies_app.governance import governance_bump
from policies_app.models import Delegation, ToolPolicy
from signin.models import SigninCode
from tests.support.signin import TIME, WAIT, authorize_query, pkce, registered_client_id, signin_tenant, web
from tools_app.models import Tool

pytestmark = pytest.mark.django_db

MCP_TOOLS = {
    "mcp__everything__echo": ("read_only", "low", "Echoes back the input string"),
    "mcp__everything__get-sum": ("read_only", "low", "Returns the sum of two numbers"),
    "mcp__memory__delete_entities": ("state_change", "high", "Delete multiple entities from the knowledge graph"),
}


@pytest.fixture(autouse=True)
def _fresh_rate_limits():
    cache.clear()


@pytest.fixture
def acme():
    tenant, ada, account, _key = signin_tenant()
    for tool_id, (effect, level, description) in MCP_TOOLS.items():
        Tool.objects.create(
            id=tool_id,
            description=description,
            input_schema={"type": "object"},
            schema_hash="0" * 64,
            effect=effect,
            consequence_level=level,
            source=Tool.Source.MCP,
            is_enabled=True,
            schema_changed_at=timezone.now(),
        )
    ToolPolicy.objects.filter(tenant=tenant).update(allowed_tools=[TIME, WAIT, "mcp__everything__*", "mcp__memory__*"])
    governance_bump()
    return tenant, ada, account


def consent_url() -> str:
    _verifier, challenge = pkce()
    return f"/oauth/authorize?{urlencode(authorize_query(registered_client_id(), challenge))}"


def checked_boxes(html: str) -> list[str]:
    return re.findall(r'name="tg_tool" value="([^"]+)" checked', html)


def test_the_tools_are_grouped_by_server_described_and_marked_with_their_effect_and_risk(acme):
    _tenant, ada, _account = acme
    browser = web()
    browser.force_login(ada)

    html = browser.get(consent_url()).content.decode()

    legends = re.findall(r"<legend>(.*?) <span", html)
    assert legends == ["MCP server everything", "MCP server memory", "Toolgate: core"]
    delete = html[html.index('value="mcp__memory__delete_entities"') :]
    delete = delete[: delete.index("</li>")]
    assert '<span class="badge effect-change">changes data</span>' in delete
    assert '<span class="badge risk-high">high risk</span>' in delete
    assert "Delete multiple entities from the knowledge graph" in delete
    echo = html[html.index('value="mcp__everything__echo"') :]
    echo = echo[: echo.index("</li>")]
    assert '<span class="badge effect-read">reads</span>' in echo
    assert "high risk" not in echo
    # each box is labelled by its own tool: for= and id= pair them, never the next line's name
    pairs = re.findall(r'<input type="checkbox" id="([^"]+)" name="tg_tool" value="([^"]+)"', html)
    for box_id, tool_id in pairs:
        label = html[html.index(f'<label for="{box_id}">') :]
        assert label[: label.index("</label>")].count("<code>") == 1
        assert f"<code>{tool_id}</code>" in label[: label.index("</label>")]
    assert len(pairs) == 5


def test_untick_all_shows_the_page_with_no_box_ticked_and_grants_nothing(acme):
    _tenant, ada, _account = acme
    browser = web()
    browser.force_login(ada)
    url = consent_url()
    assert len(checked_boxes(browser.get(url).content.decode())) == 5

    unticked = browser.post(url, {"tg_decision": "untick-all", "tg_tool": [TIME]})
    ticked = browser.post(url, {"tg_decision": "tick-all"})

    assert unticked.status_code == 200
    assert checked_boxes(unticked.content.decode()) == []
    assert len(checked_boxes(ticked.content.decode())) == 5
    assert Delegation.objects.count() == SigninCode.objects.count() == 0


def test_the_login_page_says_an_mcp_client_is_asking_to_sign_in(acme):
    url = consent_url()

    login = web().get(f"/accounts/login/?{urlencode({'next': url})}").content.decode()
    plain = web().get("/accounts/login/").content.decode()

    assert "An MCP client is asking to sign in as you." in login
    assert "An MCP client is asking" not in plain
    assert "Manage your tenant's connections" in plain
