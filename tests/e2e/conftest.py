"""Real-browser tests: Debian's Chromium driven by Playwright against pytest-django's live server.

Playwright's own browser downloads are not available here, so the tests use
/usr/bin/chromium, installing it with apt-get when it is missing and failing
with instructions when that is impossible. Never run `playwright install`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import ConsoleMessage, Page, Response

# Playwright's sync API keeps an event loop running in the main thread, which makes
# Django refuse ORM calls from test code ("SynchronousOnlyOperation") for the rest of the session.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

E2E_DIR = Path(__file__).resolve().parent

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "var" / "test-artifacts" / "screenshots"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the browser tests last, after pytest-django's own ordering.

    pytest-playwright's `playwright` fixture is session-scoped: once started, its
    event loop stays running in the main thread until the session ends, and every
    later test calling asyncio.run() would fail with "cannot be called from a
    running event loop".
    """
    items.sort(key=lambda item: Path(item.path).is_relative_to(E2E_DIR))


def _chromium_installed() -> str:
    """The Chromium binary, installed with apt-get if needed; a failed test run says what to do otherwise."""
    if CHROMIUM.exists():
        return str(CHROMIUM)
    apt_get = shutil.which("apt-get")
    if apt_get is None:
        pytest.fail(f"{CHROMIUM} is missing and apt-get is not available: install Debian's chromium package.")
    result = subprocess.run(
        # Several xdist workers may get here at once: the later ones wait for the first's dpkg lock.
        [apt_get, "-o", "DPkg::Lock::Timeout=900", "install", "-y", "chromium"],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        check=False,
    )
    if result.returncode != 0 or not CHROMIUM.exists():
        detail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        pytest.fail(
            f"{CHROMIUM} is missing and `apt-get install -y chromium` failed (exit {result.returncode}): "
            f"{' | '.join(detail)}. Install it as root (apt-get update && apt-get install -y chromium); "
            "do not use `playwright install`, it cannot download here."
        )
    return str(CHROMIUM)


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict) -> dict:
    return {**browser_type_launch_args, "executable_path": _chromium_installed(), "args": CHROMIUM_ARGS}


@pytest.fixture(scope="session")
def base_url() -> None:
    """No base URL for Playwright: pages are opened with the live server's full URL (`Browsing.visit`).

    Defined here because pytest-playwright's fallback `base_url` (used when pytest-base-url is not
    installed) is a session fixture written as an instance method, which pytest 9 deprecates with a
    PytestRemovedIn10Warning; warnings are errors in this suite (pyproject.toml).
    """
    return None


@dataclass
class Browsing:
    """A page on the live server that records console errors and saves a screenshot of each page visited."""

    page: Page
    base_url: str
    console_errors: list[str] = field(default_factory=list)

    def visit(self, path: str, screenshot: str) -> Response | None:
        response = self.page.goto(f"{self.base_url}{path}")
        self.screenshot(screenshot)
        return response

    def screenshot(self, name: str) -> None:
        self.page.screenshot(path=SCREENSHOTS / f"{name}.png", full_page=True)

    def csp_violations(self) -> list[str]:
        return [text for text in self.console_errors if "Content Security Policy" in text]

    def record_console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.console_errors.append(message.text)


@pytest.fixture
def browsing(page: Page, live_server, transactional_db) -> Browsing:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.set_default_timeout(5000)
    session = Browsing(page=page, base_url=live_server.url)
    page.on("console", session.record_console)
    page.on("pageerror", lambda error: session.console_errors.append(f"page error: {error}"))
    return session
