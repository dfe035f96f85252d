"""The manual's Python snippets run as pasted, against the demo `make run` seeds, on a live server on loopback.

Each ```python block of README.md and of every page under docs/ is written to a
file and run by this virtualenv's Python with the environment the pages name
(`TOOLGATE_API_KEY`, the demo's key; `TOOLGATE_URL`, the live server). A snippet
that needs what a test cannot have (a real model provider) is skipped with that
reason, never silently. A snippet moved from one page to another is still found,
and the ids name the page it is on.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

from tools_app.demo import demo_seed

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SNIPPET = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
# What a snippet needs beyond Toolgate: the first match names why it cannot run here.
NEEDS = {
    "from agents ": "needs a real model provider: the OpenAI Agents SDK asks OpenAI's API (OPENAI_API_KEY) to run",
}
# (page, number on that page, code)
SNIPPETS = [
    (page.relative_to(ROOT).as_posix(), number, code)
    for page in PAGES
    for number, code in enumerate(SNIPPET.findall(page.read_text(encoding="utf-8")), start=1)
]


def _reason_to_skip(code: str) -> str | None:
    return next((reason for marker, reason in NEEDS.items() if marker in code), None)


def test_the_manual_has_python_snippets_and_each_is_run_or_skipped_for_a_reason():
    codes = [code for _, _, code in SNIPPETS]
    assert len(codes) >= 2
    assert any(_reason_to_skip(code) is None for code in codes)  # at least one really runs
    # The MCP client snippet is the one whose output is checked below: it must still be somewhere.
    assert any("core__get_current_time" in code and _reason_to_skip(code) is None for code in codes)


@pytest.fixture
def demo_key(live_server, tmp_path, transactional_db) -> str:
    """The demo as `make run` seeds it; its agent's key."""
    call_command("sync_tools", stdout=io.StringIO())
    return demo_seed(credentials_file=tmp_path / "demo.json").api_key


@pytest.mark.parametrize(
    "code", [code for _, _, code in SNIPPETS], ids=[f"{page}-{number}" for page, number, _ in SNIPPETS]
)
def test_a_snippet_runs_as_pasted(code, demo_key, live_server, tmp_path):
    reason = _reason_to_skip(code)
    if reason is not None:
        pytest.skip(reason)
    script = tmp_path / "snippet.py"
    script.write_text(code)
    env = {
        **{name: value for name, value in os.environ.items() if name != "DJANGO_SETTINGS_MODULE"},
        "TOOLGATE_API_KEY": demo_key,
        "TOOLGATE_URL": live_server.url,
    }

    run = subprocess.run(
        [sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
    )

    assert run.returncode == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    if "core__get_current_time" in code:  # the MCP client snippet: it listed the demo's tools and ran one
        assert "core__get_current_time" in run.stdout.splitlines()[0]
        assert "isError: False" in run.stdout
        assert "'timezone': 'UTC'" in run.stdout
