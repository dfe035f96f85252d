"""How a governance screen names a connection: by its label, which the rows' owner installs at startup.

An approval request holds the id of the connection its call would use (this app sits below
connections_app and never imports it), and an approver must see what that id is before deciding.
connections_app installs its `connection_label` selector here when it is ready, the way the
catalog installs its tool ids (`catalog.py`); until then a connection shows as its id.
"""

from __future__ import annotations

from collections.abc import Callable

ConnectionLabel = Callable[..., str]

_installed: list[ConnectionLabel] = []


def install_connection_label(label: ConnectionLabel) -> None:
    """Called by connections_app at startup: `label(tenant_id=..., connection_id=...)`, never a secret."""
    _installed[:] = [label]


def connection_label(*, tenant_id: int, connection_id: str) -> str:
    if not _installed:
        return connection_id or "none"
    return _installed[0](tenant_id=tenant_id, connection_id=connection_id)
