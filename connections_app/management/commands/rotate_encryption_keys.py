"""manage.py rotate_encryption_keys [--batch-size N] [--dry-run]

Re-encrypts every connection under the primary (first) key of
TOOLGATE_ENCRYPTION_KEYS, then the OAuth providers' client secrets (sealed with
the same ring), so that older keys can be removed from the ring afterwards.
Each row is rewrapped in its own transaction by a compare-and-swap on the
envelope that was read (`connection_rewrap`, `oauth_provider_rewrap`): a value
written concurrently (a token refresh, a tenant replacing a key) is never
overwritten, only skipped. Interrupting the command loses nothing; running it
again carries on with the rows still under an older key, and a run with nothing
left to do rewraps nothing.
"""

from __future__ import annotations

import argparse
import logging
import uuid
from dataclasses import dataclass, field

from django.core.management.base import BaseCommand, CommandError

from connections_app.selectors import (
    connection_key_usage,
    connections_to_rewrap,
    oauth_provider_key_usage,
    oauth_providers_to_rewrap,
)
from connections_app.services import (
    RewrapOutcome,
    RotationCounts,
    connection_rewrap,
    key_rotation_record,
    oauth_provider_rewrap,
)
from policies_app.crypto import KeyRing

logger = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 500


def positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


@dataclass
class Tally:
    """What happened to the rows of one kind; `failed` holds (row name, safe reason)."""

    noun: str
    already_current: int
    rewrapped: int = 0
    skipped: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)

    def count(self, name: str, outcome: RewrapOutcome) -> None:
        if outcome.rewrapped:
            self.rewrapped += 1
        elif outcome.error is not None:
            self.failed.append((name, outcome.reason))
            logger.warning("%s %s not rewrapped: %s", self.noun, name, outcome.reason)
        else:
            self.skipped += 1

    def counts(self) -> RotationCounts:
        return RotationCounts(rewrapped=self.rewrapped, skipped=self.skipped, failed=len(self.failed))

    def summary(self) -> str:
        return (
            f"rewrapped {self.rewrapped}, already current {self.already_current}, "
            f"skipped because changed concurrently {self.skipped}, failed {len(self.failed)}"
        )


class Command(BaseCommand):
    help = (
        "Re-encrypt every connection (and every OAuth provider's client secret) under the primary (first) key "
        "of TOOLGATE_ENCRYPTION_KEYS, in batches. Safe to interrupt and to run again; a value written meanwhile "
        "is skipped, never overwritten. Exits non-zero naming the rows it could not decrypt."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--batch-size",
            type=positive_int,
            default=DEFAULT_BATCH_SIZE,
            help=f"connections read per batch (default {DEFAULT_BATCH_SIZE})",
        )
        parser.add_argument("--dry-run", action="store_true", help="only count what a run would do")

    def handle(self, *args: object, batch_size: int, dry_run: bool, **options: object) -> None:
        ring = KeyRing.from_settings()
        usage = connection_key_usage()
        provider_usage = oauth_provider_key_usage()
        if dry_run:
            self._report_dry_run(ring, usage, provider_usage)
            return
        connections = Tally("connection", already_current=usage.get(ring.primary_key_id, 0))
        self.stdout.write(
            f"rotating to key {ring.primary_key_id!r}: {connections.already_current} already current, "
            f"{sum(usage.values()) - connections.already_current} to rewrap, {batch_size} per batch"
        )
        self._rewrap_connections(ring, batch_size, connections)
        tallies = [connections]
        if provider_usage:
            providers = Tally("oauth provider", already_current=provider_usage.get(ring.primary_key_id, 0))
            for provider in oauth_providers_to_rewrap(primary_key_id=ring.primary_key_id):
                providers.count(provider.name, oauth_provider_rewrap(provider=provider, ring=ring))
            tallies.append(providers)
        key_rotation_record(
            primary_key_id=ring.primary_key_id,
            connections=connections.counts(),
            providers=tallies[1].counts() if len(tallies) > 1 else None,
        )
        self._report(tallies)

    def _rewrap_connections(self, ring: KeyRing, batch_size: int, tally: Tally) -> None:
        """Keyset pagination by pk: each batch starts after the last row of the one before."""
        cursor: uuid.UUID | None = None
        batch_number = 0
        while batch := connections_to_rewrap(primary_key_id=ring.primary_key_id, after=cursor, limit=batch_size):
            batch_number += 1
            before = (tally.rewrapped, tally.skipped, len(tally.failed))
            for connection in batch:
                tally.count(str(connection.pk), connection_rewrap(connection=connection, ring=ring))
            cursor = batch[-1].pk
            self.stdout.write(
                f"batch {batch_number}: {len(batch)} read, {tally.rewrapped - before[0]} rewrapped, "
                f"{tally.skipped - before[1]} skipped, {len(tally.failed) - before[2]} failed"
            )

    def _report(self, tallies: list[Tally]) -> None:
        connections, *providers = tallies
        lines = [connections.summary()] + [f"oauth provider client secrets: {p.summary()}" for p in providers]
        failed = [(tally.noun, name, reason) for tally in tallies for name, reason in tally.failed]
        for line in lines:
            logger.info("rotate_encryption_keys: %s", line)
            self.stdout.write(self.style.SUCCESS(line) if not failed else line)
        if any(tally.skipped for tally in tallies):
            self.stdout.write("rows skipped were written while this ran: run the command again to check them")
        if not failed:
            return
        for noun, name, reason in failed:
            self.stderr.write(f"{noun} {name}: {reason}")
        named = [
            f"{len(tally.failed)} {tally.noun}(s): {', '.join(name for name, _ in tally.failed)}"
            for tally in tallies
            if tally.failed
        ]
        raise CommandError(
            f"could not rewrap {'; '.join(named)}. Add any missing key back to TOOLGATE_ENCRYPTION_KEYS and run "
            "again; a connection whose credentials do not decrypt with any key must be revoked and entered again "
            "by its tenant (an OAuth provider's client secret: set it again with add_oauth_provider)."
        )

    def _report_dry_run(self, ring: KeyRing, usage: dict[str, int], provider_usage: dict[str, int]) -> None:
        self.stdout.write(f"dry run, primary key {ring.primary_key_id!r}; nothing is written")
        missing: dict[str, int] = {}
        for label, counts in (("connections", usage), ("oauth provider client secrets", provider_usage)):
            if label != "connections" and not counts:
                continue
            older = {key_id: n for key_id, n in counts.items() if key_id != ring.primary_key_id}
            for key_id, n in older.items():
                if key_id not in ring:
                    missing[key_id] = missing.get(key_id, 0) + n
            self.stdout.write(
                f"{label}: already current {counts.get(ring.primary_key_id, 0)}, "
                f"to rewrap {sum(older.values())}{_by_key(older)}"
            )
        if missing:
            self.stdout.write(
                f"under keys not in the ring, these would fail: {sum(missing.values())}{_by_key(missing)}; "
                "add those keys back to TOOLGATE_ENCRYPTION_KEYS before rotating"
            )


def _by_key(counts: dict[str, int]) -> str:
    return f" ({', '.join(f'{key_id}: {n}' for key_id, n in sorted(counts.items()))})" if counts else ""
