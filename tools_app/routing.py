"""The out-of-band fields of a tool call: what the caller says about a call beside the model's arguments.

Every interface that runs calls carries the same four: `POST /api/v1/tools/exec`
and `POST /api/v1/tools/calls` as body fields (docs/api.md), MCP's `tools/call`
as `toolgate/<name>` keys of `params._meta`. They are listed once, here:
the REST serializers take their fields from `CallRoutingInput`
(tools_app/api/serializers.py), MCP derives its `_meta` keys from
`CALL_ROUTING_FIELDS`, and the services read a `CallRouting`.

Plain Python on purpose: the MCP protocol module reads the names without Django.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Final


@dataclass(frozen=True, slots=True)
class CallRouting:
    """Where a call belongs (its agent run) and which connection it may use, under which grant.

    `connection_ids` is what the caller declares for its run: absent (None)
    means `[connection_id]`; an explicit `[]` declares none, so a call naming a
    connection is refused (`policy_denied`, the empty intersection).
    """

    run_id: str | None = None
    connection_id: str | None = None
    connection_ids: list[str] | None = None
    grant_id: str | None = None

    @classmethod
    def of(cls, validated: Mapping[str, Any]) -> CallRouting:
        """From a request's validated fields (CallRoutingInput's); absent fields stay None."""
        return cls(
            run_id=validated.get("run_id"),
            connection_id=validated.get("connection_id"),
            connection_ids=validated.get("connection_ids"),
            grant_id=validated.get("grant_id"),
        )

    @property
    def declared_connection_ids(self) -> tuple[str, ...]:
        """The connections the caller declares for its run, the default applied."""
        if self.connection_ids is not None:
            return tuple(self.connection_ids)
        return (self.connection_id,) if self.connection_id else ()


# The fields' names in the contract's order (docs/api.md): the REST bodies list them so, after the call's own fields.
CALL_ROUTING_FIELDS: Final = tuple(field.name for field in fields(CallRouting))
