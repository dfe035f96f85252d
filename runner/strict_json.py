"""JSON text as the API accepts it: bounded depth, unique keys, finite numbers, clean strings.

One decoder for every place a caller's JSON text becomes data: request bodies
(policies_app's parser) and the JSON *inside* a JSON string, such as an OpenAI
tool call's `arguments`. Both must refuse the same documents, or a value the
body parser would have refused (a lone surrogate, NUL, a duplicate key)
arrives through the string and breaks later, far from its source. Messages
name the problem, never the input. Standard library only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, Final

MAX_JSON_DEPTH: Final = 32


class StrictJsonError(ValueError):
    """The text is not JSON the API accepts; the message is safe to show."""


class NotJson(StrictJsonError):
    """The text is not JSON at all (a syntax error), as opposed to JSON the API refuses."""


# Characters that change the scanner's state: quotes, escapes and brackets.
_STRUCTURAL = re.compile(r'["\\\[\]{}]')


def json_depth_exceeds(text: str, limit: int) -> bool:
    """Whether brackets outside strings nest deeper than `limit`, without recursion.

    Runs before `json.loads`, whose C scanner recurses once per level and would
    meet a RecursionError on a text of ten thousand `[`. For any text, the
    scanner agrees with JSON on what is inside a string up to the first syntax
    error, and json.loads stops there too.
    """
    if text.count("[") + text.count("{") <= limit:  # every level opens a bracket: no scan can find more
        return False
    depth = 0
    in_string = False
    escaped_at = -1  # the index of the character a backslash escapes
    for match in _STRUCTURAL.finditer(text):
        index, char = match.start(), match.group()
        if index == escaped_at:
            continue
        if in_string:
            if char == "\\":
                escaped_at = index + 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


def loads(text: str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The document `text` holds, or StrictJsonError naming what is wrong with it."""
    if json_depth_exceeds(text, max_depth):
        raise StrictJsonError(f"JSON nests deeper than {max_depth} levels")
    try:
        document = json.loads(
            text, object_pairs_hook=_unique_keys, parse_constant=_reject_constant, parse_float=_finite_float
        )
    except StrictJsonError:
        raise
    except (ValueError, RecursionError):  # JSONDecodeError, oversized integers
        raise NotJson("not valid JSON") from None
    if not _text_is_clean(text) and not strings_are_clean(document):
        raise StrictJsonError("JSON strings must not contain NUL characters or unpaired surrogates")
    return document


def strings_are_clean(document: Any) -> bool:
    """No key or string value of a parsed document holds NUL or a lone surrogate."""
    return all(_is_clean(string) for string in _strings(document))


def _text_is_clean(text: str) -> bool:
    """Whether no string of the document `text` holds can hold NUL or a lone surrogate, judged on the text alone.

    A string's characters are the text's own, or come from escapes; only a
    `\\u` escape can make NUL or a surrogate. With none in the text (a false
    alarm, such as an escaped backslash before `u`, only costs the full check),
    a clean text makes clean strings: one scan of the text in C instead of one
    look per key and string of the document.
    """
    return "\\u" not in text and _is_clean(text)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise StrictJsonError("duplicate key in a JSON object")
    return result


def _reject_constant(name: str) -> Any:
    raise StrictJsonError("NaN and Infinity are not valid JSON numbers")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):  # 1e999 parses to infinity without asking parse_constant
        raise StrictJsonError("NaN and Infinity are not valid JSON numbers")
    return value


def _strings(value: Any) -> Iterator[str]:
    """Every key and string value of a parsed document (depth already bounded)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            yield from item.keys()
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _is_clean(text: str) -> bool:
    """No NUL (PostgreSQL refuses it) and no lone surrogate (UTF-8 cannot encode it)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
