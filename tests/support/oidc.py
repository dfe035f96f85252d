"""A real OpenID provider on loopback for the single sign-on tests: panva's `oidc-provider` run by Node.

The provider process is started from tests/support/oidc_provider.mjs with the
signing keys the test made (so a test can also sign tokens the provider never
issued) and restarted on the same port with other keys to rotate them. A
machine without npm, or that cannot reach the registry, skips these tests.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
from joserfc.jwk import RSAKey

from tests.support.node_tools import node_at_least, npm_install

OIDC_PROVIDER = "oidc-provider"
OIDC_PROVIDER_VERSION = "9.13.3"
SCRIPT = Path(__file__).with_name("oidc_provider.mjs")
START_TIMEOUT_S = 20.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def signing_key(kid: str) -> RSAKey:
    return RSAKey.generate_key(2048, parameters={"kid": kid, "use": "sig", "alg": "RS256"}, private=True)


class OpenIdProvider:
    """One oidc-provider process: its issuer URL, its clients, the accounts it signs in."""

    def __init__(self, workdir: Path, *, clients: list[dict[str, Any]], key: RSAKey) -> None:
        self.node = node_at_least(20)
        prefix = npm_install(OIDC_PROVIDER, OIDC_PROVIDER_VERSION)
        # ESM resolves packages from the script's own folder, so the script runs from the install prefix.
        self.script = prefix / "toolgate_oidc_provider.mjs"
        shutil.copyfile(SCRIPT, self.script)
        self.workdir = workdir
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.clients = clients
        self.keys = [key]
        self.accounts: dict[str, dict[str, Any]] = {}
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        config = self.workdir / "oidc-config.json"
        config.write_text(
            json.dumps(
                {
                    "port": self.port,
                    "issuer": self.issuer,
                    "keys": [key.as_dict(private=True) for key in self.keys],
                    "clients": self.clients,
                }
            )
        )
        with (self.workdir / "oidc-provider.log").open("ab") as log:
            self.process = subprocess.Popen(
                [self.node, str(self.script)],
                env={"OIDC_CONFIG": str(config), "PATH": "/usr/bin:/bin", "NODE_ENV": "test"},
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"oidc-provider exited: {(self.workdir / 'oidc-provider.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.issuer}/.well-known/openid-configuration", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise RuntimeError("oidc-provider did not start")
        if self.accounts:
            self.set_accounts(self.accounts)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None

    def rotate(self, key: RSAKey) -> None:
        """Restart with only `key`: the keys tokens were signed with so far are no longer published."""
        self.stop()
        self.keys = [key]
        self.start()

    def set_accounts(self, accounts: dict[str, dict[str, Any]]) -> None:
        self.accounts.update(accounts)
        httpx.post(f"{self.issuer}/_test/accounts", json=accounts, timeout=5).raise_for_status()

    def sign_in(self, authorize_url: str, account: str) -> str:
        """Follow the authorization request through the provider as `account`; the callback URL it ends at."""
        with httpx.Client(timeout=10) as browser:
            return self._follow(browser, authorize_url, account)

    def _follow(self, browser: httpx.Client, url: str, account: str) -> str:
        for _ in range(10):
            response = browser.get(url)
            if response.status_code not in (302, 303):
                raise AssertionError(f"provider answered {response.status_code}: {response.text[:300]}")
            location = response.headers["location"]
            url = location if "://" in location else f"{self.issuer}{location}"
            if url.startswith(self.issuer + "/interaction/"):
                url = f"{url}?account={account}"
            elif not url.startswith(self.issuer):
                return url
        raise AssertionError("too many redirects at the provider")


def callback_path(url: str) -> str:
    """The path and query of a callback URL, for Django's test client."""
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


def query_of(url: str) -> dict[str, str]:
    return {key: values[0] for key, values in parse_qs(urlsplit(url).query).items()}
