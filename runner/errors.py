"""One hierarchy for the runner's errors.

Every message of these errors is safe to show a caller: it names paths, ids and
reasons, never argument values, tokens or upstream bodies. Interfaces map them
to the contract's error envelope in one place.
"""

from __future__ import annotations

from collections.abc import Iterable

from runner.types import ContentBlock, ErrorCode, FieldError, text_blocks


class ToolgateError(Exception):
    """Base of every error Toolgate raises on purpose."""


class ContractError(ToolgateError, ValueError):
    """A tool contract or binding that must not be registered."""


class SchemaError(ContractError):
    """A tool input schema outside the supported subset."""


class RedactionError(ToolgateError):
    """An output that cannot be redacted safely."""


class _UpstreamNamed(ToolgateError):
    """A failure that may name the upstream it met, for operators' logs (never in the caller's message).

    `upstream` is the provider or upstream server's slug (`github`, `mcp:acme`) and `host` its
    host and port, never a URL's userinfo, path or query (where credentials may sit).
    """

    def __init__(self, message: str = "", *, upstream: str = "", host: str = "") -> None:
        super().__init__(message)
        self.upstream = upstream
        self.host = host


class CapabilityError(_UpstreamNamed):
    """A capability refused or failed a request."""


class ToolFailure(_UpstreamNamed):
    """Raised by a tool to fail with a message it vouches is safe (e.g. "repository not found")."""


class ToolCancelled(ToolFailure):
    """Raised by a tool whose caller cancelled it mid-call: recorded as `cancelled`, not as a failure."""


class ToolError(ToolgateError):
    """Raised by a tool to answer an error meant for the model, which reads it to correct itself.

    The call answers `tool_error` (HTTP 200, `ok: false`) with these blocks as
    its `content`: `ToolError("no repository named octo/hello")` is one text
    block; `ToolError(content=[...])` passes blocks (an upstream's `isError`
    result). Unlike `ToolFailure` (Toolgate's `execution`), the text is the
    tool's own answer, so it goes through the same guards as a value: the
    credential-echo guard and the result budget.
    """

    def __init__(self, message: str | None = None, *, content: Iterable[ContentBlock] | None = None) -> None:
        blocks = tuple(content) if content is not None else ()
        if message is not None:
            blocks = text_blocks(message) + blocks
        super().__init__("the tool reported an error")
        self.content = blocks


class InputInvalid(ToolgateError):
    def __init__(self, errors: tuple[FieldError, ...]) -> None:
        super().__init__("arguments do not match the tool's schema")
        self.errors = errors


class OutputInvalid(ToolgateError):
    def __init__(self, errors: tuple[FieldError, ...]) -> None:
        super().__init__("tool output does not match its schema")
        self.errors = errors


class BrokerError(ToolgateError):
    """The broker could not hand out credentials; code and message go to the caller."""

    def __init__(self, code: ErrorCode, safe_message: str) -> None:
        super().__init__(safe_message)
        self.code = code
        self.safe_message = safe_message


class DependencyUnavailable(ToolgateError):
    """A port could not reach its database or cache: the call fails closed and nothing ran.

    Adapters raise it (not the driver's own error) so the runner can answer
    `unavailable_dependency` without knowing which driver failed.
    """
