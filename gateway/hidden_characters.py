"""Characters a reviewer cannot see, in what an upstream sends: found, and written out where a person or model reads.

Every free text an upstream MCP server writes for someone else (tool and prompt
descriptions, resource names, questions it asks the client, progress and log
messages) passes here first, so what an operator reviewed is exactly what an
agent or a person is shown.
"""

from __future__ import annotations

import unicodedata

# Characters a reviewer cannot see that change what a model reads: format characters (bidirectional
# overrides and isolates, zero-width characters, the tag characters used to smuggle text), control
# characters other than tab and line breaks, line and paragraph separators, invisible fillers, and
# the variation selectors supplement. NUL is refused outright (upstream/definitions.py, check_definition).
_VISIBLE_CONTROLS = frozenset("\t\n\r\x00")
_HIDDEN_CATEGORIES = frozenset({"Cf", "Cc", "Zl", "Zp"})
_INVISIBLE_FILLERS = frozenset("\u115f\u1160\u3164\uffa0")
_VARIATION_SELECTORS_SUPPLEMENT = range(0xE0100, 0xE01F0)


def is_hidden_character(char: str) -> bool:
    if char in _VISIBLE_CONTROLS:
        return False
    return (
        unicodedata.category(char) in _HIDDEN_CATEGORIES
        or char in _INVISIBLE_FILLERS
        or ord(char) in _VARIATION_SELECTORS_SUPPLEMENT
    )


def visible_text(text: str) -> str:
    """`text` with every hidden character written out as `[U+XXXX]`: what agents and reviewers both see."""
    if not any(is_hidden_character(char) for char in text):
        return text
    return "".join(f"[U+{ord(char):04X}]" if is_hidden_character(char) else char for char in text)
