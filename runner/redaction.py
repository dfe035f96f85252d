"""Allowlist redaction: only the output fields a tool names may leave the runner.

Paths use dots for nested objects and `[]` for lists: `login`, `owner.login`,
`labels[].name`, `tags[]`. A path that ends on a scalar (or a list of scalars)
keeps it; a path that ends on an object would keep fields nobody reviewed, so
it is refused. There is no pass-through: a tool without an allowlist fails.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from runner.errors import RedactionError

LIST_SEGMENT = "[]"  # the trie segment that stands for "every item of a list"
_LIST = LIST_SEGMENT
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


# Every field MCP defines for a content block (text, image, audio, resource_link, embedded resource),
# as allowlist paths under one block: blocks pass as the tool sent them, whatever their type. A
# block's `_meta` is free-form structure nobody reviewed and is the one thing left out.
CONTENT_BLOCK_FIELDS = (
    "type",
    "text",
    "data",
    "mimeType",
    "uri",
    "name",
    "title",
    "description",
    "size",
    "icons[].src",
    "icons[].mimeType",
    "icons[].sizes",
    "icons[].theme",
    "annotations.audience",
    "annotations.priority",
    "annotations.lastModified",
    "resource.uri",
    "resource.mimeType",
    "resource.text",
    "resource.blob",
)
CONTENT_ALLOWLIST = tuple(f"content[].{path}" for path in CONTENT_BLOCK_FIELDS)
_CONTENT_TRIE = compile_allowlist(CONTENT_ALLOWLIST)


def redact_content(blocks: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], ...]:
    """Content blocks cut to the fields MCP defines for them (each block keeps its own type's fields)."""
    kept = _redact({"content": list(blocks)}, _CONTENT_TRIE, "")
    return tuple(_in_order(block, original) for block, original in zip(kept.get("content") or (), blocks, strict=True))


def _in_order(kept: Any, original: Any) -> Any:
    """`kept` with its keys in `original`'s order: a block reads as it was sent, not in the allowlist's order."""
    if isinstance(kept, Mapping) and isinstance(original, Mapping):
        return {key: _in_order(kept[key], original[key]) for key in original if key in kept}
    if isinstance(kept, list) and isinstance(original, list):
        return [_in_order(item, source) for item, source in zip(kept, original, strict=True)]
    return kept


# Shorter fragments would match ordinary text and withhold honest outputs; real tokens are far longer.
MIN_CREDENTIAL_FRAGMENT = 8


def credential_fragments(headers: Mapping[str, str], access_token: str) -> frozenset[str]:
    """The strings that would give a call's credential away if they appeared in its output.

    The token itself, each auth header value, and each value's credential part
    without its scheme (`Basic` sends base64 of `user:password`, which does not
    contain the password as such), each in its `secret_fragments` forms.
    """
    candidates = {access_token}
    for value in headers.values():
        candidates.add(value)
        candidates.add(value.partition(" ")[2])
    return secret_fragments(candidates)


def secret_fragments(secrets: Iterable[str]) -> frozenset[str]:
    """What `carries_credential` looks for: each secret, and its base64 forms, all without whitespace.

    A secret is given away as well by its base64 (an upstream that "encodes" what it
    echoes) and by its pieces with spaces or line breaks between them: whitespace is
    dropped on both sides before comparing. Base64 is taken at each of the three byte
    offsets a secret can start at inside a larger encoded blob, standard and
    URL-safe alphabets, padding and the characters shared with neighbouring bytes
    left out, so the encoding is found inside a longer one too.
    """
    fragments: set[str] = set()
    for secret in secrets:
        squeezed = _squeeze(secret)
        if len(squeezed) < MIN_CREDENTIAL_FRAGMENT:
            continue
        fragments.add(squeezed)
        fragments.update(form for form in _base64_forms(secret.encode()) if len(form) >= MIN_CREDENTIAL_FRAGMENT)
    return frozenset(fragments)


def _base64_forms(secret: bytes) -> set[str]:
    forms = set()
    for offset, skip in ((0, 0), (1, 2), (2, 3)):
        data = bytes(offset) + secret
        whole_groups, rest = divmod(len(data), 3)
        encoded = base64.b64encode(data).decode("ascii")[skip : 4 * whole_groups + rest]
        forms.add(encoded)
        forms.add(encoded.replace("+", "-").replace("/", "_"))
    return forms


def _squeeze(text: str) -> str:
    return "".join(text.split())


def carries_credential(value: Any, fragments: frozenset[str]) -> bool:
    """Whether any string in `value` (keys included), whitespace dropped, contains one of `fragments`."""
    if isinstance(value, str):
        squeezed = _squeeze(value)
        return any(fragment in squeezed for fragment in fragments)
    if isinstance(value, Mapping):
        return any(
            carries_credential(key, fragments) or carries_credential(item, fragments) for key, item in value.items()
        )
    if isinstance(value, list | tuple):
        return any(carries_credential(item, fragments) for item in value)
    return False
