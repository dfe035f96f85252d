"""manage.py rotate_encryption_keys [--batch-size N] [--dry-run]

Re-encrypts every value sealed with TOOLGATE_ENCRYPTION_KEYS under its primary
(first) key, so that older keys can be removed from the ring afterwards:
connections, OAuth providers' client secrets, MCP servers' operator tokens and
stdio servers' secret environments, pending approvals' kept arguments, and
tenant webhooks' signing secrets. A key dropped while any of these still
depends on it breaks that value (a server's calls, an approver's view of the
arguments, a tenant's webhook deliveries), so every kind goes through the same
rotation, each by a rewrap service in the app that owns its rows.

Each row is rewrapped in its own transaction by a compare-and-swap on the
envelope that was read (`connection_rewrap`, `oauth_provider_rewrap`,
`mcp_server_token_rewrap`, `mcp_server_secret_env_rewrap`,
`approval_args_rewrap`, `webhook_secret_rewrap`): a value written concurrently
(a token refresh, a tenant replacing a key, an approval decided) is never
overwritten, only skipped. Interrupting the command loses nothing; running it
again carries on with the rows still under an older key, and a run with nothing
left to do rewraps nothing.

After a run (and in a dry run) the command reads again which key ids still seal
something, of every kind, and says which keys of the ring nothing uses any more:
those are the ones that can be removed.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from connections_app.selectors import (
    connection_key_usage,
    connections_to_rewrap,
    oauth_provider_key_usage,
    oauth_providers_to_rewrap,
    webhook_secret_key_usage,
    webhooks_secret_to_rewrap,
)
from connections_app.services import (
    RotationCounts,
    connection_rewrap,
    key_rotation_record,
    oauth_provider_rewrap,
)
from connections_app.webhooks import webhook_secret_rewrap
from core.crypto import KeyRing
from core.key_rotation import UNREADABLE_ENVELOPE, RewrapOutcome
from gateway.upstream.selectors import (
    mcp_server_secret_env_key_usage,
    mcp_server_token_key_usage,
    mcp_servers_secret_env_to_rewrap,
    mcp_servers_token_to_rewrap,
)
from gateway.upstream.services import mcp_server_secret_env_rewrap, mcp_server_token_rewrap
from identity_app.selectors import identity_provider_key_usage, identity_providers_to_rewrap
from identity_app.services import provider_secret_rewrap
from policies_app.selectors import approval_args_key_usage, approvals_args_to_rewrap
from policies_app.services import approval_args_rewrap

logger = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 500
RING = "TOOLGATE_ENCRYPTION_KEYS"


def positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


@dataclass(frozen=True, eq=False)
class SealedKind:
    """One kind of row sealed with the key ring, and the selectors and service that rotate it.

    `batch` and `rewrap` look their functions up when called (lambdas over
    this module's names), so a test can stand in for one service.
    """

    label: str  # the kind in the output
    noun: str  # one row of it, in failures
    recorded_as: str  # the prefix of its counts in the change log (key_rotation_record)
    usage: Callable[[], dict[str, int]]
    batch: Callable[[str, Any, int], Sequence[Any]]  # (primary key id, after, limit): keyset pagination
    rewrap: Callable[[Any, KeyRing], RewrapOutcome]
    name: Callable[[Any], str]
    cursor: Callable[[Any], Any] = lambda row: row.pk
    remedy: str = ""  # for a row no key opens, beyond the connections' and providers' advice


KINDS: tuple[SealedKind, ...] = (
    SealedKind(
        "connections",
        "connection",
        "connections",
        usage=connection_key_usage,
        batch=lambda key_id, after, limit: connections_to_rewrap(primary_key_id=key_id, after=after, limit=limit),
        rewrap=lambda row, ring: connection_rewrap(connection=row, ring=ring),
        name=lambda row: str(row.pk),
    ),
    SealedKind(
        "oauth provider client secrets",
        "oauth provider",
        "providers",
        usage=oauth_provider_key_usage,
        batch=lambda key_id, after, limit: oauth_providers_to_rewrap(primary_key_id=key_id, after=after, limit=limit),
        rewrap=lambda row, ring: oauth_provider_rewrap(provider=row, ring=ring),
        name=lambda row: row.name,
        cursor=lambda row: row.name,
    ),
    SealedKind(
        "identity provider client secrets",
        "identity provider",
        "sso_providers",
        usage=identity_provider_key_usage,
        batch=lambda key_id, after, limit: identity_providers_to_rewrap(
            primary_key_id=key_id, after=after, limit=limit
        ),
        rewrap=lambda row, ring: provider_secret_rewrap(provider=row, ring=ring),
        name=lambda row: row.slug,
        cursor=lambda row: row.slug,
        remedy="An identity provider's client secret: set it again in admin (Single sign-on, identity providers).",
    ),
    SealedKind(
        "mcp server operator tokens",
        "mcp server operator token",
        "mcp_tokens",
        usage=mcp_server_token_key_usage,
        batch=lambda key_id, after, limit: mcp_servers_token_to_rewrap(primary_key_id=key_id, after=after, limit=limit),
        rewrap=lambda row, ring: mcp_server_token_rewrap(server=row, ring=ring),
        name=lambda row: row.slug,
        remedy="An MCP server's operator token: set it again with mcp_upstream add SLUG --url URL --secret-env VAR.",
    ),
    SealedKind(
        "mcp server secret environments",
        "mcp server secret environment",
        "mcp_secret_envs",
        usage=mcp_server_secret_env_key_usage,
        batch=lambda key_id, after, limit: mcp_servers_secret_env_to_rewrap(
            primary_key_id=key_id, after=after, limit=limit
        ),
        rewrap=lambda row, ring: mcp_server_secret_env_rewrap(server=row, ring=ring),
        name=lambda row: row.slug,
        remedy=(
            "A stdio server's secret environment: set it again with "
            "mcp_upstream add SLUG --command ... --secret-env NAME=VAR."
        ),
    ),
    SealedKind(
        "pending approvals' arguments",
        "approval",
        "approval_args",
        usage=approval_args_key_usage,
        batch=lambda key_id, after, limit: approvals_args_to_rewrap(primary_key_id=key_id, after=after, limit=limit),
        rewrap=lambda row, ring: approval_args_rewrap(approval=row, ring=ring),
        name=lambda row: str(row.pk),
        remedy="A pending approval's arguments: its approver cannot see them; deny it, or let it expire.",
    ),
    SealedKind(
        "tenant webhook secrets",
        "tenant webhook",
        "webhook_secrets",
        usage=webhook_secret_key_usage,
        batch=lambda key_id, after, limit: webhooks_secret_to_rewrap(primary_key_id=key_id, after=after, limit=limit),
        rewrap=lambda row, ring: webhook_secret_rewrap(webhook=row, ring=ring),
        name=lambda row: row.tenant.slug,
        remedy="A tenant webhook's secret: the tenant's owner sets the webhook again (a new secret).",
    ),
)
CONNECTIONS = KINDS[0]


@dataclass
class Tally:
    """What happened to the rows of one kind; `failed` holds (row name, safe reason)."""

    kind: SealedKind
    already_current: int
    rewrapped: int = 0
    skipped: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)

    def count(self, name: str, outcome: RewrapOutcome) -> None:
        if outcome.rewrapped:
            self.rewrapped += 1
        elif outcome.error is not None:
            self.failed.append((name, outcome.reason))
            logger.warning("%s %s not rewrapped: %s", self.kind.noun, name, outcome.reason)
        else:
            self.skipped += 1

    def counts(self) -> RotationCounts:
        return RotationCounts(rewrapped=self.rewrapped, skipped=self.skipped, failed=len(self.failed))

    def summary(self) -> str:
        return (
            f"{self.kind.label}: rewrapped {self.rewrapped}, already current {self.already_current}, "
            f"skipped because changed concurrently {self.skipped}, failed {len(self.failed)}"
        )


class Command(BaseCommand):
    help = (
        f"Re-encrypt every value sealed with {RING} (connections, OAuth and identity providers' client secrets, "
        "MCP servers' tokens and "
        "secret environments, pending approvals' arguments, tenant webhook secrets) under its primary (first) "
        "key, in batches, then say which key ids are still in use. Safe to interrupt and to run again; a value "
        "written meanwhile is skipped, never overwritten. Exits non-zero naming the rows it could not decrypt."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--batch-size",
            type=positive_int,
            default=DEFAULT_BATCH_SIZE,
            help=f"rows of one kind read per batch (default {DEFAULT_BATCH_SIZE})",
        )
        parser.add_argument("--dry-run", action="store_true", help="only count what a run would do")

    def handle(self, *args: object, batch_size: int, dry_run: bool, **options: object) -> None:
        ring = KeyRing.from_settings()
        usages = {kind: kind.usage() for kind in KINDS}
        # connections are always reported; another kind only when some row of it is sealed
        shown = [kind for kind in KINDS if kind is CONNECTIONS or usages[kind]]
        if dry_run:
            self._report_dry_run(ring, shown, usages)
            return
        tallies = [Tally(kind, already_current=usages[kind].get(ring.primary_key_id, 0)) for kind in shown]
        current = sum(tally.already_current for tally in tallies)
        total = sum(sum(usages[kind].values()) for kind in shown)
        self.stdout.write(
            f"rotating to key {ring.primary_key_id!r}: {current} already current, "
            f"{total - current} to rewrap, {batch_size} per batch"
        )
        for tally in tallies:
            self._rewrap(ring, batch_size, tally)
        in_use = _keys_in_use({kind: kind.usage() for kind in KINDS})  # read again: the truth after the run
        key_rotation_record(
            primary_key_id=ring.primary_key_id,
            counts={tally.kind.recorded_as: tally.counts() for tally in tallies},
            key_ids_in_use=[key_id for key_id in in_use if key_id != UNREADABLE_ENVELOPE],
        )
        self._report(ring, tallies, in_use)

    def _rewrap(self, ring: KeyRing, batch_size: int, tally: Tally) -> None:
        """Keyset pagination: each batch starts after the last row of the one before."""
        cursor: Any = None
        batch_number = 0
        while batch := tally.kind.batch(ring.primary_key_id, cursor, batch_size):
            batch_number += 1
            before = (tally.rewrapped, tally.skipped, len(tally.failed))
            for row in batch:
                tally.count(tally.kind.name(row), tally.kind.rewrap(row, ring))
            cursor = tally.kind.cursor(batch[-1])
            self.stdout.write(
                f"{tally.kind.label} batch {batch_number}: {len(batch)} read, "
                f"{tally.rewrapped - before[0]} rewrapped, {tally.skipped - before[1]} skipped, "
                f"{len(tally.failed) - before[2]} failed"
            )

    def _report(self, ring: KeyRing, tallies: list[Tally], in_use: dict[str, dict[str, int]]) -> None:
        failed = [(tally.kind.noun, name, reason) for tally in tallies for name, reason in tally.failed]
        for tally in tallies:
            line = tally.summary()
            logger.info("rotate_encryption_keys: %s", line)
            self.stdout.write(self.style.SUCCESS(line) if not failed else line)
        if any(tally.skipped for tally in tallies):
            self.stdout.write("rows skipped were written while this ran: run the command again to check them")
        for line in _key_lines(ring, in_use, after_run=True):
            logger.info("rotate_encryption_keys: %s", line)
            self.stdout.write(line)
        if not failed:
            return
        for noun, name, reason in failed:
            self.stderr.write(f"{noun} {name}: {reason}")
        named = [
            f"{len(tally.failed)} {tally.kind.noun}(s): {', '.join(name for name, _ in tally.failed)}"
            for tally in tallies
            if tally.failed
        ]
        remedies = "".join(f" {tally.kind.remedy}" for tally in tallies if tally.failed and tally.kind.remedy)
        raise CommandError(
            f"could not rewrap {'; '.join(named)}. Add any missing key back to {RING} and run "
            "again; a connection whose credentials do not decrypt with any key must be revoked and entered again "
            f"by its tenant (an OAuth provider's client secret: set it again with add_oauth_provider).{remedies}"
        )

    def _report_dry_run(self, ring: KeyRing, shown: list[SealedKind], usages: dict[SealedKind, dict[str, int]]) -> None:
        self.stdout.write(f"dry run, primary key {ring.primary_key_id!r}; nothing is written")
        missing: dict[str, int] = {}
        for kind in shown:
            counts = usages[kind]
            older = {key_id: n for key_id, n in counts.items() if key_id != ring.primary_key_id}
            for key_id, n in older.items():
                if key_id not in ring:
                    missing[key_id] = missing.get(key_id, 0) + n
            self.stdout.write(
                f"{kind.label}: already current {counts.get(ring.primary_key_id, 0)}, "
                f"to rewrap {sum(older.values())}{_by_key(older)}"
            )
        if missing:
            self.stdout.write(
                f"under keys not in the ring, these would fail: {sum(missing.values())}{_by_key(missing)}; "
                f"add those keys back to {RING} before rotating"
            )
        for line in _key_lines(ring, _keys_in_use(usages), after_run=False):
            self.stdout.write(line)


def _keys_in_use(usages: dict[SealedKind, dict[str, int]]) -> dict[str, dict[str, int]]:
    """key id -> kind label -> how many values of that kind it seals, key ids sorted."""
    in_use: dict[str, dict[str, int]] = {}
    for kind, counts in usages.items():
        for key_id, n in counts.items():
            if n:
                in_use.setdefault(key_id, {})[kind.label] = n
    return dict(sorted(in_use.items()))


def _key_lines(ring: KeyRing, in_use: dict[str, dict[str, int]], *, after_run: bool) -> list[str]:
    """Which key ids seal something now, and what that means for the ring.

    A key of the ring that nothing uses can go; after a run, an older key still
    in use must stay (its rows failed or were written meanwhile), and a key in
    use but missing from the ring must come back. Only as true as the moment it
    was read: a process still running with the old key first seals new values
    under it, which is why docs/connections.md has every process take the new key first.
    """
    described = [
        f"{key_id} ({', '.join(f'{label} {n}' for label, n in kinds.items())})" for key_id, kinds in in_use.items()
    ]
    lines = [f"key ids in use now: {', '.join(described) or 'none'}"]
    key_ids = [key_id for key_id in in_use if key_id != UNREADABLE_ENVELOPE]
    unused = [key_id for key_id in ring.key_ids if key_id != ring.primary_key_id and key_id not in in_use]
    if unused:
        lines.append(f"no sealed value uses {', '.join(unused)}: can be removed from {RING}")
    if after_run:
        kept = [key_id for key_id in key_ids if key_id != ring.primary_key_id and key_id in ring]
        missing = [key_id for key_id in key_ids if key_id not in ring]
        if kept:
            lines.append(f"still in use, keep in {RING}: {', '.join(kept)}")
        if missing:
            lines.append(f"in use but missing from {RING} (those values open with no key): {', '.join(missing)}")
    return lines


def _by_key(counts: dict[str, int]) -> str:
    return f" ({', '.join(f'{key_id}: {n}' for key_id, n in sorted(counts.items()))})" if counts else ""
