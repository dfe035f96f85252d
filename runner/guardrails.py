"""Result guardrails: secrets in what a tool answers, found after allowlist redaction and before the result budget.

Allowlist redaction decides which fields may leave; it cannot know that an
allowed `text` holds a cloud key or a private key a filesystem server read.
A guard scans every string of the redacted value and of the content blocks
(text and embedded resources) with its detectors and then:

- `redact`: each match becomes `[redacted: <label>]`, the rest passes;
- `withhold`: the whole result is replaced by a tool error the model can read;
- `record`: the result passes unchanged; the audit row says what was seen.

Every guard covering the tool applies (they add up across scopes: a tenant
cannot switch off a global secret guard), and the strictest action among the
guards that found something decides. The audit row records the guards, the
action and how many matches of each kind, never the matched text.

A guard may also scan a call's arguments (`arguments`: refuse or record),
after input validation and before any rule, approval or credential: a model
that pastes a private key into a call's arguments is stopped before the tool
or a person's approval page sees it (`scan_arguments`).

Detectors are compiled by the adapter (linear-time RE2 patterns for the
built-in table and operators' lists): the runner only calls `finditer`/`sub`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from runner.types import ToolSpec


class GuardAction(enum.StrEnum):
    REDACT = "redact"
    WITHHOLD = "withhold"
    RECORD = "record"


class ArgumentScan(enum.StrEnum):
    """What a guard does with a secret in a call's arguments (its result action is separate)."""

    IGNORE = "ignore"  # the guard looks at results only
    REFUSE = "refuse"  # the call is refused before it runs, with the guard's message
    RECORD = "record"  # the call goes on; the audit row says what was seen


GUARD_STRICTNESS = {GuardAction.WITHHOLD: 2, GuardAction.REDACT: 1, GuardAction.RECORD: 0}


class Pattern(Protocol):
    """What a detector needs of a compiled regular expression (`re` and RE2 both fit)."""

    def search(self, text: str) -> Any: ...

    def sub(self, repl: Any, text: str) -> str: ...


@dataclass(frozen=True, slots=True)
class Detector:
    """One kind of secret: a label for the replacement and the audit (`aws key`), and its pattern."""

    label: str
    pattern: Pattern = field(repr=False)


@dataclass(frozen=True, slots=True)
class ResultGuard:
    guard_id: str
    name: str
    action: GuardAction
    message: str
    detectors: tuple[Detector, ...]
    covers: Callable[[ToolSpec], bool] = field(repr=False)
    arguments: ArgumentScan = ArgumentScan.IGNORE


@dataclass(frozen=True, slots=True)
class GuardOutcome:
    """What the guards did to one result: the deciding action, the guards that found something, counts per label."""

    action: GuardAction
    guard_ids: tuple[str, ...]
    counts: Mapping[str, int]
    message: str

    def audit(self) -> dict[str, Any]:
        return {"action": self.action.value, "guards": list(self.guard_ids), "found": dict(self.counts)}


@dataclass(frozen=True, slots=True)
class ArgumentFinding:
    """Secrets the guards found in a call's arguments: refuse or record, the guards, counts per label."""

    action: ArgumentScan
    guard_ids: tuple[str, ...]
    counts: Mapping[str, int]
    message: str

    def audit(self) -> dict[str, Any]:
        return {"action": self.action.value, "guards": list(self.guard_ids), "found": dict(self.counts)}

    def refusal(self) -> str:
        """What the model reads: the operator's words, else what was found and what to do instead."""
        kinds = ", ".join(self.counts)
        return self.message or f"the arguments carry a secret ({kinds}); send the call without it"


def redaction_mark(label: str) -> str:
    return f"[redacted: {label}]"


@dataclass(slots=True)
class _Scan:
    detectors: Sequence[tuple[str, Detector]]  # (guard id, detector)
    replace: bool
    counts: dict[str, int] = field(default_factory=dict)
    guards: set[str] = field(default_factory=set)

    def text(self, value: str) -> str:
        for guard_id, detector in self.detectors:
            if detector.pattern.search(value) is None:
                continue
            found = 0

            def mark(_match: Any, label: str = detector.label) -> str:
                nonlocal found
                found += 1
                return redaction_mark(label)

            replaced = detector.pattern.sub(mark, value)
            self.counts[detector.label] = self.counts.get(detector.label, 0) + found
            self.guards.add(guard_id)
            if self.replace:
                value = replaced
        return value

    def walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {key: self.walk(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.walk(item) for item in value]
        return value


def guards_for(guards: Sequence[ResultGuard], spec: ToolSpec) -> list[ResultGuard]:
    return [guard for guard in guards if guard.covers(spec)]


def scan(
    guards: Sequence[ResultGuard], value: Any, content: tuple[Mapping[str, Any], ...] | None
) -> tuple[Any, tuple[dict[str, Any], ...] | None, GuardOutcome | None]:
    """The value and blocks with the guards applied, and what they found (None: nothing).

    One pass finds; only when a redacting guard found something is a second,
    replacing pass made, so a clean result costs one search per string and detector.
    """
    detectors = [(guard.guard_id, detector) for guard in guards for detector in guard.detectors]
    if not detectors:
        return value, _blocks(content), None
    finder = _Scan(detectors, replace=False)
    finder.walk(value)
    if content is not None:
        finder.walk(list(content))
    if not finder.guards:
        return value, _blocks(content), None
    finding = [guard for guard in guards if guard.guard_id in finder.guards]
    deciding = max(finding, key=lambda guard: GUARD_STRICTNESS[guard.action])
    outcome = GuardOutcome(
        action=deciding.action,
        guard_ids=tuple(sorted(finder.guards)),
        counts=dict(sorted(finder.counts.items())),
        message=deciding.message,
    )
    if deciding.action is not GuardAction.REDACT:
        return value, _blocks(content), outcome
    # Redact with the detectors of every guard that found something (a `record` guard's finds are redacted
    # too: the strictest action applies to the whole result).
    replacer = _Scan([(gid, d) for gid, d in detectors if gid in finder.guards], replace=True)
    redacted_value = replacer.walk(value)
    redacted_content = tuple(replacer.walk(dict(block)) for block in content) if content is not None else None
    return redacted_value, redacted_content, outcome


def scan_arguments(guards: Sequence[ResultGuard], args: Any) -> ArgumentFinding | None:
    """What the guards that scan arguments find in these (validated) arguments; None: nothing, or no such guard.

    Arguments are never rewritten: a tool handed `[redacted: ...]` would do
    something else than the model asked, so a secret refuses the call or is
    only recorded.
    """
    scanning = [guard for guard in guards if guard.arguments is not ArgumentScan.IGNORE]
    if not scanning:
        return None
    finder = _Scan([(guard.guard_id, detector) for guard in scanning for detector in guard.detectors], replace=False)
    finder.walk(args)
    if not finder.guards:
        return None
    finding = [guard for guard in scanning if guard.guard_id in finder.guards]
    refusing = [guard for guard in finding if guard.arguments is ArgumentScan.REFUSE]
    deciding = refusing[0] if refusing else finding[0]
    return ArgumentFinding(
        action=deciding.arguments,
        guard_ids=tuple(sorted(finder.guards)),
        counts=dict(sorted(finder.counts.items())),
        message=deciding.message,
    )


def _blocks(content: tuple[Mapping[str, Any], ...] | None) -> tuple[dict[str, Any], ...] | None:
    return tuple(dict(block) for block in content) if content is not None else None


def withheld_message(outcome: GuardOutcome) -> str:
    """What the model reads in place of a withheld result: the operator's words, else what was found."""
    kinds = ", ".join(outcome.counts)
    return outcome.message or f"the tool's result contained a secret ({kinds}) and was withheld"
