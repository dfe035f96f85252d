"""A call that waits on its person, in MCP's shapes: URL-mode elicitation in both eras, or plain text.

Pure functions and values (no Django): tools_app/elicitation.py decides *that*
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
from dataclasses import dataclass
from typing import Any, Final

from mcp_types import CLIENT_CAPABILITIES_META_KEY, URL_ELICITATION_REQUIRED

from tools_app.elicitation import Asking, PersonNeeded
from tools_app.mcp_server.wire import APPROVAL_ID_META, ERROR_CODE_META, TOOL_CALL_ID_META

PAGE_URL_META: Final = "toolgate/page_url"
DECLINED_META: Final = "toolgate/declined"
# The one input request of an InputRequiredResult (keys are the server's to choose).
INPUT_REQUEST_KEY: Final = "toolgate_person"


@dataclass(frozen=True, slots=True)
class CallEnvelope:
    """What a `tools/call` says beyond name, arguments and `_meta`: the era and what the client can do."""

    modern: bool = False
    url_elicitation: bool = False
    request_state: str | None = None


PLAIN_CALL: Final = CallEnvelope()


def client_declares_url_elicitation(capabilities: Any) -> bool:
    """Whether client capabilities (`initialize`'s, or a 2026 request's `_meta`) include URL-mode elicitation."""
    if not isinstance(capabilities, Mapping):
        return False
    elicitation = capabilities.get("elicitation")
    return isinstance(elicitation, Mapping) and isinstance(elicitation.get("url"), Mapping)


def modern_url_elicitation(meta: Any) -> bool:
    """A 2026-07-28 request's own declaration (every request carries the client's capabilities)."""
    return isinstance(meta, Mapping) and client_declares_url_elicitation(meta.get(CLIENT_CAPABILITIES_META_KEY))


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
