"""An upstream's questions across the client's retries: the sealed state of a round, and the answers' checks.

A 2026-07-28 `tools/call` whose upstream asks the client (gateway/asking.py)
answers an `InputRequiredResult` whose `requestState` is Toolgate's own, not the
upstream's: the upstream's state sealed inside it (AES-GCM with the key ring),
bound in its associated data to the service account and inside to the person,
the tool, a digest of the arguments, what was asked (each key and its method),
how many sampling requests the call has passed so far, the round, and a short
expiry. It is single use (a nonce claimed in the shared cache). So the upstream
never sees a state the client made up, the client never sees the upstream's,
and a retry answers exactly the questions it was asked, once (docs/mcp-asking.md).

This state is told apart from an approval's (gateway/elicitation.py) by its
binding: one never opens as the other.

A 2025-11-25 client has no `InputRequiredResult`: it is asked on the event
stream of its call, as a request of Toolgate's, and answers with a JSON-RPC
response POSTed to /mcp, which any web worker may receive. The answer crosses
to the worker holding the stream through the shared cache: `question_open`
names the question (an unguessable id, bound to the caller), `answer_deliver`
files the first answer from that caller, `answer_await` waits for it.

A 2025-11-25 upstream asks mid-call and waits on its connection; behind a
2026-07-28 client that call is *held* (gateway/upstream/held.py) on the event
loop of the worker that made it, and its question is asked through the same
mailbox: the round's state names the question (`InputRound.held`), the retry
files its answer for it (`answer_file`) from whichever worker it reaches, and
the held call files what it did next (`held_step_file`: its result, its next
question, its failure) under the question answered, for that worker to take.
A state whose held call no longer waits for its answer opens as nothing.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from django.core.cache import cache

from core.crypto import CredentialError, KeyRing, open_json, seal_json
from gateway.asking import answer_model
from gateway.elicitation import decode_state, encode_state
from runner.asking import ELICITATION, SAMPLING, AskUnanswered, ClientInput, InputAsk
from runner.pipeline import args_digest

ROUND_TTL_S: Final = 600  # a person reads a question, or a model samples, within this
MAX_ROUNDS: Final = 10  # the SDK client's own default cap on rounds
MAX_STATE_CHARS: Final = 24 * 1024  # the upstream's state (16 KiB at most) sealed, in base64
_VERSION: Final = 1
_USED_PREFIX: Final = "mcp-input-round-used:"
QUESTION_ID_PREFIX: Final = "toolgate-q-"
ANSWER_WAIT_S: Final = 300  # a 2025-era client's person answers within this, or the call ends
ANSWER_POLL_S: Final = 0.1
_QUESTION_PREFIX: Final = "mcp-question:"
_ANSWER_PREFIX: Final = "mcp-answer:"
_STEP_PREFIX: Final = "mcp-held-step:"
ANSWER_KIND: Final[Mapping[str, str]] = {ELICITATION: "action", SAMPLING: "model"}


@dataclass(frozen=True, slots=True)
class InputRound:
    """An opened state: the upstream's own, what was asked (key → method), sampling so far, the round,
    and the question of the held call its answer goes to (None: the upstream is called again)."""

    upstream_state: str | None
    asked: Mapping[str, str]
    samples_used: int
    round: int
    held: str | None = None


@dataclass(frozen=True, slots=True)
class OpenedRound:
    """A retry's round: its opened state and the client's answers, checked against what it asked."""

    state: InputRound
    answers: dict[str, dict[str, Any]]

    @property
    def round(self) -> int:
        return self.state.round


class AnswersRefused(ValueError):
    """The retry's `inputResponses` do not answer what the round asked (keys, kinds or shapes)."""


def _binding(service_account_id: str) -> dict[str, str]:
    return {"mcp_input_round": service_account_id}


def input_round_seal(
    *, service_account_id: str, subject_id: str, tool_id: str, args: Any, ask: InputAsk, before: InputRound | None
) -> str:
    """The requestState of the next round of this call."""
    claims = {
        "v": _VERSION,
        "sub": subject_id,
        "tool": tool_id,
        "args": args_digest(args) or "",
        "up": ask.upstream_state,
        "asked": {key: str(request["method"]) for key, request in ask.requests.items()},
        "samples": (before.samples_used if before is not None else 0) + ask.samples,
        "round": (before.round if before is not None else 0) + 1,
        "held": ask.held,
        "exp": int(time.time()) + ROUND_TTL_S,
        "nonce": secrets.token_urlsafe(16),
    }
    sealed = seal_json(claims, binding=_binding(service_account_id), ring=KeyRing.from_settings())
    return encode_state(sealed.blob)


def input_round_open(
    token: str, *, service_account_id: str, subject_id: str, tool_id: str, args: Any, responses: Any
) -> OpenedRound | None:
    """The round an echoed state continues with its checked answers, or None for a forged, stale,
    replayed or misbound state, or one whose held call no longer waits for the answer;
    AnswersRefused when the answers do not answer what it asked.

    The nonce is claimed last, so a state refused for another reason (answers
    included) is not spent by the attempt: the client may answer again.
    """
    blob = decode_state(token) if len(token) <= MAX_STATE_CHARS else None
    if blob is None:
        return None
    try:
        claims = open_json(blob, binding=_binding(service_account_id), ring=KeyRing.from_settings())
    except (CredentialError, ValueError):
        return None
    asked, expiry, upstream, held = claims.get("asked"), claims.get("exp"), claims.get("up"), claims.get("held")
    bound = (
        claims.get("v") == _VERSION
        and claims.get("sub") == subject_id
        and claims.get("tool") == tool_id
        and claims.get("args") == (args_digest(args) or "")
        and isinstance(expiry, int)
        and expiry > time.time()
        and isinstance(asked, dict)
        and (upstream is None or isinstance(upstream, str))
        and (held is None or (isinstance(held, str) and question_waiting(service_account_id, held)))
        and isinstance(claims.get("samples"), int)
        and isinstance(claims.get("round"), int)
        and isinstance(claims.get("nonce"), str)
    )
    if not bound:
        return None
    state = InputRound(
        upstream_state=upstream,  # type: ignore[arg-type]
        asked={str(key): str(method) for key, method in asked.items()},  # type: ignore[union-attr]
        samples_used=int(claims["samples"]),  # type: ignore[call-overload]
        round=int(claims["round"]),  # type: ignore[call-overload]
        held=held,  # type: ignore[arg-type]
    )
    answers = checked_answers(responses, state)
    if not cache.add(f"{_USED_PREFIX}{claims['nonce']}", 1, timeout=ROUND_TTL_S + 60):
        return None  # already used once
    return OpenedRound(state, answers)


def checked_answers(responses: Any, opened: InputRound) -> dict[str, dict[str, Any]]:
    """The retry's answers, one per question asked and of its kind; AnswersRefused otherwise."""
    if not opened.asked:
        if responses not in (None, {}):
            raise AnswersRefused("this round asked nothing, so inputResponses must be absent")
        return {}
    if not isinstance(responses, Mapping):
        raise AnswersRefused("inputResponses must be an object answering each question asked")
    if set(responses) != set(opened.asked):
        raise AnswersRefused("inputResponses must answer exactly the questions asked, by their keys")
    answers: dict[str, dict[str, Any]] = {}
    for key, answer in responses.items():
        if not isinstance(answer, Mapping) or ANSWER_KIND[opened.asked[key]] not in answer:
            raise AnswersRefused(f"inputResponses.{key[:64]} does not answer a {opened.asked[key]} request")
        try:
            answers[key] = answer_model(answer).model_dump(mode="json", by_alias=True, exclude_none=True)
        except ValueError:
            raise AnswersRefused(f"inputResponses.{key[:64]} is not a valid answer") from None
    return answers


def client_input(
    *,
    elicitation: bool,
    sampling: bool,
    opened: OpenedRound | None,
    ask_now: Callable[[str, Mapping[str, Any], Callable[[], bool]], Mapping[str, Any]] | None = None,
    rounds: bool = False,
) -> ClientInput:
    """What the runner's tool reads: what the client can answer, and this retry's answers and state.

    `rounds`: the client takes InputRequiredResult rounds (2026-07-28), so an upstream's
    mid-call question may be held for its retry.
    """
    if opened is None:
        return ClientInput(elicitation=elicitation, sampling=sampling, ask_now=ask_now, rounds=rounds)
    return ClientInput(
        elicitation=elicitation,
        sampling=sampling,
        responses=opened.answers,
        upstream_state=opened.state.upstream_state,
        samples_used=opened.state.samples_used,
        ask_now=ask_now,
        rounds=rounds,
        held=opened.state.held,
    )


def round_on_stream(ask: InputAsk, answers: Any, before: InputRound | None) -> OpenedRound:
    """The next round of a call whose client answered on its stream (the state stays in this process)."""
    state = InputRound(
        upstream_state=ask.upstream_state,
        asked={key: str(request["method"]) for key, request in ask.requests.items()},
        samples_used=(before.samples_used if before is not None else 0) + ask.samples,
        round=(before.round if before is not None else 0) + 1,
    )
    return OpenedRound(state, checked_answers(answers, state))


# --- answers of 2025-era clients, across web workers -----------------------------------------


def question_open(caller_key: str) -> str:
    """A new question's JSON-RPC id: unguessable, and answerable only by `caller_key`."""
    question_id = QUESTION_ID_PREFIX + secrets.token_urlsafe(18)
    cache.set(f"{_QUESTION_PREFIX}{question_id}", caller_key, timeout=ANSWER_WAIT_S + 60)
    return question_id


def answer_deliver(caller_key: str, message: Any) -> bool:
    """File a client's JSON-RPC response to a question Toolgate asked it; False for anything else.

    Only the caller it was asked of may answer, and only the first answer counts.
    """
    if not isinstance(message, Mapping) or "method" in message:
        return False
    question_id = message.get("id")
    if not isinstance(question_id, str) or not question_id.startswith(QUESTION_ID_PREFIX) or len(question_id) > 64:
        return False
    if cache.get(f"{_QUESTION_PREFIX}{question_id}") != caller_key:
        return False
    if isinstance(message.get("result"), Mapping):
        answer: dict[str, Any] = {"result": dict(message["result"])}
    elif "error" in message:
        answer = {"error": True}
    else:
        return False
    cache.add(f"{_ANSWER_PREFIX}{question_id}", answer, timeout=ANSWER_WAIT_S + 60)
    return True


def answer_await(question_id: str, *, gone: Callable[[], bool], wait_s: float = ANSWER_WAIT_S) -> Mapping[str, Any]:
    """The answer to a question, once filed; AskUnanswered when the client refuses, goes away or takes too long."""
    deadline = time.monotonic() + wait_s
    try:
        while (answer := _answer_by(question_id, deadline, wait_s, gone)) is None:
            time.sleep(ANSWER_POLL_S)
        return answer
    finally:
        question_close(question_id)


def _answer_by(question_id: str, deadline: float, wait_s: float, gone: Callable[[], bool]) -> Mapping[str, Any] | None:
    """One look for the answer (both waits poll through it): None to look again, AskUnanswered to stop."""
    answer = answer_filed(question_id)
    if answer is not None:
        return answer
    if gone():
        raise AskUnanswered("the client went away before it answered")
    if time.monotonic() >= deadline:
        raise AskUnanswered(f"the client did not answer within {int(wait_s)} s")
    return None


def answer_filed(question_id: str) -> Mapping[str, Any] | None:
    """The answer filed for a question, None while there is none; AskUnanswered when the client refused it."""
    answer = cache.get(f"{_ANSWER_PREFIX}{question_id}")
    if not isinstance(answer, Mapping):
        return None
    if "result" not in answer:
        raise AskUnanswered("the client refused the question")
    return answer["result"]


def question_close(question_id: str) -> None:
    """The question is no longer asked: a late answer for it is refused, and a state naming it opens as nothing."""
    cache.delete_many([f"{_QUESTION_PREFIX}{question_id}", f"{_ANSWER_PREFIX}{question_id}"])


def question_waiting(caller_key: str, question_id: str) -> bool:
    """Whether a question asked of `caller_key` still waits for its answer (the call asking it is alive)."""
    return question_id.startswith(QUESTION_ID_PREFIX) and cache.get(f"{_QUESTION_PREFIX}{question_id}") == caller_key


# --- held calls: a 2025-11-25 upstream's question answered by a 2026-07-28 client's retry --------


def answer_file(caller_key: str, question_id: str, answer: Mapping[str, Any]) -> bool:
    """File a retry's answer (checked against the round's question) for a held call; False when it waits no more."""
    return answer_deliver(caller_key, {"id": question_id, "result": dict(answer)})


async def answer_await_held(question_id: str, *, wait_s: float) -> Mapping[str, Any]:
    """`answer_await` for a held call, on the event loop: polling the cache holds no thread for the wait."""
    deadline = time.monotonic() + wait_s
    try:
        while (answer := await asyncio.to_thread(_answer_by, question_id, deadline, wait_s, _never)) is None:
            await asyncio.sleep(ANSWER_POLL_S)
        return answer
    finally:
        await asyncio.shield(asyncio.to_thread(question_close, question_id))


def _never() -> bool:
    return False  # a held call's client is not connected while it thinks: only the wait ends it


def held_step_file(question_id: str, step: Mapping[str, Any]) -> None:
    """What the held call did after the answer to `question_id`: for the worker that delivered it to take."""
    cache.set(f"{_STEP_PREFIX}{question_id}", dict(step), timeout=ANSWER_WAIT_S + 60)


async def held_step_await(question_id: str) -> Mapping[str, Any]:
    """What the held call did after this answer, once filed; the caller's budget cuts the wait."""
    key = f"{_STEP_PREFIX}{question_id}"
    while True:
        step = await asyncio.to_thread(cache.get, key)
        if isinstance(step, Mapping):
            await asyncio.to_thread(cache.delete, key)
            return step
        await asyncio.sleep(ANSWER_POLL_S)
