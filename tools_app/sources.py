"""What the catalog asks of the tool sources installed above it (the MCP gateway's upstream servers).

The catalog keeps every tool's row and switch, but a source above it knows
things the catalog cannot: which providers its tools talk to, and whether a
tool may be switched on at all (an upstream tool runs only with an approved
definition). tools_app never imports its sources, so each installs its answers
here when it is ready, the way tools_app installs its selectors in
policies_app.catalog. Until then there are none: only code tools' providers,
and no tool refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

Providers = Callable[[], Iterable[str]]
EnableProblems = Callable[[Iterable[str]], list[str]]

_providers: list[Providers] = []
_enable_problems: list[EnableProblems] = []


def install_tool_sources(*, providers: Providers, enable_problems: EnableProblems) -> None:
    """Called by a tool source at startup (once per process; a second call replaces nothing twice)."""
    if providers not in _providers:
        _providers.append(providers)
    if enable_problems not in _enable_problems:
        _enable_problems.append(enable_problems)


def source_providers() -> set[str]:
    """The providers the installed sources' tools talk to (an MCP server's `--provider`)."""
    return {provider for providers in _providers for provider in providers()}


def tool_enable_problems(tool_ids: Iterable[str]) -> list[str]:
    """Why some of these tools may not be switched on, one line each starting with the tool's id."""
    ids = list(tool_ids)
    return [problem for problems in _enable_problems for problem in problems(ids)]
