"""The sign-in consent page with 54 tools, in Chromium at 1280 px and 390 px, from the login page on.

Each checkbox must sit on the row of its own tool's name (not at the end of
the line before the next name), nothing may scroll sideways, tools come in
one group per server, and "Untick all" then one box, Allow, delegates that
one tool. Screenshots land in test-artifacts/ (git-ignored).
"""

from __future__ import annotations

import secrets
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
from django.utils import timezone
from playwright.sync_api import expect

from policies_app.governance import governance_bump
from policies_app.models import Delegation, ToolPolicy
from tests.factories import PASSWORD
from tests.support.signin import TIME, WAIT, pkce, signin_tenant
from tools_app.models import Tool

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
REDIRECT = "http://127.0.0.1:33418/callback"
# 52 upstream tools on four servers, plus the two code tools of the policy: 54, as a real install had.
SERVERS = {"everything": 13, "filesystem": 14, "github": 16, "memory": 9}
LONG_ID = "mcp__github__create_or_update_file_contents_in_a_repository"


@pytest.fixture
def acme():
    tenant, ada, account, _key = signin_tenant()
    now = timezone.now()
    for server, count in SERVERS.items():
        for number in range(count):
            tool_id = LONG_ID if (server, number) == ("github", 0) else f"mcp__{server}__tool-{number:02d}"
            Tool.objects.create(
                id=tool_id,
                description=f"Tool {number} of the {server} server: does one thing to the {server} it is given, "
                "and says what it did.",
                input_schema={"type": "object"},
                schema_hash="0" * 64,
                effect="state_change" if number % 3 else "read_only",
                consequence_level="high" if number % 5 == 4 else "low",
                source=Tool.Source.MCP,
                is_enabled=True,
                schema_changed_at=now,
            )
    patterns = [f"mcp__{server}__*" for server in SERVERS]
    ToolPolicy.objects.filter(tenant=tenant).update(allowed_tools=[TIME, WAIT, *patterns])
    governance_bump()
    return tenant, ada, account


def authorization_url(base_url: str) -> str:
    registered = httpx.post(
        f"{base_url}/oauth/register",
        json={"client_name": "Claude-ish Desktop", "redirect_uris": [REDIRECT]},
        timeout=10,
    )
    assert registered.status_code == 201, registered.text
    _verifier, challenge = pkce()
    query = {
        "response_type": "code",
        "client_id": registered.json()["client_id"],
        "redirect_uri": REDIRECT,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": secrets.token_urlsafe(8),
        "resource": f"{base_url}/mcp",
        "scope": "mcp",
    }
    return f"{base_url}/oauth/authorize?{urlencode(query)}"


def misplaced_boxes(page) -> list[str]:
    """Tools whose checkbox is not on its own label's first line, left of it."""
    return page.evaluate(
        """() => [...document.querySelectorAll('input[name=tg_tool]')].filter((box) => {
            const label = document.querySelector(`label[for="${box.id}"]`);
            const name = label.querySelector('code').getBoundingClientRect();
            const b = box.getBoundingClientRect();
            const middle = b.top + b.height / 2;
            return !(middle >= name.top && middle <= name.bottom && b.right <= name.left);
        }).map((box) => box.value)"""
    )


@pytest.mark.parametrize("width", [1280, 390])
def test_the_consent_page_reads_tool_by_tool_at_both_widths_and_untick_all_works(browsing, acme, width):
    _tenant, ada, account = acme
    page = browsing.page
    page.set_viewport_size({"width": width, "height": 900})
    ARTIFACTS.mkdir(exist_ok=True)

    page.goto(authorization_url(browsing.base_url))
    expect(page.get_by_text("An MCP client is asking to sign in as you.")).to_be_visible()
    page.screenshot(path=ARTIFACTS / f"signin-login-{width}.png", full_page=True)
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Let “Claude-ish Desktop” use Toolgate for you?")).to_be_visible()
    page.screenshot(path=ARTIFACTS / f"signin-consent-{width}.png", full_page=True)
    page.screenshot(path=ARTIFACTS / f"signin-consent-{width}-first-screen.png")

    boxes = page.locator("input[name=tg_tool]")
    assert boxes.count() == 54
    assert page.locator("fieldset.consent-group legend").all_inner_texts() == [
        "MCP server everything (13)",
        "MCP server filesystem (14)",
        "MCP server github (16)",
        "MCP server memory (9)",
        "Toolgate: core (2)",
    ]
    assert misplaced_boxes(page) == []
    assert page.evaluate("document.scrollingElement.scrollWidth <= window.innerWidth")
    assert page.locator(".consent-tool .badge.risk-high").count() == 8

    page.get_by_role("button", name="Untick all").click()
    expect(page.locator("input[name=tg_tool]:checked")).to_have_count(0)
    page.screenshot(path=ARTIFACTS / f"signin-consent-unticked-{width}.png", full_page=True)
    page.get_by_label(LONG_ID).check()
    with page.expect_request(lambda request: request.url.startswith(REDIRECT)):
        page.route(f"{REDIRECT}**", lambda route: route.fulfill(status=200, body="signed in"))
        page.get_by_role("button", name="Allow").click()

    delegation = Delegation.objects.get(user=ada, service_account=account, revoked_at__isnull=True)
    assert delegation.tools == [LONG_ID]
    assert browsing.csp_violations() == []
