"""When a call made for a person needs that person: which page, the sealed state, and the retry.

The runner decides that a call waits (`approval_required`); this module, for
calls made for a person over MCP, turns that into a `PersonNeeded` that the MCP
interface renders per era (gateway/inbound/asking.py), and finds the
waiting request again when the client retries (docs/elicitation.md). It is the
MCP interface's one door to approvals, sealing and pages, as `tool_exec` is
its door to the runner:
- **Pages.** `PAGE_OF_KIND` maps what the person must do to the portal page
  that does it: confirm, follow an approval, or connect an account.
- **Connecting an account.** A call refused `connection_required` (no usable
  connection of the tool's provider in grant ∩ declared) opens a `ConnectAsk`:
  a short-lived record in the shared cache naming the person, their
  delegation, the provider and the exact call. Its page (`/calls/connect/<id>/`)
  connects one with the portal's own flows, grants it to the account and
  declares it on the delegation; the retry then finds it like any call would.
- **requestState (2026-07-28)** is sealed with the key ring (AES-GCM), bound in
  its associated data to the service account, and inside to the person, the
  tool, a digest of the arguments, the tool_call_id and a short expiry. It is
  single use (a nonce claimed in the shared cache). A forged, expired,
  replayed, other-caller or other-call state is refused and nothing runs.
- **A retry without state** (every 2025-11-25 retry, or a model repeating the
  call) names no tool_call_id: the request is found by the binding the runner
  checks anyway (`approval_open_for_call`).
- **Sessions (2025-11-25).** Only `initialize` says whether the client handles
  URL elicitation; the server keeps no sessions, so the answer is sealed into
  the `Mcp-Session-Id` it issues (bound to the service account) and read back
  from every later request. An id that does not open counts as "not declared".

Nothing here runs for an API-key call made for no one: that path is unchanged.
"""

from __future__ import annotations

import base64
import binascii
import enum
import secrets
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Any, Final

from django.core.cache import cache
from django.urls import reverse

from core.crypto import CredentialError, KeyRing, open_json, seal_json
from policies_app.models import ApprovalRequest, Approver
from policies_app.selectors import (
    Caller,
    approval_by_id,
    approval_declined_by_person,
    approval_open_for_call,
    delegation_for_authz,
    delegation_for_token,
    subject_id_of,
)
from policies_app.services import APPROVER_WORDS
from runner.pipeline import args_digest
from runner.types import ErrorCode, ToolExecResult

# What the person must do -> the portal page that does it.
CONFIRM: Final = "confirm"
APPROVAL: Final = "approval"
CONNECT: Final = "connect"
PAGE_OF_KIND: Final[Mapping[str, str]] = {
    CONFIRM: "web:call-confirm",
    APPROVAL: "web:call-status",
    CONNECT: "web:call-connect",
}

STATE_TTL_S: Final = 600  # long enough for a person to read a page, short enough that a leaked state is stale
SESSION_TTL_S: Final = 30 * 24 * 3600  # a client re-initializes at least this often (then it is asked afresh)
_STATE_VERSION: Final = 1
_USED_STATE_PREFIX: Final = "mcp-state-used:"
_CONNECT_ASK_PREFIX: Final = "mcp-connect-ask:"
_CONNECT_OPEN_PREFIX: Final = "mcp-connect-open:"

BAD_STATE_MESSAGE: Final = (
    "the requestState is not valid for this call (altered, expired, already used, or for another call "
    "or person); nothing ran. Call the tool again without it."
)


class Asking(enum.Enum):
    """Where the person stands on a call that needs them."""

    ASK = "ask"  # first sight: ask the client to send the person to the page
    WAITING = "waiting"  # asked before and still undecided: say so and give the page again
    DECLINED = "declined"  # the person said no: a result the model reads


@dataclass(frozen=True, slots=True)
class PersonNeeded:
    """A call that cannot go on until its person (or an approver) acts on a portal page.

    `message` and `url` carry nothing secret: the URL names an approval id and
    the page checks who opens it (never pre-authenticated).
    """

    asking: Asking
    tool_call_id: str
    approval_id: str | None  # None for a connect ask (no approval: the person connects an account)
    url: str
    message: str
    request_state: str | None = None
    elicitation_id: str = ""  # the approval's id, or the connect ask's
    error_code: str = ErrorCode.APPROVAL_REQUIRED.value  # what a client without URL elicitation reads first


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a call is for: the service account and the person (`user:<id>`)."""

    service_account_id: str
    subject_id: str
    delegation_id: str = ""  # the person's delegation to the account: where a connection is declared
    tenant_id: int | None = None


def call_principal(caller: Caller, subject_token: str | None) -> Principal | None:
    """The person a call is made for (signed in, or named by a subject token), or None when it is for no one.

    The runner authorizes the delegation itself; this reads the same cached row
    only to know whose page to send, and a delegation of another caller is no one.
    """
    delegation_id = caller.delegation_id if subject_token is None else delegation_for_token(token=subject_token)
    if not delegation_id:
        return None
    row = delegation_for_authz(delegation_id=delegation_id)
    if row is None or row.service_account_id != caller.service_account_id:
        return None
    return Principal(
        service_account_id=caller.service_account_id,
        subject_id=subject_id_of(row.user_id),
        delegation_id=row.delegation_id,
        tenant_id=row.tenant_id,
    )


def encode_state(blob: bytes) -> str:
    """A sealed blob as the URL-safe text a client echoes (a requestState, a session id)."""
    return base64.urlsafe_b64encode(blob).decode().rstrip("=")


def decode_state(token: str) -> bytes | None:
    try:
        return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError):
        return None


def _state_binding(service_account_id: str) -> dict[str, str]:
    return {"mcp_request_state": service_account_id}


def request_state_seal(*, principal: Principal, tool_id: str, args: Any, tool_call_id: str) -> str:
    """A `requestState` that resumes exactly this call, for this person, once, within STATE_TTL_S."""
    claims = {
        "v": _STATE_VERSION,
        "sub": principal.subject_id,
        "tool": tool_id,
        "args": args_digest(args) or "",
        "call": tool_call_id,
        "exp": int(time.time()) + STATE_TTL_S,
        "nonce": secrets.token_urlsafe(16),
    }
    sealed = seal_json(claims, binding=_state_binding(principal.service_account_id), ring=KeyRing.from_settings())
    return encode_state(sealed.blob)


def request_state_open(token: str, *, principal: Principal, tool_id: str, args: Any) -> str | None:
    """The tool_call_id an echoed state resumes, or None for anything forged, stale, replayed or misbound.

    The nonce is claimed last, so a state refused for another reason is not
    spent by the attempt; a state claimed twice (a replay) fails the second time.
    """
    blob = decode_state(token) if len(token) <= 4096 else None
    if blob is None:
        return None
    try:
        claims = open_json(blob, binding=_state_binding(principal.service_account_id), ring=KeyRing.from_settings())
    except (CredentialError, ValueError):
        return None
    expiry = claims.get("exp")
    bound = (
        claims.get("v") == _STATE_VERSION
        and claims.get("sub") == principal.subject_id
        and claims.get("tool") == tool_id
        and claims.get("args") == (args_digest(args) or "")
        and isinstance(expiry, int)
        and expiry > time.time()
        and isinstance(claims.get("call"), str)
        and isinstance(claims.get("nonce"), str)
    )
    if not bound:
        return None
    if not cache.add(f"{_USED_STATE_PREFIX}{claims['nonce']}", 1, timeout=STATE_TTL_S + 60):
        return None  # already used once
    return str(claims["call"])


def waiting_call_id(*, principal: Principal, tool_id: str, args: Any) -> str | None:
    """The tool_call_id of this person's waiting (or just decided) request for this exact call, if any."""
    digest = args_digest(args)
    if digest is None:
        return None
    approval = approval_open_for_call(
        service_account_id=principal.service_account_id,
        subject_id=principal.subject_id,
        tool_id=tool_id,
        args_sha256=digest,
    )
    return None if approval is None else approval.tool_call_id


def page_kind(approval: ApprovalRequest) -> str:
    """Which page a request sends its person to: their own confirmation, or the status of others' approval."""
    return CONFIRM if approval.approver == Approver.SUBJECT else APPROVAL


def page_url(*, site_url: str, approval: ApprovalRequest) -> str:
    """The page's absolute URL: the approval's id and nothing else (the page checks who opens it)."""
    return site_url.rstrip("/") + reverse(PAGE_OF_KIND[page_kind(approval)], args=[approval.pk])


def asking_message(approval: ApprovalRequest, *, waiting: bool) -> str:
    """What the client shows the person (and a model reads in the text fallback); nothing secret."""
    if approval.approver == Approver.SUBJECT:
        if waiting:
            return f"{approval.tool_id} still waits for your confirmation: open the page, then call it again."
        return f"Confirm or decline {approval.tool_id} with these exact arguments on the page that opens."
    who = APPROVER_WORDS.get(approval.approver, "an operator")
    if waiting:
        return f"{approval.tool_id} still waits for {who} to approve it; the page shows where it stands."
    return f"{who.capitalize()} must approve {approval.tool_id}; they have been told. The page shows where it stands."


DECLINED_MESSAGE: Final = (
    "The person declined this call of {tool}; it did not run. Do not repeat it unless they ask again."
)


@dataclass(frozen=True, slots=True)
class Declared:
    """What a client can answer: URL elicitation (Toolgate's pages), form elicitation and sampling (an upstream's)."""

    url: bool = False
    form: bool = False
    sampling: bool = False

    @property
    def anything(self) -> bool:
        return self.url or self.form or self.sampling


NOTHING_DECLARED: Final = Declared()


class SealedSessions:
    """`Mcp-Session-Id`s that carry what a handshake-era client declared, sealed to one service account."""

    def __init__(self, service_account_id: str) -> None:
        self._binding = {"mcp_session": service_account_id}

    def issue(self, declared: Declared) -> str | None:
        if not declared.anything:
            return None  # nothing to remember: the client gets no session id, as before
        claims = {
            "url": declared.url,
            "form": declared.form,
            "sampling": declared.sampling,
            "exp": int(time.time()) + SESSION_TTL_S,
        }
        return encode_state(seal_json(claims, binding=self._binding, ring=KeyRing.from_settings()).blob)

    def declared(self, session_id: str | None) -> Declared:
        if not session_id or len(session_id) > 1024:
            return NOTHING_DECLARED
        blob = decode_state(session_id)
        if blob is None:
            return NOTHING_DECLARED
        try:
            claims = open_json(blob, binding=self._binding, ring=KeyRing.from_settings())
        except (CredentialError, ValueError):
            return NOTHING_DECLARED
        expiry = claims.get("exp")
        if not isinstance(expiry, int) or expiry <= time.time():
            return NOTHING_DECLARED
        return Declared(
            url=claims.get("url") is True, form=claims.get("form") is True, sampling=claims.get("sampling") is True
        )


def person_needed(
    result: ToolExecResult,
    *,
    principal: Principal,
    tenant_id: int,
    arguments: Any,
    resumed: bool,
    seal_state: bool,
    site_url: str,
    call_began: datetime,
) -> PersonNeeded | None:
    """A refusal the person can act on (a pending request, their own "no"), as what to tell them; else None.

    `resumed`: this call resumed a request (sealed state, or found by binding);
    a request opened before `call_began` (a repeated `toolgate/tool_call_id`)
    counts as resumed too. A pending one is then said to wait rather than asked
    again, so a client's retries never turn into rounds of the same question.
    `seal_state`: the client will echo a requestState (2026-07-28 with URL elicitation).
    """
    if result.error_code is ErrorCode.POLICY_DENIED and resumed:
        declined = approval_declined_by_person(
            tenant_id=tenant_id, tool_call_id=result.tool_call_id, subject_id=principal.subject_id
        )
        if declined is None:  # denied by others, expired, or misbound: the runner's refusal says which
            return None
        return PersonNeeded(
            asking=Asking.DECLINED,
            tool_call_id=result.tool_call_id,
            approval_id=str(declined.pk),
            url=page_url(site_url=site_url, approval=declined),
            message=DECLINED_MESSAGE.format(tool=declined.tool_id),
            elicitation_id=str(declined.pk),
        )
    if result.error_code is ErrorCode.CONNECTION_REQUIRED:
        return _connect_needed(
            result, principal=principal, arguments=arguments, seal_state=seal_state, site_url=site_url
        )
    if result.error_code is not ErrorCode.APPROVAL_REQUIRED or result.approval_id is None:
        return None
    approval = approval_by_id(approval_id=result.approval_id)
    if approval is None:
        return None
    resumed = resumed or approval.created_at < call_began
    asking = Asking.WAITING if resumed else Asking.ASK
    state = None
    if asking is Asking.ASK and seal_state:
        state = request_state_seal(
            principal=principal, tool_id=approval.tool_id, args=arguments, tool_call_id=result.tool_call_id
        )
    return PersonNeeded(
        asking=asking,
        tool_call_id=result.tool_call_id,
        approval_id=str(approval.pk),
        url=page_url(site_url=site_url, approval=approval),
        message=asking_message(approval, waiting=resumed),
        request_state=state,
        elicitation_id=str(approval.pk),
    )


# --- connecting an account --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConnectAsk:
    """A person asked to connect an account of `provider` for one exact call (kept in the shared cache).

    It holds ids and a digest only, never arguments or a secret: the page shows
    the provider and the tool, and checks that whoever opens it is `subject_id`.
    `connection_id` is set once the page connected and declared one.
    """

    ask_id: str
    service_account_id: str
    subject_id: str
    delegation_id: str
    tenant_id: int
    provider: str
    tool_id: str
    args_sha256: str
    tool_call_id: str
    expires_at: int
    connection_id: str = ""

    @property
    def open(self) -> bool:
        return not self.connection_id and self.expires_at > time.time()


def _open_key(*, principal: Principal, tool_id: str, digest: str) -> str:
    return f"{_CONNECT_OPEN_PREFIX}{principal.service_account_id}:{principal.subject_id}:{tool_id}:{digest}"


def connect_ask_get(ask_id: str) -> ConnectAsk | None:
    """The ask of this id while it lasts (done or not); None when unknown, malformed or expired."""
    if not ask_id or len(ask_id) > 64:
        return None
    raw = cache.get(f"{_CONNECT_ASK_PREFIX}{ask_id}")
    if not isinstance(raw, dict):
        return None
    try:
        ask = ConnectAsk(**raw)
    except TypeError:
        return None
    return ask if ask.expires_at > time.time() else None


def connect_ask_open_for_call(*, principal: Principal, tool_id: str, args: Any) -> ConnectAsk | None:
    """This person's undone ask for this exact call (service account, person, tool, arguments), if any."""
    digest = args_digest(args)
    if digest is None:
        return None
    ask_id = cache.get(_open_key(principal=principal, tool_id=tool_id, digest=digest))
    ask = connect_ask_get(ask_id) if isinstance(ask_id, str) else None
    return ask if ask is not None and ask.open and ask.subject_id == principal.subject_id else None


def connect_ask_create(
    *, principal: Principal, provider: str, tool_id: str, args: Any, tool_call_id: str
) -> ConnectAsk | None:
    """A new ask for this call, found again by its id (the page) and by the call's binding (a retry)."""
    digest = args_digest(args)
    if digest is None or not principal.delegation_id or principal.tenant_id is None:
        return None
    ask = ConnectAsk(
        ask_id=str(uuid.uuid4()),
        service_account_id=principal.service_account_id,
        subject_id=principal.subject_id,
        delegation_id=principal.delegation_id,
        tenant_id=principal.tenant_id,
        provider=provider,
        tool_id=tool_id,
        args_sha256=digest,
        tool_call_id=tool_call_id,
        expires_at=int(time.time()) + STATE_TTL_S,
    )
    cache.set(f"{_CONNECT_ASK_PREFIX}{ask.ask_id}", asdict(ask), timeout=STATE_TTL_S)
    cache.set(_open_key(principal=principal, tool_id=tool_id, digest=digest), ask.ask_id, timeout=STATE_TTL_S)
    return ask


def connect_ask_done(ask: ConnectAsk, *, connection_id: str) -> ConnectAsk:
    """The page connected and declared `connection_id`: the ask is answered (its page says so from now on)."""
    done = replace(ask, connection_id=connection_id)
    remaining = max(1, int(ask.expires_at - time.time()))
    cache.set(f"{_CONNECT_ASK_PREFIX}{ask.ask_id}", asdict(done), timeout=remaining)
    return done


def connect_page_url(*, site_url: str, ask: ConnectAsk) -> str:
    """The connect page's absolute URL: the ask's id and nothing else (the page checks who opens it)."""
    return site_url.rstrip("/") + reverse(PAGE_OF_KIND[CONNECT], args=[ask.ask_id])


def connect_message(*, tool_id: str, provider: str, waiting: bool) -> str:
    """What the client shows the person (and a model reads in the text fallback); nothing secret."""
    if waiting:
        return (
            f"{tool_id} still waits for you to connect a {provider} account: open the page, connect one, "
            "then call it again."
        )
    return (
        f"{tool_id} needs a {provider} account. Connect one on the page that opens; this client may then use it, "
        "and the call runs when your client tries again."
    )


def _connect_needed(
    result: ToolExecResult, *, principal: Principal, arguments: Any, seal_state: bool, site_url: str
) -> PersonNeeded | None:
    """`connection_required` for a person: send them to connect one (or, asked already, say it still waits)."""
    provider = result.connection_provider
    if not provider:
        return None  # a tool of no named provider: nothing to connect; the refusal says what to do
    waiting = connect_ask_open_for_call(principal=principal, tool_id=result.tool_id, args=arguments)
    ask = waiting or connect_ask_create(
        principal=principal,
        provider=provider,
        tool_id=result.tool_id,
        args=arguments,
        tool_call_id=result.tool_call_id,
    )
    if ask is None:
        return None
    state = None
    if waiting is None and seal_state:
        state = request_state_seal(
            principal=principal, tool_id=ask.tool_id, args=arguments, tool_call_id=ask.tool_call_id
        )
    return PersonNeeded(
        asking=Asking.WAITING if waiting is not None else Asking.ASK,
        tool_call_id=result.tool_call_id,
        approval_id=None,
        url=connect_page_url(site_url=site_url, ask=ask),
        message=connect_message(tool_id=ask.tool_id, provider=provider, waiting=waiting is not None),
        request_state=state,
        elicitation_id=ask.ask_id,
        error_code=ErrorCode.CONNECTION_REQUIRED.value,
    )
