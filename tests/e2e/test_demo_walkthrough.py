"""The demo of docs/getting-started.md, walked in a real browser at 1280 px: what a new user does in their first hour.

`seed_demo` as `make run` runs it, the printed curl, the operator in admin, the API
docs, then the tenant user in the web UI. Every page is saved as a screenshot under
var/test-artifacts/screenshots/demo/, and any console error (a 404 such as a missing
favicon, a CSP violation, a script error) fails the walk.
"""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import call_command
from playwright.sync_api import Page, expect

from tests.e2e.conftest import Browsing

VIEWPORT_WIDTH = 1280

# The Toolgate changelists an operator works in, and the columns each must show without scrolling.
# (Approval requests belong to the approvals work and are checked there.)
ADMIN_LISTS = {
    "tools_app/tool": ("Id", "Effect", "Is enabled"),
    "tools_app/toolinvocation": ("Started at", "Tool id", "Decision", "Error code"),
    "policies_app/toolpolicy": ("Name", "Scope", "Is active"),
    "policies_app/serviceaccount": ("Name", "Revoked at"),
    "connections_app/executiongrant": ("Service account", "Revoked at"),
    "policies_app/tenant": ("Slug", "Name"),
    "policies_app/tenantmembership": ("User", "Role"),
    "connections_app/connection": ("Tenant", "Status", "Expires at", "Revoked"),
    "connections_app/oauthprovider": ("Name", "Client id"),
}


@pytest.fixture
def demo(live_server, tmp_path, transactional_db) -> dict[str, str]:
    """`manage.py seed_demo` as `make run` calls it; the credentials are read from what it prints."""
    out = io.StringIO()
    call_command("sync_tools", stdout=io.StringIO())
    call_command(
        "seed_demo", "--credentials-file", str(tmp_path / "demo.json"), "--base-url", live_server.url, stdout=out
    )
    printed = out.getvalue()
    passwords = dict(re.findall(r"user (\S+)  password (\S+)", printed))
    curl = re.search(r"curl -s -X POST (\S+) -H \"Authorization: Bearer (\S+)\"", printed)
    assert curl is not None, printed
    return {
        "operator": passwords["operator"],
        "demo-user": passwords["demo-user"],
        "exec_url": curl.group(1),
        "api_key": curl.group(2),
    }


def hidden_columns(page: Page) -> list[str]:
    """Column headers of the changelist whose right edge lies beyond what the page shows without scrolling."""
    return page.evaluate(
        """() => {
            const results = document.querySelector('#changelist .results') || document.body;
            const right = Math.min(results.getBoundingClientRect().right, window.innerWidth);
            return [...document.querySelectorAll('#result_list thead th')]
                .filter(th => th.getBoundingClientRect().right > right + 1)
                .map(th => th.textContent.trim());
        }"""
    )


def log_in(page: Page, username: str, password: str) -> None:
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()


def test_the_readme_demo_walks_without_friction(browsing: Browsing, demo: dict[str, str], monkeypatch):
    page = browsing.page
    assert page.viewport_size == {"width": VIEWPORT_WIDTH, "height": 720}

    # The printed curl runs a tool; a mistyped id and bad args leave refused rows in the audit log.
    def call(tool_id: str, args: object) -> dict:
        answer = page.request.post(
            demo["exec_url"],
            headers={"Authorization": f"Bearer {demo['api_key']}"},
            data={"tool_id": tool_id, "args": args},
        )
        return answer.json()

    assert call("core__get_current_time", {"timezone": "UTC"})["ok"] is True
    assert call("core__wiat", {"ms": 1})["error_code"] == "unavailable"
    assert call("core__wait", {"ms": -1})["error_code"] == "validation"

    # The tenant user stores a token and grants it to the demo agent; the activity shows the calls.
    browsing.visit("/connections/", "demo/01-tenant-login")
    log_in(page, "demo-user", demo["demo-user"])
    expect(page.get_by_role("heading", name="No connections yet")).to_be_visible()
    browsing.screenshot("demo/02-connections-empty")
    page.get_by_role("link", name="Add API key").first.click()
    page.get_by_label("Provider").select_option("github")
    page.get_by_label("Label").fill("my github")
    page.get_by_label("API key").fill("ghp_demo-walkthrough-token")
    page.get_by_role("button", name="Save connection").click()
    expect(page.get_by_role("link", name="my github")).to_be_visible()
    browsing.screenshot("demo/03-connections")
    browsing.visit("/grants/new/", "demo/04-new-grant")
    page.get_by_label("Service account").select_option(label="demo-agent")
    page.get_by_role("checkbox", name=re.compile(r"my github")).check()
    page.get_by_role("button", name="Create grant").click()
    expect(page.get_by_text("Grant for “demo-agent” created.")).to_be_visible()
    browsing.screenshot("demo/05-grants")
    browsing.visit("/service-accounts/", "demo/06-service-accounts")
    expect(page.get_by_role("cell", name="demo-agent")).to_be_visible()
    browsing.visit("/activity/", "demo/07-activity")
    expect(page.get_by_role("cell", name="core__get_current_time")).to_be_visible()

    # The operator registers an OAuth provider (docs/operating.md, "Operator commands"), then works in admin.
    monkeypatch.setenv("TOOLGATE_OAUTH_CLIENT_SECRET", "demo-client-secret")
    call_command(
        "add_oauth_provider",
        "github",
        "--authorize-url=https://github.com/login/oauth/authorize",
        "--token-url=https://github.com/login/oauth/access_token",
        "--client-id=Iv1.demo",
        stdout=io.StringIO(),
    )
    page.context.clear_cookies()
    browsing.visit("/admin/", "demo/10-admin-login")
    log_in(page, "operator", demo["operator"])
    expect(page.locator("#site-name")).to_have_text("Toolgate administration")
    browsing.screenshot("demo/11-admin-index")
    sections = [text.casefold() for text in page.locator("#content-main .module caption").all_inner_texts()]
    assert sections == [
        "connections",
        "policies",
        "mcp sign-in",
        "tools",
        "mcp gateway",
        "single sign-on",
        "change log",
        "authentication and authorization",
        "maintenance: log-in lockouts",
        "maintenance: scheduled tasks",
    ]
    hidden = {}
    for number, (model, columns) in enumerate(ADMIN_LISTS.items(), start=12):
        browsing.visit(f"/admin/{model}/", f"demo/{number:02d}-admin-{model.replace('/', '-')}")
        headers = [header.strip() for header in page.locator("#result_list thead th").all_text_contents()]
        assert set(columns) <= set(headers), (model, headers)
        hidden[model] = hidden_columns(page)
    assert hidden == {model: [] for model in ADMIN_LISTS}

    # The API docs render under the CSP.
    browsing.visit("/api/docs/", "demo/30-api-docs")
    expect(page.get_by_text("Toolgate API").first).to_be_visible()
    expect(page.locator(".opblock").first).to_be_visible()

    assert browsing.console_errors == []
