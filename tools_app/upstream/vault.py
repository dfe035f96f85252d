"""Where operator tokens (and sealed child environments) of MCP servers are sealed and opened.

They go under the same key ring as connections (`policies_app.crypto`, the
shared kernel), bound to `{"mcp_server": <id>}`. The binding's key differs from
a connection's, so a connection blob pasted into a server row (or the reverse)
does not open.
"""

from __future__ import annotations

from policies_app.crypto import KeyRing, open_sealed, seal


class TokenVault:
    def seal(self, token: str, *, server_id: str) -> tuple[bytes, str]:
        """(blob, key id) of the token, bound to this server row."""
        sealed = seal(token.encode(), binding={"mcp_server": server_id}, ring=KeyRing.from_settings())
        return sealed.blob, sealed.key_id

    def open(self, blob: bytes, *, server_id: str) -> str:
        """The token, or an error that carries neither plaintext nor key material."""
        return open_sealed(blob, binding={"mcp_server": server_id}, ring=KeyRing.from_settings()).decode()


_vault = TokenVault()


def token_vault() -> TokenVault:
    return _vault
