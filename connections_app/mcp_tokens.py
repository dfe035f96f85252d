"""Key-ring vaults installed into the lower layers at startup: MCP servers' operator tokens, approval args."""

from __future__ import annotations

from connections_app.crypto import KeyRing, open_sealed, seal


class KeyRingTokenVault:
    """AES-GCM under TOOLGATE_ENCRYPTION_KEYS, bound to `{"mcp_server": <id>}`.

    The binding's key differs from a connection's, so a connection blob pasted
    into a server row (or the reverse) does not open.
    """

    def seal(self, token: str, *, server_id: str) -> tuple[bytes, str]:
        sealed = seal(token.encode(), binding={"mcp_server": server_id}, ring=KeyRing.from_settings())
        return sealed.blob, sealed.key_id

    def open(self, blob: bytes, *, server_id: str) -> str:
        return open_sealed(blob, binding={"mcp_server": server_id}, ring=KeyRing.from_settings()).decode()


class KeyRingArgsVault:
    """Approval args under the same key ring, bound to `{"approval_args": <id>, "tenant": <id>}`."""

    def seal(self, plaintext: bytes, *, approval_id: str, tenant_id: str) -> bytes:
        binding = {"approval_args": approval_id, "tenant": tenant_id}
        return seal(plaintext, binding=binding, ring=KeyRing.from_settings()).blob

    def open(self, blob: bytes, *, approval_id: str, tenant_id: str) -> bytes:
        binding = {"approval_args": approval_id, "tenant": tenant_id}
        return open_sealed(blob, binding=binding, ring=KeyRing.from_settings())
