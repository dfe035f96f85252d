"""What every app's share of a key rotation has in common (`manage.py rotate_encryption_keys`).

Every value sealed with the key ring (`crypto.py`) must be rewrapped under the
primary key before an older key can leave TOOLGATE_ENCRYPTION_KEYS, so each
app that owns sealed rows has a rewrap service, and they all answer the same
`RewrapOutcome`. Most rows keep the key id in a column beside the envelope;
a few (pending approvals' arguments, tenant webhooks' secrets) do not, and
these helpers read the key id from the envelope's header in SQL instead, so a
rotation neither loads every blob to find the few still under an old key nor
needs a column kept in step with the envelope.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from django.db.models import BinaryField, QuerySet
from django.db.models.functions import Substr

from core.crypto import (
    MAX_KEY_ID_BYTES,
    NONCE_BYTES,
    TAG_BYTES,
    CredentialError,
    envelope_header,
    envelope_key_id,
)

# Enough of an envelope to read its key id, and to tell a truncated one (which envelope_key_id refuses).
_HEAD_BYTES = 2 + MAX_KEY_ID_BYTES + NONCE_BYTES + TAG_BYTES
UNREADABLE_ENVELOPE = "(unreadable envelope)"


@dataclass(frozen=True, slots=True)
class RewrapOutcome:
    """What one rewrap did. `error` is set when the envelope did not open (missing key, tampering):
    a failure the operator must act on, unlike a row skipped because it changed concurrently."""

    rewrapped: bool
    reason: str = ""  # why not, when not: "changed concurrently", or the CredentialError's message
    error: CredentialError | None = None


def _head(column: str, length: int) -> Substr:
    """The first `length` bytes of a bytea/blob column (Substr alone would call them text)."""
    return Substr(column, 1, length, output_field=BinaryField())


def not_sealed_under(rows: QuerySet, column: str, key_id: str) -> QuerySet:
    """The rows whose envelope in `column` is not under `key_id` (NULL columns excluded).

    Compares the envelope's header (version, key id length, key id) in SQL: a
    blob under `key_id` starts with exactly those bytes, and no other does.
    """
    header = envelope_header(key_id)
    return (
        rows.filter(**{f"{column}__isnull": False})
        .alias(_sealed_head=_head(column, len(header)))
        .exclude(_sealed_head=header)
    )


def envelope_key_usage(rows: QuerySet, column: str) -> dict[str, int]:
    """How many of these rows' envelopes in `column` each key id seals (NULL columns not counted).

    Only each envelope's first bytes leave the database. An envelope whose
    header does not parse is counted under UNREADABLE_ENVELOPE: it opens with
    no key, and the rotation names its row.
    """
    heads = (
        rows.filter(**{f"{column}__isnull": False})
        .annotate(_sealed_head=_head(column, _HEAD_BYTES))
        .values_list("_sealed_head", flat=True)
    )
    usage: Counter[str] = Counter()
    for head in heads.iterator():
        try:
            usage[envelope_key_id(bytes(head))] += 1
        except CredentialError:
            usage[UNREADABLE_ENVELOPE] += 1
    return dict(usage)
