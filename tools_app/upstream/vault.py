"""Where operator tokens of MCP servers are sealed and opened.

Credentials and their key ring belong to connections_app (layer 3), which
tools_app (layer 2) must not import. So tools_app states what it needs, a
`TokenVault`, and connections_app installs the key-ring implementation when
Django starts (its AppConfig.ready): the dependency points down, and no
process ever runs without the one vault (using it before then raises).
"""

from __future__ import annotations

from typing import Protocol


class TokenVault(Protocol):
    def seal(self, token: str, *, server_id: str) -> tuple[bytes, str]:
        """(blob, key id) of the token, bound to this server row."""
        ...

    def open(self, blob: bytes, *, server_id: str) -> str:
        """The token, or an error that carries neither plaintext nor key material."""
        ...


class VaultMissing(RuntimeError):
    pass


_installed: dict[str, TokenVault] = {}


def install_token_vault(vault: TokenVault) -> None:
    _installed["vault"] = vault


def token_vault() -> TokenVault:
    vault = _installed.get("vault")
    if vault is None:
        raise VaultMissing("no token vault is installed (connections_app is not loaded)")
    return vault
