"""A 2025-11-25 upstream that asks mid-call, behind a 2026-07-28 client: the call held across the client's retry.

Such an upstream sends its question (elicitation, sampling) as a request on the
call's own stream and waits on that connection for the answer; a 2026-07-28
client answers only in a retry, a new HTTP request that any web worker may
receive. So the call is *held*: it runs as a task of this process's event loop
(the runner's background loop), not tied to the request that made it. Its first
question, vetted and counted like any (gateway/asking.py), ends that request's
round `input_required`, under a key of Toolgate's own (HELD_ASK_KEY) and a sealed
state that names the question; the call waits for the answer.

The retry, whichever worker it reaches, opens the state (gateway/input_rounds.py),
files the answer through the shared cache, and waits there for what the held call
did next: its result (which then runs through that worker's output pipeline), its
next question (the next round), or its failure. A question left unanswered for
ANSWER_WAIT_S cancels the upstream call (the SDK sends `notifications/cancelled`)
and closes its session; a state naming it then opens as nothing. A retry cut at
its budget while the call works on its answer files a cancellation for it
(gateway/inflight.py), which the holder reads and obeys the same way.

What a held call costs the worker holding it: an upstream connection and session,
and a cache read every ANSWER_POLL_S while it waits for an answer (every
CANCEL_POLL_S while it works on one); no thread is held.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from typing import Any, Final

import mcp_types as types

from gateway.asking import Asking, ask_refused
from gateway.inflight import CANCEL_POLL_S, cancel_file, cancel_filed
from gateway.input_rounds import ANSWER_WAIT_S as QUESTION_WAIT_S
from gateway.input_rounds import answer_await_held, answer_file, held_step_await, held_step_file, question_open
from gateway.upstream.client import UpstreamTarget, call_asking
from gateway.upstream.errors import UpstreamError
from runner.asking import AskUnanswered, ClientInput, InputAsk
from runner.errors import ToolFailure
from runner.redaction import carries_credential

HELD_ASK_KEY: Final = "toolgate_question"
# How long a held call waits for each answer: the question mailbox's wait (a module global, read per
# question, so a test can shorten it without a setting that exists only for tests).
ANSWER_WAIT_S: float = QUESTION_WAIT_S
CREDENTIAL_WITHHELD: Final = "upstream MCP server: its answer carries the connection's credential; it was withheld"
GONE: Final = "the held call no longer waits for this answer (it ended, or its wait ran out)"

# The calls of this process a question may hold (held, or before their first question): a task
# nobody awaits must be kept from the garbage collector.
_holding: set[asyncio.Task[Any]] = set()


async def call_for_client(
    target: UpstreamTarget,
    pinned: types.Tool,
    arguments: Mapping[str, Any],
    *,
    asking: Asking,
    client: ClientInput,
    caller_key: str,
    secrets: frozenset[str] = frozenset(),
) -> types.CallToolResult | InputAsk:
    """A call of a tool that may ask: a held call's next step, a call a question may hold, or one asked on the stream.

    `caller_key` (the service account) binds the held call's questions; `secrets` (the
    call's credential) keep a held call's result out of the cache when it would give it away.
    """
    if client.held is not None:
        return await held_continue(caller_key=caller_key, question_id=client.held, answers=client.responses or {})
    if client.rounds and client.ask_now is None:
        return await call_holding(
            target, pinned, arguments, asking=asking, client=client, caller_key=caller_key, secrets=secrets
        )
    return await call_asking(target, pinned, arguments, asking=asking, client=client)


class HeldCall:
    """One call that a mid-call question holds: the SDK's callbacks ask through it (`MidCallQuestions`).

    The first question resolves `first` (the round of the request that made the call);
    each later one, and the call's outcome, is filed under the question answered last,
    for the worker that delivered that answer. Questions go one at a time: a second
    one the upstream sends meanwhile waits for the first's answer.
    """

    def __init__(self, caller_key: str, secrets: frozenset[str]) -> None:
        self._caller_key = caller_key
        self._secrets = secrets
        self._one_at_a_time = asyncio.Lock()
        self._asked: str | None = None  # the question put to the client last
        self._watch: asyncio.Task[None] | None = None  # a cancellation filed by the worker awaiting the next step
        self.first: asyncio.Future[InputAsk] = asyncio.get_running_loop().create_future()
        self.task: asyncio.Task[Any] | None = None

    @property
    def holding(self) -> bool:
        """The request that made the call has its question: what the call does next goes through the cache."""
        return self.first.done()

    async def ask(self, method: str, params: Mapping[str, Any]) -> Mapping[str, Any]:
        async with self._one_at_a_time:
            question_id = await asyncio.to_thread(question_open, self._caller_key)
            request = {"method": method, "params": dict(params)}
            if not self.first.done():
                self.first.set_result(InputAsk(requests={HELD_ASK_KEY: request}, held=question_id))
            else:
                await self._file({"ask": {"question": question_id, "request": request}})
            self._asked = question_id
            try:
                answer = await answer_await_held(question_id, wait_s=ANSWER_WAIT_S)
            except AskUnanswered:
                self._cancel()
                raise
            self._watch = asyncio.get_running_loop().create_task(self._cancel_when_filed(question_id))
            return answer

    async def own(self, call: Awaitable[types.CallToolResult | InputAsk]) -> types.CallToolResult | InputAsk:
        """Run the call; once it is held, file its outcome for the worker waiting on the last answer."""
        try:
            outcome = await call
        except (UpstreamError, ToolFailure) as failed:
            if self.holding:
                await self._file(_failure_step(failed))
            raise
        finally:
            if self._watch is not None:
                self._watch.cancel()
        if self.holding:
            await self._file(self._outcome_step(outcome))
        return outcome

    async def _file(self, step: Mapping[str, Any]) -> None:
        """What the call did next, for the worker that delivered the last answer (it stops watching for a cancel)."""
        if self._watch is not None:
            self._watch.cancel()
        if self._asked is not None:
            await asyncio.to_thread(held_step_file, self._asked, step)

    async def _cancel_when_filed(self, question_id: str) -> None:
        """Cancel the call when the worker awaiting what follows this answer gave up (its budget ran out)."""
        while not await asyncio.to_thread(cancel_filed, self._caller_key, question_id):
            await asyncio.sleep(CANCEL_POLL_S)
        self._cancel()

    def _cancel(self) -> None:
        """Stop the upstream call: the SDK sends it `notifications/cancelled`, and the session closes."""
        if self.task is not None:
            self.task.cancel()

    def _outcome_step(self, outcome: types.CallToolResult | InputAsk) -> dict[str, Any]:
        if isinstance(outcome, InputAsk):  # an InputRequiredResult after a mid-call question: two eras at once
            return {"failure": str(ask_refused("it answered a held call with an InputRequiredResult"))}
        result = outcome.model_dump(mode="json", by_alias=True, exclude_none=True)
        if self._secrets and carries_credential(result, self._secrets):
            return {"failure": CREDENTIAL_WITHHELD}
        return {"result": result}


async def call_holding(
    target: UpstreamTarget,
    pinned: types.Tool,
    arguments: Mapping[str, Any],
    *,
    asking: Asking,
    client: ClientInput,
    caller_key: str,
    secrets: frozenset[str] = frozenset(),
) -> types.CallToolResult | InputAsk:
    """The call, in a task of its own: its result, its 2026 round's questions, or its first mid-call question (held).

    Until this request has handed the first question on, the call is its own: cut at its
    budget, it is cancelled (a question nobody was given must not be waited on).
    """
    held = HeldCall(caller_key, secrets)
    owner = asyncio.get_running_loop().create_task(
        held.own(call_asking(target, pinned, arguments, asking=asking, client=client, held=held)),
        name=f"mcp-held-{target.server_id}",
    )
    held.task = owner
    _holding.add(owner)
    owner.add_done_callback(_forget)
    try:
        await asyncio.wait((owner, held.first), return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        owner.cancel()
        raise
    if held.holding:
        return held.first.result()
    return owner.result()


async def held_continue(
    *, caller_key: str, question_id: str, answers: Mapping[str, Any]
) -> types.CallToolResult | InputAsk:
    """A retry's round of a held call: its answer filed for the call, then what the call did next.

    The wait is the retry's own budget (the runner cuts it); the answers were checked
    against the round's one question when its state was opened.
    """
    answer = answers.get(HELD_ASK_KEY)
    if not isinstance(answer, Mapping) or not await asyncio.to_thread(answer_file, caller_key, question_id, answer):
        raise ask_refused(GONE)
    try:
        step = await held_step_await(question_id)
    except asyncio.CancelledError:  # cut at this round's budget: the held call is stopped too, wherever it runs
        await asyncio.shield(asyncio.to_thread(cancel_file, caller_key, question_id))
        raise
    return _step_outcome(step)


def _failure_step(failed: UpstreamError | ToolFailure) -> dict[str, Any]:
    if isinstance(failed, UpstreamError):
        return {"error": {"kind": failed.kind, "message": failed.safe_message}}
    return {"failure": str(failed)}


def _step_outcome(step: Mapping[str, Any]) -> types.CallToolResult | InputAsk:
    """A filed step as the tool's outcome: a result, the next round's question, or the call's failure (raised)."""
    if "ask" in step:
        return InputAsk(requests={HELD_ASK_KEY: step["ask"]["request"]}, held=step["ask"]["question"])
    if "result" in step:
        return types.CallToolResult.model_validate(step["result"])
    if "error" in step:
        raise UpstreamError(step["error"]["kind"], step["error"]["message"])
    raise ToolFailure(str(step["failure"]))


def _forget(task: asyncio.Task[Any]) -> None:
    """A held call ended: let it go; its failure was filed for whoever waits (or it was its request's, and seen)."""
    _holding.discard(task)
    if not task.cancelled():
        task.exception()


def held_calls() -> int:
    """How many calls this process runs that a question may hold (held now, or not yet asking)."""
    return len(_holding)
