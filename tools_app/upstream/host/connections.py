"""Which tenant connections may still be served: a port connections_app fills in.

The host stops the child of a connection that was revoked (or needs
re-authorisation). Connections live in connections_app (layer 4), which tools_app
(layer 3) must not import, so connections_app installs the check when Django
starts (docs/architecture.md, "The shared kernel").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

_installed: dict[str, Callable[[Iterable[str]], set[str]]] = {}


def install_connection_check(check: Callable[[Iterable[str]], set[str]]) -> None:
    _installed["check"] = check


def usable_connection_ids(connection_ids: Iterable[str]) -> set[str]:
    """The ids among `connection_ids` whose connections are active (not revoked, not awaiting re-authorisation)."""
    check = _installed.get("check")
    if check is None:
        raise RuntimeError("no connection check is installed (connections_app is not loaded)")
    return check(connection_ids)
