"""CEL conditions of argument rules: checked when saved, compiled once per governance generation.

The implementation is `cel-expr-python`, the CEL maintainers' Python binding of
cel-cpp (requirements.txt says why it was chosen over the others). It parses
and type-checks at compile time (a syntax or type error is refused at save with
its position), evaluates in a few microseconds, and its `matches()` is RE2:
linear time, so no regular expression in a rule, or in an argument a rule
matches against, can backtrack.

Cost is bounded twice. At run time cel-cpp stops any evaluation after 10,000
comprehension iterations ("Iteration budget exceeded", about 2 ms here), and
that error is a refusal like any other. At save, a condition is bounded in
length and nesting depth, in the number of comprehensions, none nested in
another, and `map()`/`filter()` are refused (cel-cpp builds their lists in
quadratic time). Figures are in docs/rules.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any

from cel_expr_python import cel

from runner.rules import ConditionError

MAX_CONDITION_CHARS = 2000
MAX_NESTING = 12
MAX_COMPREHENSIONS = 4
COMPREHENSIONS = frozenset({"all", "exists", "exists_one"})
# map() and filter() build a new list item by item, which cel-cpp does in quadratic time (a map over 4000 items
# took 320 ms here): refused; all/exists/exists_one say the same without building anything.
LIST_BUILDERS = frozenset({"map", "filter"})
VARIABLES = ("args", "tool", "caller", "subject", "connection", "now")
_MAP = cel.Type.Map(cel.Type.STRING, cel.Type.DYN)
_ENV = cel.NewEnv(
    variables={
        "args": _MAP,
        "tool": _MAP,
        "caller": _MAP,
        "subject": _MAP,
        "connection": _MAP,
        "now": cel.Type.TIMESTAMP,
    }
)
_OPENERS, _CLOSERS = "([{", ")]}"
_MACRO = re.compile(r"\.\s*([a-z_]+)\s*\(")
# matches("...") / matches('...') / matches(r"...") with the pattern written in the rule.
_LITERAL_PATTERN = re.compile(r"""matches\(\s*((?:[rR])?(?:"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'))\s*\)""")
_ERROR_TAIL = re.compile(r"\s*\[[A-Z_]+\]\s*$")


class ConditionInvalid(ValueError):
    """A condition that cannot be saved: the message says where and what, for the operator."""


def condition_problem(source: str) -> str | None:
    """Why `source` cannot be a rule's condition (syntax, types, size, nesting), or None."""
    try:
        condition_compile(source)
    except ConditionInvalid as exc:
        return str(exc)
    return None


def condition_compile(source: str) -> Any:
    """The compiled condition; ConditionInvalid when it is malformed, mistyped or too costly to run."""
    _check_shape(source)
    return _compiled(source)


@lru_cache(maxsize=4096)
def _compiled(source: str) -> Any:
    """Compiled once per text: a new generation reuses the programs of rules that did not change."""
    try:
        expression = _ENV.compile(source)
    except RuntimeError as exc:
        raise ConditionInvalid(_compile_message(str(exc))) from None
    _check_literal_patterns(source)
    returns = expression.return_type()
    if returns not in (cel.Type.BOOL, cel.Type.DYN):
        raise ConditionInvalid(f"a condition must be true or false; this one gives a {returns.name()}")
    return expression


def _check_literal_patterns(source: str) -> None:
    """A `matches()` whose pattern is written in the rule must be a valid RE2 pattern now, not at the first call."""
    for match in _LITERAL_PATTERN.finditer(source):
        probe = _ENV.compile(f'"".matches({match.group(1)})')
        value = probe.eval(data={})
        if value.type() == cel.Type.ERROR:
            problem = str(value.value()).partition("regular expression: ")[2] or "not a valid pattern"
            raise ConditionInvalid(
                f"at column {match.start(1) + 1}: the pattern of matches() is not valid RE2 ({problem}); "
                "look-around and back-references do not exist in RE2"
            )


def _compile_message(text: str) -> str:
    text = text.removeprefix("INVALID_ARGUMENT: ")
    return _ERROR_TAIL.sub("", text).removeprefix("ERROR: ").replace("<input>:", "at ").strip()


def _check_shape(source: str) -> None:
    if not source.strip():
        raise ConditionInvalid("the condition is empty; write e.g. args.amount > 100")
    if len(source) > MAX_CONDITION_CHARS:
        raise ConditionInvalid(
            f"the condition is {len(source)} characters; at most {MAX_CONDITION_CHARS} (split it into rules)"
        )
    code = _without_strings(source)
    depth = deepest = 0
    open_macros: list[int] = []  # the depth at which each comprehension still open began
    macros = 0
    position = 0
    for match in re.finditer(r"[()\[\]{}]|\.\s*[a-z_]+\s*\(", code):
        token = match.group(0)
        position = match.start()
        if token in _OPENERS or token.endswith("("):
            depth += 1
            deepest = max(deepest, depth)
            name = _MACRO.fullmatch(token)
            if name is not None and name.group(1) in LIST_BUILDERS:
                raise ConditionInvalid(
                    f"at column {position + 1}: {name.group(1)}() builds a list at a cost that grows with the square "
                    "of its size; say it with all(), exists() or exists_one()"
                )
            if name is not None and name.group(1) in COMPREHENSIONS:
                macros += 1
                if open_macros:
                    raise ConditionInvalid(
                        f"at column {position + 1}: a comprehension ({name.group(1)}) inside another one; "
                        "their cost multiplies with the arguments' size. Write one rule per list"
                    )
                open_macros.append(depth)
        elif token in _CLOSERS:
            if open_macros and open_macros[-1] == depth:
                open_macros.pop()
            depth -= 1
    if deepest > MAX_NESTING:
        raise ConditionInvalid(f"the condition nests {deepest} levels deep; at most {MAX_NESTING}")
    if macros > MAX_COMPREHENSIONS:
        raise ConditionInvalid(f"the condition has {macros} comprehensions; at most {MAX_COMPREHENSIONS}")


def _without_strings(source: str) -> str:
    """`source` with every string literal's contents blanked (same length), so brackets in strings do not count."""
    out = []
    quote: str | None = None
    escaped = False
    for char in source:
        if quote is None:
            if char in "'\"":
                quote = char
            out.append(char)
            continue
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == quote:
            quote = None
            out.append(char)
            continue
        out.append(" ")
    return "".join(out)


def activation(variables: Mapping[str, Any]) -> Any:
    """The variables as one CEL activation, built once per call and read by every rule's condition."""
    return _ENV.Activation(_cel_ready(variables))


def _cel_ready(variables: Mapping[str, Any]) -> dict[str, Any]:
    ready = dict(variables)
    now = ready.get("now")
    if not isinstance(now, datetime):
        raise ConditionError("the call has no time")
    return ready


def condition_evaluate(expression: Any, prepared: Any) -> bool:
    """Evaluate a compiled condition; any error, or an answer that is not a bool, raises ConditionError."""
    try:
        value = expression.eval(prepared)
    except Exception as exc:  # the binding raises on values it cannot convert
        raise ConditionError(_runtime_message(str(exc))) from None
    if value.type() == cel.Type.ERROR:
        raise ConditionError(_runtime_message(str(value.value())))
    result = value.plain_value()
    if not isinstance(result, bool):
        raise ConditionError("the condition did not give true or false")
    return result


def _runtime_message(text: str) -> str:
    """cel-cpp's error, shortened: it names keys and overloads of the rule, never an argument's value."""
    text = re.sub(r"^[A-Z_]+: ", "", text).strip()
    if text.startswith("Key not found in map"):
        key = text.partition(":")[2].strip()
        return f"no field {key} (guard it with has())"
    if text.startswith("No matching overloads"):
        return "a value has another type than the condition expects: " + text.partition(":")[2].strip()
    return text[:160]
