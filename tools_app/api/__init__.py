"""The REST interface of tools_app: execute, catalog and invocations (CONTRACT.md §4)."""

from __future__ import annotations

from typing import Any


class ToolCallFailed(Exception):
    """A tool call that ended without a value, on its way to the API's exception handler.

    The view shapes the body; the status comes from the one error-code table in
    config/api.py, which apps cannot import, so the view hands the outcome over
    as this exception rather than choosing a status itself.
    """

    def __init__(self, *, error_code: str, body: dict[str, Any], retry_after_s: int | None = None) -> None:
        super().__init__(error_code)
        self.error_code = error_code
        self.body = body
        self.retry_after_s = retry_after_s
