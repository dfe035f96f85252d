"""The connection gate: a connection may be used only if grant ∩ declared holds it.

A request's declared connection ids are intent, not authority; authority comes
from the execution grant. The check runs before the broker touches anything, so
a refused call never decrypts a credential or reaches a provider.

Who declares depends on who the call is for. A service's own call (its API key
alone) names its connection and declares its run's connections in the request.
A call on a person's behalf (a subject token, a signed-in MCP client) may name
none: the person declared, on the consent page or the delegations page, which
of their connections that caller may use, and `choose_connection` takes the one
connection of the tool's provider in grant ∩ declared. A personal connection of
the person comes before the tenant's when both are declared; two or more left
after that, or none, refuse with what the person or the model can do about it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from runner.ports import GrantStore, GrantView
from runner.types import ConnectionChoice, ErrorCode, ToolInvocationContext, ToolSpec

# One message for "no such grant", "another tenant's" and "another caller's":
# the answer must not tell a prober which grant ids exist.
GRANT_REFUSED = (
    "grant_id does not name an active grant of this service account; use the full id of a grant "
    "made to it (GET /api/v1/grants, or the tenant's Grants page)"
)
PERSONAL = (
    "this connection is personal: only a call on behalf of the person it belongs to "
    "(their subject token, X-Toolgate-Subject) may use it"
)
NOT_GRANTED = (
    "this connection is not in the grant, or not among the connection_ids this call declares; "
    "grant it to this service account, or declare it"
)


# How many candidate ids an ambiguous choice lists (a person may have many; the model needs a few).
LISTED_CANDIDATES = 5


@dataclass(frozen=True, slots=True)
class GateRefusal:
    code: ErrorCode
    safe_message: str
    path: str | None = None  # set for validation refusals: which request field is wrong
    provider: str | None = None  # set when the call needs a connection of this provider chosen or made


@dataclass(frozen=True, slots=True)
class ChoicePages:
    """Where a person goes when no connection can be chosen for them: the portal's pages.

    `connect` is the page that connects an account (`{provider}` is filled in),
    `choose` the page where the person picks the connections this caller may use
    (`{delegation_id}`). The composition root binds the portal's paths; the
    defaults name the pages in words (a runner without the portal, its tests).
    """

    connect: str = "the tenant portal's Connections page"
    choose: str = "the tenant portal's Delegations page"

    def connect_page(self, provider: str) -> str:
        return self.connect.format(provider=provider)

    def choose_page(self, delegation_id: str) -> str:
        return self.choose.format(delegation_id=delegation_id)


@dataclass(frozen=True, slots=True)
class ChosenConnection:
    """The connection (and the grant holding it) a call on a person's behalf uses, and why that one."""

    connection_id: str
    grant_id: str
    declared: tuple[str, ...]  # what the call counts as declared from now on (grant ∩ declared still checked)
    reason: ConnectionChoice


def effective_connection_ids(granted: Iterable[str], declared: Iterable[str]) -> frozenset[str]:
    """The connections this call may use: granted and declared."""
    return frozenset(granted) & frozenset(declared)


def is_well_formed_connection_id(value: str) -> bool:
    try:
        return str(uuid.UUID(value)) == value.lower()
    except ValueError:
        return False


def check_connection(
    ctx: ToolInvocationContext, spec: ToolSpec, grants: GrantStore, *, now: datetime
) -> GateRefusal | None:
    """None when the call may proceed to the broker; otherwise why not."""
    if not spec.requires_connection:
        if ctx.connection_id is not None:
            return GateRefusal(ErrorCode.VALIDATION, "this tool takes no connection", "connection_id")
        return None
    if not ctx.connection_id:
        return GateRefusal(ErrorCode.VALIDATION, "this tool needs a connection_id", "connection_id")
    if not is_well_formed_connection_id(ctx.connection_id):
        return GateRefusal(ErrorCode.VALIDATION, "connection_id is not a valid id", "connection_id")
    if not ctx.grant_id:
        return GateRefusal(ErrorCode.VALIDATION, "grant_id is required with a connection_id", "grant_id")
    grant = grants.get(ctx.grant_id)
    if grant is None or not _belongs_to_caller(grant, ctx):
        return GateRefusal(ErrorCode.POLICY_DENIED, GRANT_REFUSED)
    if grant.revoked:
        return GateRefusal(ErrorCode.POLICY_DENIED, "the grant was revoked; ask the tenant for a new one")
    if grant.expires_at is not None and grant.expires_at <= now:
        return GateRefusal(ErrorCode.POLICY_DENIED, "the grant has expired; ask the tenant for a new one")
    if ctx.connection_id not in effective_connection_ids(grant.connection_ids, ctx.declared_connection_ids):
        return GateRefusal(ErrorCode.POLICY_DENIED, NOT_GRANTED)
    owner = grant.personal.get(ctx.connection_id)
    if owner is not None and owner != ctx.subject_id:
        return GateRefusal(ErrorCode.POLICY_DENIED, PERSONAL)
    return None


def _belongs_to_caller(grant: GrantView, ctx: ToolInvocationContext) -> bool:
    return grant.tenant_id == ctx.tenant_id and grant.actor_id == ctx.actor_id


def resolve_connection(
    ctx: ToolInvocationContext,
    spec: ToolSpec,
    consented: frozenset[str],
    grants: GrantStore,
    *,
    now: datetime,
    pages: ChoicePages,
) -> ChosenConnection | GateRefusal | None:
    """For a call on a person's behalf (`consented`: what they declared), the connection and grant it uses.

    It names no connection (perhaps a grant): `choose_connection` among the
    caller's usable grants (that one grant only, when named) and what the person
    declared, narrowed by the request's own `connection_ids` when it declares
    some. It names one: None, and `check_connection` decides as for every call
    (what the request declares counts, as it always did).
    """
    if not spec.requires_connection or ctx.connection_id is not None:
        return None
    declared = consented & frozenset(ctx.declared_connection_ids) if ctx.declared_connection_ids else consented
    mine = [grant for grant in grants.for_caller(ctx.tenant_id, ctx.actor_id) if _usable(grant, ctx, now)]
    if ctx.grant_id is not None:
        mine = [grant for grant in mine if grant.grant_id == ctx.grant_id.lower()]
    return choose_connection(ctx, spec.provider, declared, mine, pages=pages)


def choose_connection(
    ctx: ToolInvocationContext,
    provider: str | None,
    declared: frozenset[str],
    grants: Sequence[GrantView],
    *,
    pages: ChoicePages,
) -> ChosenConnection | GateRefusal:
    """The one connection of `provider` in grant ∩ declared that this call's person may use, or why none.

    `grants` are the caller's usable grants. A connection another person owns
    is never a candidate, nor a revoked one. One candidate is the choice; of
    several, the person's one personal connection comes before the tenant's.
    Otherwise the call must name one (`validation`, saying how), and with no
    candidate at all the person must connect or declare one
    (`connection_required`, naming the provider and the pages).
    """
    candidates: dict[str, str] = {}  # connection id -> the first grant (by id) that holds it
    personal: set[str] = set()
    for grant in sorted(grants, key=lambda view: view.grant_id):
        for connection_id in sorted(effective_connection_ids(grant.connection_ids, declared)):
            if provider is None or grant.providers.get(connection_id) != provider:
                continue
            owner = grant.personal.get(connection_id)
            if owner is not None and owner != ctx.subject_id:
                continue
            candidates.setdefault(connection_id, grant.grant_id)
            if owner is not None:
                personal.add(connection_id)
    named = provider or "its provider's"
    choose = pages.choose_page(ctx.delegation_id or "")
    if not candidates:
        return GateRefusal(
            ErrorCode.CONNECTION_REQUIRED,
            f"this tool needs a {named} connection, and none is both granted to this service account and "
            f"chosen by the person for it: connect one at {pages.connect_page(provider or '')}, "
            f"then choose it for this client at {choose}",
            provider=provider,
        )
    if len(candidates) == 1:
        (only,) = candidates
        return ChosenConnection(only, candidates[only], tuple(sorted(declared)), ConnectionChoice.ONLY_DECLARED)
    if len(personal) == 1:
        (mine,) = personal
        return ChosenConnection(mine, candidates[mine], tuple(sorted(declared)), ConnectionChoice.PERSONAL_FIRST)
    listed = ", ".join(
        f"{connection_id} (grant {candidates[connection_id]})"
        for connection_id in sorted(candidates)[:LISTED_CANDIDATES]
    )
    more = "" if len(candidates) <= LISTED_CANDIDATES else ", ..."
    return GateRefusal(
        ErrorCode.VALIDATION,
        f"{len(candidates)} {named} connections may be used for this call, so it must name one with its grant: "
        "`toolgate/connection_id` and `toolgate/grant_id` in the call's _meta (MCP), or connection_id and "
        f"grant_id (REST), among {listed}{more}; or keep only one for this client at {choose}",
        "connection_id",
        provider=provider,
    )


def _usable(grant: GrantView, ctx: ToolInvocationContext, now: datetime) -> bool:
    """The caller's own grant, neither revoked nor expired."""
    return _belongs_to_caller(grant, ctx) and not grant.revoked and (grant.expires_at is None or grant.expires_at > now)
