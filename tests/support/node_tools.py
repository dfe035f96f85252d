"""Node programs the suite runs as real clients (the MCP Inspector), installed once per machine.

Installs go to a cache outside the checkout (`TOOLGATE_TEST_TOOLS`, default
`~/.cache/toolgate-tests`), one folder per package and version, under a file
lock so two xdist workers do not install the same package at once. Node ≥ 22
comes from npm's own `node` package when the machine's Node is older (Debian
has Node 20; the Inspector 2.x declares 22). A machine that cannot reach the
npm registry skips these tests, saying what could not be installed.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

INSTALL_TIMEOUT_S = 300
CACHE = Path(os.environ.get("TOOLGATE_TEST_TOOLS", Path.home() / ".cache" / "toolgate-tests"))


def npm_install(package: str, version: str) -> Path:
    """The folder `package@version` is installed in (its node_modules/.bin holds its programs); skips if npm fails."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(f"npm is not installed, so {package}@{version} cannot be installed")
    prefix = CACHE / f"{package.replace('/', '+')}@{version}"
    done = prefix / ".installed"
    prefix.mkdir(parents=True, exist_ok=True)
    with (prefix / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            try:
                result = subprocess.run(
                    [npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix), f"{package}@{version}"],
                    capture_output=True,
                    timeout=INSTALL_TIMEOUT_S,
                    check=False,
                    env={**os.environ, "NPM_CONFIG_UPDATE_NOTIFIER": "false"},
                )
            except subprocess.TimeoutExpired:
                pytest.skip(f"npm could not install {package}@{version} within {INSTALL_TIMEOUT_S} s")
            if result.returncode != 0:
                reason = result.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no message"]
                pytest.skip(f"npm could not install {package}@{version}: {reason[0][:200]}")
            done.touch()
    return prefix


def node_at_least(major: int) -> str:
    """A `node` of at least `major`: the machine's own when new enough, else npm's `node` package."""
    system = shutil.which("node")
    if system is not None:
        version = subprocess.run([system, "--version"], capture_output=True, text=True, check=False).stdout
        if version.startswith("v") and int(version[1:].split(".", 1)[0]) >= major:
            return system
    node = npm_install("node", str(major)) / "node_modules" / ".bin" / "node"
    probe = subprocess.run([str(node), "--version"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"npm's node@{major} package does not run here: {probe.stderr.strip()[:200]}")
    return str(node)
