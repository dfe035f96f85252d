"""Development secrets generated into var/ on first start, never committed.

The embedded default must run with no configuration at all, yet ship no secret
in the repository: each clone generates its own key and key ring once, and
production refuses to start while these are in use (see settings).
"""

from __future__ import annotations

import base64
import os
import secrets
from collections.abc import Callable
from pathlib import Path

DEV_KEY_ID = "dev1"


def read_or_create(path: Path, generate: Callable[[], str]) -> str:
    """The file's content, creating it (mode 0600) with `generate()` when missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    value = generate()
    with os.fdopen(fd, "w") as handle:
        handle.write(value)
    return value


def new_secret_key() -> str:
    return "dev-" + secrets.token_urlsafe(48)


def new_key_ring() -> str:
    return f"{DEV_KEY_ID}:" + base64.b64encode(secrets.token_bytes(32)).decode()


def new_token() -> str:
    return secrets.token_urlsafe(32)
