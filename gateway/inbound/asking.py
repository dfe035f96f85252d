"""A call that waits on its person, in MCP's shapes: URL-mode elicitation in both eras, or plain text.

Pure functions and values (no Django): gateway/elicitation.py decides *that*
a person must act and *where* (a portal page); this module says how each kind
of client is told (docs/elicitation.md):
- 2025-11-25 with `elicitation.url` declared at `initialize` (carried by the
  sealed session id, `elicitation.SealedSessions`): the JSON-RPC error -32042
  `URLElicitationRequiredError`, whose `data.elicitations[]` names the page;
- 2026-07-28 with `elicitation.url` in the request's `_meta` capabilities: an
  `InputRequiredResult` holding one URL-mode `elicitation/create` request and
  the sealed `requestState` the client echoes on its retry;
- any other client, and every retry that finds the call still waiting: an
  `isError` result whose text gives the page's URL, so a person can follow it
  and the SDK's driver does not spin through its rounds on a wait for others.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from mcp_types import CLIENT_CAPABILITIES_META_KEY, URL_ELICITATION_REQUIRED

from gateway.elicitation import NOTHING_DECLARED, Asking, Declared, PersonNeeded
from gateway.inbound.wire import APPROVAL_ID_META, ERROR_CODE_META, TOOL_CALL_ID_META

PAGE_URL_META: Final = "toolgate/page_url"
DECLINED_META: Final = "toolgate/declined"
# The one input request of an InputRequiredResult (keys are the server's to choose).
INPUT_REQUEST_KEY: Final = "toolgate_person"


@dataclass(frozen=True, slots=True)
class CallEnvelope:
    """What a `tools/call` says beyond name, arguments and `_meta`: the era and what the client can do.

    `declared`: what the client can answer (a 2026 request's `_meta`, or the 2025 session's
    `initialize`); `input_responses`: its answers to an upstream's questions on a 2026 retry;
    `relay`: where a 2025 client streaming this call is asked them (gateway/inbound/streaming.py).
    """

    modern: bool = False
    declared: Declared = field(default_factory=lambda: NOTHING_DECLARED)
    request_state: str | None = None
    input_responses: Any = None
    relay: Any = None

    @property
    def url_elicitation(self) -> bool:
        return self.declared.url

    @property
    def answerable(self) -> bool:
        """The client can answer an upstream's questions here: in its 2026 retry, or on this call's stream."""
        return (self.declared.form or self.declared.sampling) and (self.modern or self.relay is not None)


@dataclass(frozen=True, slots=True)
class InputNeeded:
    """An upstream's vetted questions for the client, and the sealed state its retry echoes."""

    requests: Mapping[str, Any]
    request_state: str

    def answer(self) -> dict[str, Any]:
        return {
            "resultType": "input_required",
            "inputRequests": dict(self.requests),
            "requestState": self.request_state,
        }


PLAIN_CALL: Final = CallEnvelope()


def declared_by(capabilities: Any) -> Declared:
    """What client capabilities (`initialize`'s, or a 2026 request's `_meta`) declare.

    A bare `elicitation: {}` (the only shape before modes existed) means forms, as the SDK reads it.
    """
    if not isinstance(capabilities, Mapping):
        return NOTHING_DECLARED
    elicitation = capabilities.get("elicitation")
    elicitation = elicitation if isinstance(elicitation, Mapping) else None
    return Declared(
        url=elicitation is not None and isinstance(elicitation.get("url"), Mapping),
        form=elicitation is not None and (isinstance(elicitation.get("form"), Mapping) or "url" not in elicitation),
        sampling=isinstance(capabilities.get("sampling"), Mapping),
    )


def modern_declared(meta: Any) -> Declared:
    """A 2026-07-28 request's own declaration (every request carries the client's capabilities)."""
    return declared_by(meta.get(CLIENT_CAPABILITIES_META_KEY) if isinstance(meta, Mapping) else None)


@dataclass(frozen=True, slots=True)
class UrlElicitationRequired(Exception):
    """The handshake era's answer: raised as JSON-RPC error -32042 by the protocol."""

    code: int
    message: str
    data: dict[str, Any]


def person_needed_answer(needed: PersonNeeded, envelope: CallEnvelope) -> dict[str, Any]:
    """The `tools/call` result for a call that waits on a person; raises `UrlElicitationRequired` in 2025-11-25."""
    if needed.asking is Asking.ASK and envelope.url_elicitation:
        if envelope.modern:
            return {
                "resultType": "input_required",
                "inputRequests": {
                    INPUT_REQUEST_KEY: {
                        "method": "elicitation/create",
                        "params": {"mode": "url", "url": needed.url, "message": needed.message},
                    }
                },
                **({"requestState": needed.request_state} if needed.request_state else {}),
            }
        elicitation = {
            "mode": "url",
            "elicitationId": needed.elicitation_id,
            "url": needed.url,
            "message": needed.message,
        }
        raise UrlElicitationRequired(
            URL_ELICITATION_REQUIRED, "this call needs a person: open the page", {"elicitations": [elicitation]}
        )
    meta: dict[str, Any] = {TOOL_CALL_ID_META: needed.tool_call_id}
    if needed.approval_id is not None:
        meta[APPROVAL_ID_META] = needed.approval_id
    if needed.asking is Asking.DECLINED:
        meta[DECLINED_META] = True
        return {"content": [{"type": "text", "text": needed.message}], "isError": True, "_meta": meta}
    meta.update({ERROR_CODE_META: needed.error_code, PAGE_URL_META: needed.url})
    text = f"{needed.error_code}: {needed.message} Open {needed.url}"
    return {"content": [{"type": "text", "text": text}], "isError": True, "_meta": meta}
