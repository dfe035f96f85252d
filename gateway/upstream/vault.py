"""Where operator tokens (and sealed child environments) of MCP servers are sealed and opened.

They go under the same key ring as connections (`core.crypto`, the
shared kernel), bound to `{"mcp_server": <id>}`. The binding's key differs from
a connection's, so a connection blob pasted into a server row (or the reverse)
does not open.
"""

from __future__ import annotations

from core.crypto import KeyRing, Sealed, open_sealed, reseal, seal


def _binding(server_id: str) -> dict[str, str]:
    return {"mcp_server": server_id}


class TokenVault:
    def seal(self, token: str, *, server_id: str) -> tuple[bytes, str]:
        """(blob, key id) of the token, bound to this server row."""
        sealed = seal(token.encode(), binding=_binding(server_id), ring=KeyRing.from_settings())
        return sealed.blob, sealed.key_id

    def open(self, blob: bytes, *, server_id: str) -> str:
        """The token, or an error that carries neither plaintext nor key material."""
        return open_sealed(blob, binding=_binding(server_id), ring=KeyRing.from_settings()).decode()

    def reseal(self, blob: bytes, *, server_id: str, ring: KeyRing) -> Sealed:
        """The same value sealed again under `ring`'s primary key (key rotation), or a CredentialError."""
        return reseal(blob, binding=_binding(server_id), ring=ring)


_vault = TokenVault()


def token_vault() -> TokenVault:
    return _vault
