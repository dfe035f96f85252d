"""`mcp_server`, the former name of `mcp_upstream`: same arguments, same output, one line on stderr."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

from gateway.management.commands.mcp_server import DEPRECATION
from gateway.models import McpServer

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.django_db


def run(command: str, *args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(command, *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_the_old_name_does_what_the_new_one_does_and_says_it_once_on_stderr():
    McpServer.objects.create(slug="kept", url="https://mcp.invalid/mcp")

    new_out, new_err = run("mcp_upstream", "list")
    old_out, old_err = run("mcp_server", "list")

    assert "kept" in new_out
    assert (old_out, new_err) == (new_out, "")
    assert old_err.splitlines() == [DEPRECATION]


def test_the_old_name_has_the_new_ones_help():
    shown = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "help", "mcp_server"], capture_output=True, text=True, check=True
    ).stdout
    assert "Deprecated alias of mcp_upstream" in shown
    assert "{add,list,remove,discover,approve,approve-features}" in shown
