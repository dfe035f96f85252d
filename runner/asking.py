"""An upstream tool that asks the caller's client for input mid-call: elicitation and sampling.

Why a context variable, as for progress (runner/progress.py): the interface
that can relay a question (the MCP endpoint, when its client declared it can
answer one) and the tool that asks (an upstream MCP tool) are at the two ends
of the pipeline. The interface sets `ClientInput` (what the client can answer,
and on a retry what it answered); the tool reads it. Unset, a tool declares
nothing to its upstream and nothing changes.

A tool whose upstream asks raises `InputAsked`. The execute stage checks the
sampling requests against the policy's per-call cap (`Budgets.max_samples_per_call`,
none by default) and answers `input_required` with the asks, so the round is
audited like any call and the interface hands the questions to the client.
The client's answers come back on a retry, which runs the whole pipeline again.

A 2025-11-25 upstream asks mid-call instead, and waits on its connection. For a
client that takes rounds (`ClientInput.rounds`) the interface's adapter holds
that call open across the client's retry (gateway/upstream/held.py): the round
still ends `input_required` here, and the retry's answers (`ClientInput.held`
names the question they answer) go to the held call rather than to a new one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Final

ELICITATION: Final = "elicitation/create"
SAMPLING: Final = "sampling/createMessage"


@dataclass(frozen=True, slots=True)
class ClientInput:
    """What the caller's client can answer for this call, and what it answered on this retry.

    `responses` and `upstream_state` come from a retry whose sealed state the
    interface opened: they are the client's answers to the asks it was given and
    the upstream's own state, passed back as they were. `samples_used` counts the
    sampling requests earlier rounds of this call already asked.
    """

    elicitation: bool = False
    sampling: bool = False
    responses: Mapping[str, Any] | None = None
    upstream_state: str | None = None
    samples_used: int = 0
    # A 2025-era client streaming this call: ask it one question now (method, params) and wait for its
    # answer, giving up when the third argument says so (blocking; raises AskUnanswered). An upstream
    # that asks mid-call (2025-11-25) is answered through it.
    ask_now: Callable[[str, Mapping[str, Any], Callable[[], bool]], Mapping[str, Any]] | None = None
    # The caller's policy's sampling cap, set by the execute stage for the tool that asks mid-call.
    sample_cap: int = 0
    # A 2026-07-28 client: it takes InputRequiredResult rounds, so a question an upstream asks mid-call
    # (2025-11-25) can wait for its retry, the upstream's call held open meanwhile.
    rounds: bool = False
    # On a retry of such a round: the held call's question these `responses` answer (from the sealed state).
    held: str | None = None


@dataclass(frozen=True, slots=True)
class InputAsk:
    """The questions of one round: `requests` by the upstream's keys, and its opaque state.

    `held` names the question of a held call (a 2025-11-25 upstream waiting mid-call) that
    this round's answer goes to; the round's state then carries no upstream state.
    """

    requests: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    upstream_state: str | None = None
    held: str | None = None

    @property
    def samples(self) -> int:
        return sum(1 for request in self.requests.values() if request.get("method") == SAMPLING)


class AskUnanswered(Exception):
    """The client did not answer a question asked on its stream: it went away, or took too long."""


class InputAsked(Exception):
    """Raised by a tool whose upstream asked the client for input; the execute stage answers it."""

    def __init__(self, ask: InputAsk) -> None:
        super().__init__("the upstream asks the client for input")
        self.ask = ask


CALL_INPUT: ContextVar[ClientInput | None] = ContextVar("toolgate_call_input", default=None)
