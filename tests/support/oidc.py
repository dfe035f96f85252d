"""A real OpenID provider on loopback for the single sign-on tests: panva's `oidc-provider` run by Node.

The provider process is started from tests/support/oidc_provider.mjs with the
signing keys the test made (so a test can also sign tokens the provider never
issued) and restarted on the same port with other keys to rotate them. A
machine without npm, or that cannot reach the registry, skips these tests.
"""

from __future__ import annotations

import json
import os
import re
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


def script_in(prefix: Path) -> Path:
    """The provider's script in the install prefix (ESM resolves packages from the script's own folder).

    Replaced whole, never rewritten in place: another test worker may be starting node on it, and node
    runs a file caught empty mid-copy as an empty module, exiting at once with nothing logged.
    """
    target = prefix / "toolgate_oidc_provider.mjs"
    text = SCRIPT.read_bytes()
    if not target.exists() or target.read_bytes() != text:
        partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
        partial.write_bytes(text)
        os.replace(partial, target)
    return target


class OpenIdProvider:
    """One oidc-provider process: its issuer URL, its clients, the accounts it signs in."""

    def __init__(
        self, workdir: Path, *, clients: list[dict[str, Any]], key: RSAKey, options: dict[str, Any] | None = None
    ) -> None:
        self.node = node_at_least(20)
        prefix = npm_install(OIDC_PROVIDER, OIDC_PROVIDER_VERSION)
        self.script = script_in(prefix)
        self.workdir = workdir
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.clients = clients
        self.options = options or {}  # more of the script's configuration (claims_in_userinfo)
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
                    **self.options,
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

    def sign_in(self, authorize_url: str, account: str, *, browser: httpx.Client | None = None) -> str:
        """Follow the authorization request through the provider as `account`; the callback URL it ends at.

        Pass a `browser` to keep the provider's session cookie (to sign out there later).
        """
        if browser is not None:
            return self._follow(browser, authorize_url, account)
        with httpx.Client(timeout=10) as fresh:
            return self._follow(fresh, authorize_url, account)

    def sign_out(self, browser: httpx.Client, client_id: str) -> None:
        """Sign out at the provider as a person would (its logout page, "Yes, sign me out").

        The provider posts its back-channel logout tokens before it answers the confirmation.
        """
        page = browser.get(f"{self.issuer}/session/end", params={"client_id": client_id})
        assert page.status_code == 200, page.text[:300]
        xsrf = re.search(r'name="xsrf" value="([^"]+)"', page.text)
        assert xsrf is not None, page.text[:300]
        confirmed = browser.post(f"{self.issuer}/session/end/confirm", data={"xsrf": xsrf.group(1), "logout": "yes"})
        assert confirmed.status_code in (302, 303), confirmed.text[:300]

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
