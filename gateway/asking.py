"""Upstream tools that ask the caller's client mid-call: the call that lets them, and what may pass.

A tool an operator allowed to ask (`McpTool.asks_allowed`: elicitation, sampling)
is called through a session of its own that declares exactly what both the tool
may ask and the caller's client can answer (runner/asking.py's `ClientInput`).
A 2026-07-28 upstream then answers `InputRequiredResult` (its questions and an
opaque `requestState`) instead of a result; Toolgate vets the questions and
hands them on, and the client's retry brings the answers back here, with the
upstream's state, for the next round (docs/mcp-asking.md).

What an upstream asks is untrusted text on its way to a person or a model:
- elicitation in form mode only (a URL-mode ask would send the person to a page
  nobody reviewed), with a flat schema of primitive fields, as the protocol
  defines forms;
- sampling only when the tool may ask it (the policy's per-call cap is the
  runner's to check); roots are never passed (Toolgate has none to offer);
- hidden characters written out as in descriptions; the whole ask and the
  upstream's state bounded.

The call itself is the adapter's (`client.call_asking`), the one module that
calls upstream tools; this module holds what may pass, without I/O.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import mcp_types as types
from mcp_types.jsonrpc import INVALID_REQUEST

from gateway.hidden_characters import visible_text
from runner.asking import ELICITATION, SAMPLING, AskUnanswered, ClientInput, InputAsk
from runner.errors import ToolFailure

MAX_ASKS_PER_ROUND: Final = 8
MAX_ASK_BYTES: Final = 64 * 1024
MAX_UPSTREAM_STATE_CHARS: Final = 16 * 1024
ASK_KEY: Final = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
FORM_FIELD_TYPES: Final = frozenset({"string", "number", "integer", "boolean"})
NOT_RELAYED: Final = (
    "it asked the client a question on the call's stream (MCP 2025-11-25), which reaches only a client "
    "that streams the call in MCP 2025-11-25; other clients get questions from upstreams that ask in "
    "MCP 2026-07-28 (an InputRequiredResult)"
)


@dataclass(frozen=True, slots=True)
class Asking:
    """What this call's upstream may ask: allowed on the tool, and answerable by the caller's client."""

    elicitation: bool
    sampling: bool


def asking_for(allowed: tuple[bool, bool], client: ClientInput | None) -> Asking | None:
    """The asks this call may carry (the tool's allowance ∩ the client's capabilities), or None for none."""
    if client is None:
        return None
    asking = Asking(elicitation=allowed[0] and client.elicitation, sampling=allowed[1] and client.sampling)
    return asking if asking.elicitation or asking.sampling else None


def responses_of(client: ClientInput) -> dict[str, Any] | None:
    """The client's answers as the SDK's models (the interface checked each against what was asked)."""
    if client.responses is None:
        return None
    return {key: answer_model(answer) for key, answer in client.responses.items()}


def answer_model(answer: Mapping[str, Any]) -> types.ElicitResult | types.CreateMessageResult:
    """One answer of the client as the protocol's model; ValueError for anything else."""
    kind = types.ElicitResult if "action" in answer else types.CreateMessageResult
    try:
        return kind.model_validate(dict(answer))
    except ValueError as exc:
        raise ValueError("not an elicitation or sampling answer") from exc


def vetted_ask(result: types.InputRequiredResult, asking: Asking) -> InputAsk:
    """The upstream's questions as they may reach the client, or a ToolFailure saying what it asked."""
    requests = result.input_requests or {}
    if len(requests) > MAX_ASKS_PER_ROUND:
        raise ask_refused(f"the upstream asked {len(requests)} questions at once; at most {MAX_ASKS_PER_ROUND} pass")
    state = result.request_state
    if state is not None and len(state) > MAX_UPSTREAM_STATE_CHARS:
        raise ask_refused(f"the upstream's requestState is longer than {MAX_UPSTREAM_STATE_CHARS} characters")
    vetted: dict[str, dict[str, Any]] = {}
    for key, request in requests.items():
        if not ASK_KEY.fullmatch(key):
            raise ask_refused("the upstream named a question with a key that is not 1-64 letters, digits or _.:-")
        vetted[key] = vetted_request(request, asking)
    if _size(vetted) > MAX_ASK_BYTES:
        raise ask_refused(f"the upstream's questions are larger than {MAX_ASK_BYTES // 1024} KiB")
    return InputAsk(requests=vetted, upstream_state=state)


def vetted_request(request: Any, asking: Asking) -> dict[str, Any]:
    """One question as it may reach the client (bounded as a whole round is), or a ToolFailure saying why not."""
    vetted = _vetted_request(request, asking)
    if _size(vetted) > MAX_ASK_BYTES:
        raise ask_refused(f"the upstream's questions are larger than {MAX_ASK_BYTES // 1024} KiB")
    return vetted


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode())


def _vetted_request(request: Any, asking: Asking) -> dict[str, Any]:
    if isinstance(request, types.ElicitRequest):
        if not asking.elicitation:
            raise ask_refused("the upstream asked the person a question (elicitation), which this tool may not ask")
        params = request.params
        if not isinstance(params, types.ElicitRequestFormParams):
            raise ask_refused("the upstream asked the person to open a URL; Toolgate passes form questions only")
        shown = _shown(params.model_dump(mode="json", by_alias=True, exclude_none=True))
        problem = form_schema_problem(shown.get("requestedSchema"))
        if problem is not None:
            raise ask_refused(f"the upstream's question has a form Toolgate does not pass: {problem}")
        return {"method": ELICITATION, "params": shown}
    if isinstance(request, types.CreateMessageRequest):
        if not asking.sampling:
            raise ask_refused("the upstream asked the client's model to sample, which this tool may not ask")
        return {"method": SAMPLING, "params": _shown(request.params.model_dump(mode="json", by_alias=True))}
    raise ask_refused("the upstream asked the client for its roots; Toolgate has none to offer")


class HeldAsk(Protocol):
    """Where a held call's question goes: to the client's next round, and back with its answer (upstream/held.py)."""

    async def ask(self, method: str, params: Mapping[str, Any]) -> Mapping[str, Any]: ...


class MidCallQuestions:
    """A 2025-11-25 upstream's questions, asked mid-call on the call's own stream: the SDK's callbacks.

    Each is vetted like a 2026 round's, sampling is counted against the policy's cap
    (`ClientInput.sample_cap`, across every question of the call), and it is put to a
    2025-era client streaming this call (`ClientInput.ask_now`) while the upstream waits
    on its connection, under the call's runtime budget; or, for a 2026-07-28 client, to
    `held`, which makes it the client's next round while the call is held open. Any other
    client is told no (NOT_RELAYED). `problem` keeps the first reason a question was not
    answered, for the call's error.
    """

    def __init__(self, asking: Asking, client: ClientInput, held: HeldAsk | None = None) -> None:
        self._asking = asking
        self._client = client
        self._held = held
        self._samples = 0
        self.problem: str | None = None

    async def elicitation(self, context: Any, params: Any) -> Any:
        return await self._relay(types.ElicitRequest(params=params))

    async def sampling(self, context: Any, params: Any) -> Any:
        return await self._relay(types.CreateMessageRequest(params=params))

    async def _relay(self, request: Any) -> Any:
        ask = self._asker()
        if ask is None:
            return self._no(NOT_RELAYED)
        try:
            vetted = vetted_request(request, self._asking)
        except ToolFailure as refusal:
            return self._no(str(refusal).removeprefix("upstream MCP server: "))
        if vetted["method"] == SAMPLING:
            cap = self._client.sample_cap
            if self._client.samples_used + self._samples + 1 > cap:
                allowed = "allows no sampling" if cap == 0 else f"allows {cap} sampling request(s) per call"
                return self._no(f"it asked the client's model to sample, and this caller's policy {allowed}")
            self._samples += 1
        stop = threading.Event()  # the call was cut (budget, cancel): the waiting thread gives up at once
        try:
            return answer_model(await ask(vetted["method"], vetted["params"], stop.is_set))
        except AskUnanswered as unanswered:
            return self._no(str(unanswered))
        except ValueError:
            return self._no("the client's answer is not a valid answer")
        finally:
            stop.set()

    def _asker(self) -> Callable[[str, Mapping[str, Any], Callable[[], bool]], Awaitable[Mapping[str, Any]]] | None:
        """Who answers: a 2025-era client on its stream (blocking, in a thread), the held call's round, or none."""
        ask_now, held = self._client.ask_now, self._held
        if ask_now is not None:
            return lambda method, params, gone: asyncio.to_thread(ask_now, method, params, gone)
        if held is not None:
            return lambda method, params, gone: held.ask(method, params)
        return None

    def _no(self, problem: str) -> types.ErrorData:
        self.problem = self.problem or problem
        return types.ErrorData(code=INVALID_REQUEST, message="Toolgate did not pass this request on")


def form_schema_problem(schema: Any) -> str | None:
    """Why `schema` is not a flat form of primitive fields (the protocol's elicitation forms), or None."""
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        return "its schema is not an object"
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        return "it has no fields"
    for name, field in properties.items():
        if not isinstance(field, Mapping):
            return f"field {name[:40]!r} is not a schema"
        kind = field.get("type")
        items = field.get("items")
        multiple_choice = kind == "array" and isinstance(items, Mapping) and items.get("type") == "string"
        if kind not in FORM_FIELD_TYPES and not multiple_choice:
            return f"field {name[:40]!r} is not a string, number, integer, boolean or list of choices"
    return None


def _shown(value: Any) -> Any:
    """Every string (keys included) with hidden characters written out; the whole ask is bounded after."""
    if isinstance(value, str):
        return visible_text(value)
    if isinstance(value, Mapping):
        return {_shown(str(key)): _shown(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shown(item) for item in value]
    return value


def ask_refused(message: str) -> ToolFailure:
    return ToolFailure(f"upstream MCP server: {message}")
