"""Every admin changelist and tenant-portal page at 1280 px (a laptop) and 390 px (a phone), in a real browser.

At 1280 px no changelist column lies beyond the window and no page scrolls sideways; at
390 px every page still loads without a console error. Each page is saved under
var/test-artifacts/screenshots/widths/ (looked at by people, not compared by the test).
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib import admin
from django.core.management import call_command
from playwright.sync_api import Page

from connections_app.services import grant_create
from gateway.upstream.services import mcp_server_discover, mcp_server_register
from policies_app.models import ServiceAccount, TenantMembership
from tests.e2e.conftest import Browsing
from tests.e2e.test_demo_walkthrough import hidden_columns, log_in
from tests.factories import ConnectionFactory
from tests.gateway.upstream.conftest import install_tools
from tests.support.mcp_upstream import McpUpstream
from tools_app.demo import demo_seed

WIDTHS = (1280, 390)
PORTAL_PAGES = (
    "/connections/",
    "/grants/",
    "/service-accounts/",
    "/delegations/",
    "/approvals/",
    "/toolsets/",
    "/activity/",
    "/changes/",
)


def _changelists() -> list[str]:
    """Every changelist of Toolgate's own apps (the packages at the checkout's root), whatever they are named."""
    return sorted(
        f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
        for model in admin.site._registry
        if Path(model._meta.app_config.path).parent == settings.BASE_DIR
    )


def _scrolls_sideways(page: Page) -> bool:
    return page.evaluate("() => document.documentElement.scrollWidth > window.innerWidth + 1")


@pytest.fixture
def upstream_tools(settings):
    """A discovered upstream MCP server on loopback, so the MCP tools list has rows (its widest list)."""
    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = True
    with McpUpstream(legacy=False) as server:
        install_tools(server)
        yield server


@pytest.fixture
def seeded(tmp_path, transactional_db, upstream_tools):
    """The demo, with a connection granted to its agent (names in the change log), an owner's login
    and a discovered upstream MCP server."""
    registered, _ = mcp_server_register(slug="acme", url=upstream_tools.url)
    mcp_server_discover(server_id=registered.pk)
    call_command("sync_tools", stdout=io.StringIO())
    demo = demo_seed(credentials_file=tmp_path / "demo.json")
    account = ServiceAccount.objects.get(name=demo.service_account)
    connection = ConnectionFactory(tenant=account.tenant, label="Work GitHub")
    grant_create(tenant=account.tenant, service_account=account, connections=[connection])
    TenantMembership.objects.filter(user__username=demo.user_username).update(role=TenantMembership.Role.OWNER)
    return demo


@pytest.mark.parametrize("width", WIDTHS)
def test_admin_and_portal_pages_fit_at_1280_and_load_at_390(browsing: Browsing, seeded, width):
    page = browsing.page
    page.set_viewport_size({"width": width, "height": 800})
    browsing.visit("/admin/", f"widths/{width}-admin-login")
    log_in(page, seeded.operator_username, seeded.operator_password)
    problems: dict[str, object] = {}
    for path in _changelists():
        name = path.strip("/").replace("/", "-")
        browsing.visit(path, f"widths/{width}-{name}")
        if width == 1280:
            hidden = hidden_columns(page)
            if hidden or _scrolls_sideways(page):
                problems[path] = hidden or "scrolls sideways"
    browsing.visit("/admin/policies_app/toolpolicy/add/", f"widths/{width}-admin-toolpolicy-add")
    if width == 1280 and _scrolls_sideways(page):
        problems["/admin/policies_app/toolpolicy/add/"] = "scrolls sideways"
    # each checkbox's label on its box's line (the first one used to wrap under it)
    wrapped = page.evaluate(
        """() => [...document.querySelectorAll('input[type=checkbox][name=allowed_tools]')].filter(box => {
            const range = document.createRange();
            range.selectNodeContents(box.closest('label'));
            range.setStartAfter(box);
            return range.getBoundingClientRect().top >= box.getBoundingClientRect().bottom - 1;
        }).map(box => box.value)"""
    )
    if wrapped:
        problems["checkbox labels under their box"] = wrapped

    page.context.clear_cookies()
    browsing.visit("/accounts/login/", f"widths/{width}-portal-login")
    log_in(page, seeded.user_username, seeded.user_password)
    for path in PORTAL_PAGES:
        browsing.visit(path, f"widths/{width}-portal-{path.strip('/')}")
        if _scrolls_sideways(page) and width == 1280:
            problems[path] = "scrolls sideways"

    assert problems == {}
    assert browsing.console_errors == []
