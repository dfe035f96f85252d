"""Reading an id a caller sent: a UUID, or None for anything that cannot be one.

Every selector that looks a row up by an id from a URL, a body or a form
answers a malformed id exactly like an unknown one (None, an empty queryset),
never with an error, so ids cannot be probed. One helper says how, instead of
a try/except around `uuid.UUID(...)` in each of them.
"""

from __future__ import annotations

import uuid


def uuid_or_none(value: object) -> uuid.UUID | None:
    """`value` (a UUID, or its text in any form `uuid.UUID` reads) as a UUID; None if it is not one."""
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None
