"""What a stdio child's environment may hold, and the names that are never handed to one.

The contract: PATH, a private HOME and TMPDIR, LANG, npm's quiet switches (NPM_QUIET),
and what the operator declared;
never Toolgate's own settings or secrets. The SDK merges `get_default_environment()`
(HOME, LOGNAME, PATH, SHELL, TERM, USER of the host) under what we pass, so every one
of those is either set here or removed by the launcher.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from mcp.client.stdio import DEFAULT_INHERITED_ENV_VARS

NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
TOOLGATE_NAMES = frozenset({"SECRET_KEY", "DATABASE_URL", "REDIS_URL"})
TOOLGATE_PREFIXES = ("TOOLGATE_", "DJANGO_", "CELERY_")
PRIVATE_NAMES = frozenset({"HOME", "TMPDIR"})
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
DEFAULT_LANG = "C.UTF-8"
# npm's update, funding and audit notices: noise in a child's log, and the update check is a network call.
NPM_QUIET = {"NPM_CONFIG_UPDATE_NOTIFIER": "false", "NPM_CONFIG_FUND": "false", "NPM_CONFIG_AUDIT": "false"}


def is_toolgate_name(name: str) -> bool:
    """One of Toolgate's own settings or secrets: never read for a child, never handed to one."""
    return name.upper() in TOOLGATE_NAMES or name.upper().startswith(TOOLGATE_PREFIXES)


def declared_name_problem(name: str) -> str | None:
    """Why `name` cannot be declared for a child (None when it can)."""
    if not NAME_PATTERN.match(name):
        return f"{name[:40]!r} is not an environment variable name"
    if is_toolgate_name(name):
        return f"{name} is one of Toolgate's own settings; a child never gets it"
    if name in PRIVATE_NAMES:
        return f"{name} is private to each child (the host sets it)"
    return None


def child_environment(
    *,
    home: str,
    tmpdir: str,
    declared: Mapping[str, str],
    secrets: Mapping[str, str],
    path: str | None = None,
    lang: str | None = None,
) -> tuple[dict[str, str], list[str]]:
    """(environment, names the launcher must remove) for one child.

    Built from nothing: the host's own environment is never the starting point.
    `secrets` (sealed `--secret-env` values, the connection's credential) win over
    `declared` values of the same name.
    """
    env = {
        "PATH": path or os.environ.get("PATH") or DEFAULT_PATH,
        "LANG": lang or os.environ.get("LANG") or DEFAULT_LANG,
        **NPM_QUIET,
    }
    env.update({name: value for name, value in declared.items() if declared_name_problem(name) is None})
    env.update({name: value for name, value in secrets.items() if declared_name_problem(name) is None})
    env["HOME"], env["TMPDIR"] = home, tmpdir
    unset = sorted(name for name in DEFAULT_INHERITED_ENV_VARS if name not in env)
    return env, unset
