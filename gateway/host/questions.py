"""A stdio child's questions to the client (elicitation, sampling), held in the host between the worker's rounds.

Stdio children are mostly 2025-era servers: a tool that needs an answer sends the host a
request (`elicitation/create`, `sampling/createMessage`) mid-call and waits on the pipe. The
worker speaks 2026-07-28 to the host, statelessly: it has no stream a question could ride.
The host is one process, so it holds the child's waiting call in memory instead: the
question goes back to the worker as an `InputRequiredResult` whose `requestState` names the
held call, and the worker's retry (its answers and that state) resumes it. To the worker the
host is then a 2026-07-28 upstream like any other: it vets, seals, audits and asks the
client as it does for HTTP upstreams (gateway/asking.py, docs/mcp-asking.md).

What a call may be asked is what the worker declared on it (the tool's allowance ∩ the
client's capabilities, in the request's `_meta`). Every question is vetted here with the
worker's own rule (`vetted_request`: forms only, no roots, sampling only when declared), and
one carrying a declared secret is refused; a refused question is answered to the child with
an MCP error, and a call that then fails says why (REFUSAL_PREFIX + the reason), as the
HTTP path does.

A held question waits at most HOLD_S (the product's wait for a person elsewhere: the
question mailbox's 300 s). Unanswered by then, the child is told "decline" (an elicitation)
or an error (sampling), its call is cancelled shortly after, and the state is forgotten.
A state is good for one retry, on the child (server and connection) that asked, for the same
tool and arguments.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import mcp_types as types
from mcp_types.jsonrpc import INVALID_REQUEST

from gateway.asking import Asking, vetted_request
from runner.errors import ToolFailure
from runner.redaction import carries_credential, secret_fragments

HOLD_S: Final = 300.0
DECLINED_GRACE_S: Final = 5.0  # a declined child's call may end by itself this long before it is cancelled
QUESTION_KEY: Final = "ask"  # one question per round: a 2025-era child asks one at a time and waits
HELD_STATE_PREFIX: Final = "toolgate-host-held:"
REFUSAL_PREFIX: Final = "upstream MCP server: "
NOTHING: Final = Asking(elicitation=False, sampling=False)
SEVERAL_CALLS: Final = (
    "the stdio server asked the client a question while it served several calls at once, so nobody could "
    "tell whose it was; it was refused"
)
NOT_DECLARED: Final = (
    "the stdio server asked {what}, which this call may not ask (the tool is not allowed to, the client "
    "cannot answer, or the caller's policy allows no more sampling)"
)
HOLDS_A_DECLARED_VALUE: Final = "the stdio server's question carries a declared secret; it was not passed on"
NOT_ANSWERED: Final = f"the client did not answer the stdio server's question within {HOLD_S:g} s"
NOT_PASSED: Final = "Toolgate did not pass this request on"


@dataclass(eq=False)
class Question:
    """One request of the child, waiting for its answer."""

    request: types.ElicitRequest | types.CreateMessageRequest
    answer: asyncio.Future[Any]


class CallQuestions:
    """What one `tools/call` may be asked, and the questions its child asked during it.

    `asking` None: the worker declared nothing on the call (the tool may not ask, or the
    client cannot answer), so every question is refused. `problem` keeps the first reason
    a question was refused or left unanswered, for the call's error.
    """

    def __init__(self, asking: Asking | None, secret_values: tuple[str, ...], *, hold_s: float = HOLD_S) -> None:
        self.asking = asking or NOTHING
        self.problem: str | None = None
        self.pending: asyncio.Queue[Question] = asyncio.Queue()
        self.on_expired: Callable[[], None] = lambda: None
        self._fragments = secret_fragments(secret_values)
        self._hold_s = hold_s
        self._unanswered: set[Question] = set()
        self._closed = False

    def allow(self, asking: Asking | None) -> None:
        """What the call may ask from now on: the worker declares it again on each round."""
        self.asking = asking or NOTHING

    async def ask(self, request: types.ElicitRequest | types.CreateMessageRequest) -> Any:
        """The child's request, vetted, then waited on until the worker's retry answers it (or HOLD_S passes)."""
        if self._closed:
            return self.refuse("the stdio server asked a question after its call had ended")
        if isinstance(request, types.ElicitRequest) and not self.asking.elicitation:
            return self.refuse(NOT_DECLARED.format(what="the person a question (elicitation)"))
        if isinstance(request, types.CreateMessageRequest) and not self.asking.sampling:
            return self.refuse(NOT_DECLARED.format(what="the client's model to sample"))
        try:
            vetted_request(request, self.asking)
        except ToolFailure as refusal:
            return self.refuse(str(refusal).removeprefix(REFUSAL_PREFIX))
        if self._fragments and carries_credential(request.model_dump(mode="json", by_alias=True), self._fragments):
            return self.refuse(HOLDS_A_DECLARED_VALUE)
        question = Question(request=request, answer=asyncio.get_running_loop().create_future())
        self._unanswered.add(question)
        self.pending.put_nowait(question)
        try:
            async with asyncio.timeout(self._hold_s):
                return await asyncio.shield(question.answer)
        except TimeoutError:
            question.answer.cancel()  # done: never handed on, nor answered, after this
            self.problem = self.problem or NOT_ANSWERED
            self.on_expired()
            return declined(request)
        finally:
            self._unanswered.discard(question)

    def refuse(self, problem: str) -> types.ErrorData:
        self.problem = self.problem or problem
        return types.ErrorData(code=INVALID_REQUEST, message=NOT_PASSED)

    def close(self) -> None:
        """The call ended: questions still waiting are declined, later ones refused."""
        self._closed = True
        for question in list(self._unanswered):
            if not question.answer.done():
                question.answer.set_result(declined(question.request))

    def refused_result(self, result: types.CallToolResult | None) -> types.CallToolResult | None:
        """The call's failure in the host's words when a question was refused (None: pass the child's answer)."""
        if self.problem is None or (result is not None and not result.is_error):
            return None
        text = types.TextContent(type="text", text=f"{REFUSAL_PREFIX}{self.problem}")
        return types.CallToolResult(content=[text], is_error=True)


def declined(request: types.ElicitRequest | types.CreateMessageRequest) -> Any:
    """What the child is told for a question nobody answered: "decline" for a form, an error for sampling."""
    if isinstance(request, types.ElicitRequest):
        return types.ElicitResult(action="decline")
    return types.ErrorData(code=INVALID_REQUEST, message=NOT_PASSED)


def arguments_digest(name: str, arguments: Mapping[str, Any]) -> str:
    material = json.dumps([name, arguments], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(material.encode()).hexdigest()


@dataclass(eq=False)
class HeldCall:
    """A `tools/call` that may ask: the child's call in a task of its own (it outlives the worker's request)."""

    digest: str
    questions: CallQuestions
    task: asyncio.Task[types.CallToolResult]
    asked: Question | None = None
    token: str = field(default="", repr=False)

    def hold(self, question: Question) -> types.InputRequiredResult:
        """The question as the worker's InputRequiredResult, with a fresh state naming this held call."""
        self.asked = question
        self.token = secrets.token_urlsafe(24)
        return types.InputRequiredResult(
            input_requests={QUESTION_KEY: question.request}, request_state=f"{HELD_STATE_PREFIX}{self.token}"
        )


def token_of(request_state: str | None) -> str | None:
    if request_state is None or not request_state.startswith(HELD_STATE_PREFIX):
        return None
    return request_state.removeprefix(HELD_STATE_PREFIX)


def answer_for(question: Question, responses: Mapping[str, Any] | None) -> Any:
    """The worker's answer to the held question, as the child's request expects it; None when it does not answer it."""
    if not responses or set(responses) != {QUESTION_KEY}:
        return None
    answer = responses[QUESTION_KEY]
    if isinstance(question.request, types.ElicitRequest):
        return answer if isinstance(answer, types.ElicitResult) else None
    if isinstance(answer, types.CreateMessageResult | types.CreateMessageResultWithTools):
        return answer
    return None
