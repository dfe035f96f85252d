"""MCP clients that sign in: Toolgate as the OAuth 2.1 authorization server of its own /mcp (docs/api.md).

Both halves, kept whole: the rows (`models.py`: clients, one-time codes, token
pairs, the grants they belong to) and what reads and writes them
(`services.py`), the protocol (`server.py`, Authlib's endpoints and grants),
Client ID Metadata Documents (`documents.py`), the endpoints and the consent
page (`views.py`, `urls.py`), the access token as a Bearer credential of the
API (`authentication.py`) and the operators' screen of clients (`admin.py`).
"""
