"""What every bench does first: a fresh PostgreSQL database, and Django's commands run against it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import psycopg

ROOT = Path(__file__).resolve().parents[1]


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
