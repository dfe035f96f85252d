"""Settings default to production: startup refuses to run without real secrets unless development asks for it."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.settings import parse_key_ring

ROOT = Path(__file__).resolve().parents[2]
REAL_KEY = base64.b64encode(b"k" * 32).decode()


def _check(**env: str) -> subprocess.CompletedProcess[str]:
    """`manage.py check` in a fresh interpreter: the whole start (apps, URLs, system checks) under `env`."""
    return _run([sys.executable, "manage.py", "check"], **env)


def _load_settings(**env: str) -> subprocess.CompletedProcess[str]:
    """The settings module alone in a fresh interpreter, where every refusal to start is raised (a tenth of a check)."""
    return _run([sys.executable, "-c", "import config.settings"], **env)


def _run(command: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "TOOLGATE_ENCRYPTION_KEYS", "DEBUG", "REDIS_URL"}
    }
    return subprocess.run(
        command,
        cwd=ROOT,
        env={**clean, "ALLOWED_HOSTS": "example.com", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_debug_false_with_dev_secrets_refuses_to_start():
    result = _load_settings(DEBUG="False")

    assert result.returncode != 0
    assert "SECRET_KEY and TOOLGATE_ENCRYPTION_KEYS must be set: DEBUG is off" in result.stderr


def test_nothing_configured_is_production_and_refuses_to_start_without_secrets():
    result = _load_settings()  # no DEBUG at all

    assert result.returncode != 0
    assert "On a development machine set DEBUG=true (make run and make test do)" in result.stderr


def test_development_mode_runs_on_generated_secrets():
    result = _check(DEBUG="true")

    assert result.returncode == 0, result.stderr


def test_debug_false_with_a_dev_key_ring_refuses_to_start():
    result = _load_settings(DEBUG="False", SECRET_KEY="a-real-production-secret-key-" + "x" * 40)

    assert result.returncode != 0
    assert "TOOLGATE_ENCRYPTION_KEYS" in result.stderr


PRODUCTION_SECRETS = {
    "SECRET_KEY": "a-real-production-secret-key-" + "x" * 40,
    "TOOLGATE_ENCRYPTION_KEYS": f"k1:{REAL_KEY}",
}


def test_debug_false_with_real_secrets_and_redis_starts():
    result = _check(DEBUG="False", REDIS_URL="redis://127.0.0.1:6379/0", **PRODUCTION_SECRETS)

    assert result.returncode == 0, result.stderr


def _setting(name: str, **env: str) -> str:
    """One setting as a fresh interpreter under `env` reads it (the settings module alone)."""
    clean = {k: v for k, v in os.environ.items() if k != "TOOLGATE_TRUSTED_PROXIES"}
    return subprocess.run(
        [sys.executable, "-c", f"from django.conf import settings; print(settings.{name})"],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()


def test_behind_a_trusted_proxy_its_https_marker_is_believed():
    assert _setting("SECURE_PROXY_SSL_HEADER") == "None"
    assert _setting("SECURE_PROXY_SSL_HEADER", TOOLGATE_TRUSTED_PROXIES="10.0.0.0/8") == str(
        ("HTTP_X_FORWARDED_PROTO", "https")
    )


def test_debug_false_without_redis_refuses_to_start_instead_of_running_tasks_eagerly():
    result = _load_settings(DEBUG="False", **PRODUCTION_SECRETS)

    assert result.returncode != 0
    assert "DEBUG=False without REDIS_URL" in result.stderr


def test_a_jitter_beyond_the_broker_visibility_timeout_refuses_to_start():
    result = _load_settings(DEBUG="true", TOOLGATE_REFRESH_JITTER_SECONDS="600", CELERY_BROKER_VISIBILITY_TIMEOUT="300")

    assert result.returncode != 0
    assert "TOOLGATE_REFRESH_JITTER_SECONDS must stay below CELERY_BROKER_VISIBILITY_TIMEOUT" in result.stderr


def test_dev_secrets_are_generated_under_var_and_not_tracked():
    assert (ROOT / "var" / "secret_key").is_file()
    assert (ROOT / "var" / "encryption_keys").read_text().startswith("dev1:")
    assert "var/" in (ROOT / ".gitignore").read_text().splitlines()


def test_key_ring_keeps_order_and_rejects_bad_entries():
    other = base64.b64encode(b"o" * 32).decode()

    assert list(parse_key_ring(f"new:{REAL_KEY}, old:{other}")) == ["new", "old"]
    for bad in (
        "",
        "nokid",
        f":{REAL_KEY}",
        "k1:not-base64!",
        f"k1:{base64.b64encode(b'short').decode()}",
        f"k1:{REAL_KEY},k1:{other}",
    ):
        with pytest.raises(ImproperlyConfigured):
            parse_key_ring(bad)


def test_the_mcp_host_refuses_to_start_in_production_without_its_token():
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLGATE_MCP_HOST", "DEBUG"))}
    env = {**clean, "ALLOWED_HOSTS": "example.com", "DEBUG": "False", "REDIS_URL": "redis://127.0.0.1:6379/0"}

    result = subprocess.run(
        [sys.executable, "manage.py", "mcp_host"],
        cwd=ROOT,
        env={**env, **PRODUCTION_SECRETS},
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode != 0
    assert "set TOOLGATE_MCP_HOST_TOKEN" in result.stderr
    production = {"DEBUG": "False", "REDIS_URL": "redis://127.0.0.1:6379/0", "ALLOWED_HOSTS": "example.com"}
    assert _setting("TOOLGATE_MCP_HOST_TOKEN", **production, **PRODUCTION_SECRETS) == ""  # never a generated one
