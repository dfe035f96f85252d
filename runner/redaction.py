"""Allowlist redaction: only the output fields a tool names may leave the runner.

Paths use dots for nested objects and `[]` for lists: `login`, `owner.login`,
`labels[].name`, `tags[]`. A path that ends on a scalar (or a list of scalars)
keeps it; a path that ends on an object would keep fields nobody reviewed, so
it is refused. There is no pass-through: a tool without an allowlist fails.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from runner.errors import RedactionError

_LIST = "[]"
_SCALARS = (str, int, float, bool, type(None))


Trie = dict[str, "Trie"]


def compile_allowlist(paths: Sequence[str]) -> Trie:
    """Parse allowlist paths into a trie of segments (`[]` is a segment of its own)."""
    trie: Trie = {}
    for path in paths:
        if not path or path.startswith(".") or path.endswith(".") or ".." in path:
            raise RedactionError(f"malformed allowlist path {path!r}")
        node = trie
        for part in path.split("."):
            name, brackets = part, 0
            while name.endswith(_LIST):
                name, brackets = name[: -len(_LIST)], brackets + 1
            if not name:
                raise RedactionError(f"malformed allowlist path {path!r}")
            node = node.setdefault(name, {})
            for _ in range(brackets):
                node = node.setdefault(_LIST, {})
    return trie


def redact(value: Any, allowlist: Trie | None) -> Any:
    """Keep what the allowlist names, drop the rest; raise when that is not safe."""
    if allowlist is None:
        raise RedactionError("tool has no redaction allowlist")
    if not isinstance(value, Mapping):
        raise RedactionError("tool output is not an object")
    return _redact(value, allowlist, "")


def _redact(value: Any, node: Trie, path: str) -> Any:
    if not node:  # leaf: the path ends here
        if isinstance(value, _SCALARS):
            return value
        if isinstance(value, list) and all(isinstance(item, _SCALARS) for item in value):
            return list(value)
        raise RedactionError(f"allowlist path {path or '<root>'} selects a whole object; name its fields")
    if isinstance(value, Mapping):
        kept = {}
        for key, child in node.items():
            if key != _LIST and key in value:
                kept[key] = _redact(value[key], child, f"{path}.{key}" if path else key)
        return kept
    if isinstance(value, list) and _LIST in node:
        return [_redact(item, node[_LIST], f"{path}[]") for item in value]
    if value is None:
        return None
    raise RedactionError(f"output at {path or '<root>'} does not have the shape the allowlist expects")
