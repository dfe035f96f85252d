"""Tool contracts: what a tool promises, separate from how it is bound to the world.

A tool module holds one `ToolDefinition`: its `ToolContract` (name, pydantic
models, effect, redaction allowlist, connection needs) and an async `execute`
that does I/O only through the capabilities it is handed.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from runner.errors import ContractError
from runner.types import ConsequenceLevel, ToolEffect, ToolInvocationContext

if TYPE_CHECKING:
    from runner.capabilities import ToolCapabilities

DEFAULT_TIMEOUT_MS = 15_000
# No tool may run longer: the claim leases and the web server's request timeout are derived from it.
MAX_TIMEOUT_MS = 65_000

# Namespaced ids (`core__get_current_time`, `mcp__server__tool`) fit OpenAI's
# function-name alphabet and keep tool sources from colliding.
TOOL_ID_PATTERN = re.compile(r"^[a-z][a-z0-9]*(?:__[A-Za-z0-9][A-Za-z0-9_-]*)+$")
TOOL_ID_MAX_LENGTH = 64

KNOWN_CAPABILITIES = frozenset({"auth", "catalog", "clock", "http"})

# Tags are filter keys (`?tags=github`): short, lower-case, no separators a query would split on.
TAG_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,31}$")
MAX_TAGS = 16
VERSION_MAX_LENGTH = 32
TITLE_MAX_LENGTH = 128


class ToolArgs(BaseModel):
    """Base for tool inputs: strict types and closed objects, as the schema promises."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class ToolOutput(BaseModel):
    """Base for tool outputs.

    Extra fields are kept on purpose: output validation checks the declared
    fields, and the redaction allowlist, not the model, decides what leaves.
    """

    model_config = ConfigDict(extra="allow")


@dataclass(frozen=True, slots=True)
class ToolContract:
    """The canonical definition of one tool (name, schemas, effect, redaction)."""

    name: str
    description: str
    input_model: type[ToolArgs]
    output_model: type[ToolOutput]
    effect: ToolEffect
    # Output paths that may leave the runner: "login", "owner.login", "items[].name".
    # None means the author gave none, which the runner answers with redaction_failed.
    redaction_allowlist: tuple[str, ...] | None
    requires_connection: bool = False
    provider: str | None = None
    default_timeout_ms: int = DEFAULT_TIMEOUT_MS
    capabilities: frozenset[str] = field(default_factory=frozenset)
    # Tool metadata: how much harm a call can do, and whether a human must confirm every call.
    # requires_confirmation is declared on its own, never derived from the effect.
    consequence_level: ConsequenceLevel = ConsequenceLevel.LOW
    requires_confirmation: bool = False
    tags: tuple[str, ...] = ()
    version: str | None = None
    # A short display name (MCP's `title`): shown by clients beside the id, and searched with the id's weight.
    title: str | None = None

    def __post_init__(self) -> None:
        if len(self.name) > TOOL_ID_MAX_LENGTH or not TOOL_ID_PATTERN.match(self.name):
            raise ContractError(f"tool id {self.name!r} is not a namespaced id like core__get_time")
        if not self.description.strip():
            raise ContractError(f"tool {self.name} has no description")
        if self.requires_connection and not self.provider:
            raise ContractError(f"tool {self.name} requires a connection but names no provider")
        if self.requires_connection and "auth" not in self.capabilities:
            raise ContractError(f"tool {self.name} requires a connection but not the auth capability")
        unknown = self.capabilities - KNOWN_CAPABILITIES
        if unknown:
            raise ContractError(f"tool {self.name} declares unknown capabilities {sorted(unknown)}")
        if not 0 < self.default_timeout_ms <= MAX_TIMEOUT_MS:
            raise ContractError(f"tool {self.name}'s timeout must be between 1 and {MAX_TIMEOUT_MS} ms")
        problem = tags_problem(self.tags)
        if problem:
            raise ContractError(f"tool {self.name}: {problem}")
        if self.version is not None and not 0 < len(self.version) <= VERSION_MAX_LENGTH:
            raise ContractError(f"tool {self.name}'s version must be 1..{VERSION_MAX_LENGTH} characters")
        if self.title is not None and not 0 < len(self.title.strip()) <= TITLE_MAX_LENGTH:
            raise ContractError(f"tool {self.name}'s title must be 1..{TITLE_MAX_LENGTH} characters")


def tags_problem(tags: object) -> str | None:
    """What is wrong with a tag list (a contract's, an operator's, a policy file's), or None."""
    if not isinstance(tags, (list, tuple)) or not all(isinstance(tag, str) for tag in tags):
        return "tags must be a list of strings"
    if len(tags) > MAX_TAGS:
        return f"at most {MAX_TAGS} tags"
    bad = [tag for tag in tags if not TAG_PATTERN.fullmatch(tag)]
    if bad:
        return f"tags must be 1..32 lower-case letters, digits, '_', '.' or '-' (not {bad[0]!r})"
    if len(set(tags)) != len(tags):
        return "tags must not repeat"
    return None


# A tool's implementation. An `async def` runs on the runner's event loop, where the runtime
# budget cancels it. A plain `def` is for a tool that only computes (no I/O, no waiting): it runs
# on the calling thread, sparing the hand-off to the loop thread and back, and since nothing can
# interrupt it, an answer that took longer than the budget is refused as `timeout` afterwards.
ExecuteFn = Callable[[Any, ToolInvocationContext, "ToolCapabilities"], Coroutine[Any, Any, Any] | Any]


class _OnLoop:
    """The type of ON_LOOP (a sentinel no tool output can be)."""

    def __repr__(self) -> str:
        return "ON_LOOP"


# What a blocking fast path answers when it cannot serve the call and sent nothing.
ON_LOOP = _OnLoop()

# An async tool's optional blocking fast path, tried first on the calling thread: the sync web
# worker then waits on its own socket instead of handing the call to the loop thread and being
# woken from it (a thread switch each way, and the loop's task and timer machinery). It gets the
# call's deadline (a time.monotonic() instant) and must not wait past it: a TimeoutError raised
# once the deadline has passed is the call's timeout. It answers the output as `execute` would,
# or ON_LOOP, having sent nothing, to have `execute` run on the loop instead.
BlockingExecuteFn = Callable[[Any, ToolInvocationContext, "ToolCapabilities", float], Any]


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """A contract plus its implementation, not yet bound to capabilities."""

    contract: ToolContract
    execute: ExecuteFn
    execute_blocking: BlockingExecuteFn | None = None

    @property
    def tool_id(self) -> str:
        return self.contract.name

    @property
    def runs_on_loop(self) -> bool:
        """An async implementation (runs on the event loop) rather than a plain function."""
        return inspect.iscoroutinefunction(self.execute)
