"""What every bench does first: production-like settings, a fresh PostgreSQL database, Django's commands."""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import psycopg

ROOT = Path(__file__).resolve().parents[1]


def production_environment(settings_module: str = "config.settings") -> dict[str, str]:
    """The server's and the bench's settings: production-like (DEBUG off), fresh secrets each run."""
    key = base64.b64encode(secrets.token_bytes(32)).decode()
    return {
        "DJANGO_SETTINGS_MODULE": settings_module,
        "DATABASE_URL": os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/toolgate_bench"),
        "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/9"),
        "DEBUG": "False",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "127.0.0.1",
        "TOOLGATE_ENCRYPTION_KEYS": f"bench:{key}",
        "LOG_LEVEL": "WARNING",
    }


def fresh_database(url: str) -> None:
    """Drop and re-create the database DATABASE_URL names (PostgreSQL only)."""
    parsed = urlparse(url)
    name = parsed.path.lstrip("/")
    if not parsed.scheme.startswith("postgres"):
        sys.exit("bench: DATABASE_URL must point at PostgreSQL")
    admin = parsed._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{name}"')


def manage(env: dict[str, str], *args: str) -> None:
    """`manage.py <args>` in a child process with `env`, its output discarded."""
    subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
