"""Patterns in a policy's allowed_tools: `mcp__everything__*` allows every tool of one server.

A pattern is a tool id with `*` standing for any run of characters (none
included); no other character is special. `?` and `[...]` are refused rather
than read as fnmatch does: tool ids never contain them, so in a policy they are
a mistake, and a glob that silently matched more than its author meant would
widen access. A pattern only widens what the policy *allows*: a matched tool
still needs its switch on, an approved (pinned, not quarantined) definition,
and the toolset, delegation and approval rules, exactly as a named one does.

A pattern is accepted when it matches at least one tool id of the catalog, or
when it starts with a registered MCP server's prefix (`mcp__<server>__`): an
operator may allow a server before its tools are discovered or approved, but
a pattern that can match nothing an operator knows of is a typo.

Matching runs on every call's policy check, so a policy's patterns are
compiled once into one regular expression when the policy is loaded into the
governance cache (`ToolPatterns.compile`), and an exact id is a set lookup.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

WILDCARD = "*"
REFUSED_CHARACTERS = frozenset("?[]")
# A policy's upstream resources and prompts (gateway/upstream/features.py names them).
FEATURE_POLICY_FIELDS = ("allowed_resources", "allowed_prompts")


def is_pattern(entry: str) -> bool:
    """A pattern, or an attempt at one: `?` and `[` count, so they are refused as wildcards, not as ids."""
    return WILDCARD in entry or not REFUSED_CHARACTERS.isdisjoint(entry)


def pattern_problem(pattern: str, *, known_ids: Iterable[str], server_prefixes: Iterable[str]) -> str | None:
    """Why `pattern` cannot stand in allowed_tools, or None: what an operator reads, the fix included."""
    refused = sorted(REFUSED_CHARACTERS & set(pattern))
    if refused:
        return (
            f"pattern {pattern!r}: only * is a wildcard ({' '.join(refused)} cannot appear in tool ids); "
            "write e.g. mcp__everything__*"
        )
    matcher = _compile([pattern])
    if any(matcher.fullmatch(tool_id) for tool_id in known_ids):
        return None
    literal_head = pattern.split(WILDCARD, 1)[0]
    if any(literal_head.startswith(prefix) for prefix in server_prefixes):
        return None
    return (
        f"pattern {pattern!r} matches no tool id of the catalog and no registered MCP server's tools "
        "(mcp__<server>__*); check the spelling against `policy export` or the admin's tool list"
    )


def feature_entry_problem(policy_field: str, entry: str) -> str | None:
    """Why `entry` cannot stand in a policy's allowed_resources / allowed_prompts, or None.

    Names or `*` patterns, as in allowed_tools; `?` and `[` are refused. A resource entry
    starts with `toolgate://`, a prompt entry with `mcp__`: anything else can match nothing.
    """
    refused = sorted(REFUSED_CHARACTERS & set(entry))
    if refused:
        return f"{entry!r}: only * is a wildcard ({' '.join(refused)} is escaped in Toolgate's names)"
    head = "toolgate://" if policy_field == "allowed_resources" else "mcp__"
    if not entry.startswith(head):
        example = "toolgate://<server>/*" if policy_field == "allowed_resources" else "mcp__<server>__*"
        return f"{entry!r} must start with {head} (e.g. {example})"
    return None


def patterns_matching(tool_ids: Iterable[str], patterns: Iterable[str]) -> list[str]:
    """The ids among `tool_ids` that any of `patterns` matches, in the order given."""
    matcher = ToolPatterns.compile(patterns)
    return [tool_id for tool_id in tool_ids if matcher.allows(tool_id)]


@dataclass(frozen=True, slots=True)
class ToolPatterns:
    """A policy's allowed_tools, split once into exact ids and one compiled regex of its patterns."""

    exact: frozenset[str]
    regex: re.Pattern[str] | None

    @classmethod
    def compile(cls, entries: Iterable[str]) -> ToolPatterns:
        entries = set(entries)
        patterns = sorted(entry for entry in entries if is_pattern(entry))  # ? and [ stay literal: they match no id
        return cls(exact=frozenset(entries.difference(patterns)), regex=_compile(patterns) if patterns else None)

    def allows(self, tool_id: str) -> bool:
        return tool_id in self.exact or (self.regex is not None and self.regex.fullmatch(tool_id) is not None)


NO_TOOLS = ToolPatterns(exact=frozenset(), regex=None)


def _compile(patterns: Iterable[str]) -> re.Pattern[str]:
    alternatives = ("(?:" + ".*".join(re.escape(part) for part in p.split(WILDCARD)) + ")" for p in patterns)
    return re.compile("|".join(alternatives), re.DOTALL)
