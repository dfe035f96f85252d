"""The REST interface of tools_app: execute, catalog and invocations (CONTRACT.md §4)."""
