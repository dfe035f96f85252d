"""How the consent and delegation pages show the connections a person may let a client use: by provider.

One group per provider, each connection with what tells it apart (its label,
whether it is the person's own or the tenant's, its last four id characters)
and whether it is ticked. When a call names no connection, the one ticked
connection of the tool's provider is used; a personal one comes before the
tenant's; with two or more left the call must name one (runner/grants.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from connections_app.models import Connection

CONNECTION_FIELD = "tg_connection"  # the checkboxes' name on every page that offers connections


@dataclass(frozen=True, slots=True)
class ConnectionOption:
    connection_id: str
    label: str
    personal: bool
    short_id: str
    checked: bool


@dataclass(frozen=True, slots=True)
class ConnectionGroup:
    provider: str
    options: list[ConnectionOption]


def connection_groups(connections: Iterable[Connection], picked: set[str]) -> list[ConnectionGroup]:
    groups: dict[str, list[ConnectionOption]] = {}
    for connection in connections:
        groups.setdefault(connection.provider, []).append(
            ConnectionOption(
                connection_id=str(connection.pk),
                label=connection.label or connection.get_credential_type_display(),
                personal=connection.owner_id is not None,
                short_id=connection.short_id,
                checked=str(connection.pk) in picked,
            )
        )
    return [ConnectionGroup(provider=provider, options=options) for provider, options in sorted(groups.items())]
