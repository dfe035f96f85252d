"""The REST interface of tools_app: execute, catalog and invocations (docs/api.md)."""
