"""The shipped proxy in front of a real gunicorn: config/nginx.conf and config/gunicorn.conf.py, on loopback.

    with ServedStack(tmp_path) as stack:       # migrated SQLite database, demo seeded
        httpx.get(f"{stack.url}/healthz")      # through nginx, on a free (non-80) port

nginx.conf is used as shipped, with two words changed: the upstream `web:8000`
becomes gunicorn's loopback port and `listen 80` nginx's. It is wrapped in the
main/events/http blocks docker's nginx image provides (with private temp and
log paths), and nginx runs in the foreground from /usr/sbin/nginx.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import httpx
import pytest

from tests.support.gunicorn import ROOT, free_port, start_gunicorn

NGINX = "/usr/sbin/nginx"
NGINX_CONF = ROOT / "config" / "nginx.conf"


def loopback_nginx_conf(*, directory: Path, listen_port: int, upstream_port: int) -> str:
    """config/nginx.conf adapted to loopback ports, wrapped as a whole nginx configuration."""
    shipped = NGINX_CONF.read_text()
    assert "server web:8000;" in shipped
    assert "listen 80 default_server;" in shipped
    server = shipped.replace("server web:8000;", f"server 127.0.0.1:{upstream_port};").replace(
        "listen 80 default_server;", f"listen 127.0.0.1:{listen_port} default_server;"
    )
    temp = {name: directory / name for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")}
    for path in temp.values():
        path.mkdir(mode=0o777, exist_ok=True)
        path.chmod(0o777)  # nginx's workers run as nobody when started by root
    return "\n".join(
        [
            "daemon off;",
            "worker_processes 1;",
            f"pid {directory / 'nginx.pid'};",
            f"error_log {directory / 'error.log'} warn;",
            "events { worker_connections 512; }",
            "http {",
            "    access_log off;",
            *(f"    {name}_temp_path {path};" for name, path in temp.items()),
            server,
            "}",
        ]
    )


def _wait_for(url: str, process: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 120  # a worker's first boot takes 10 s and more on a busy machine
    while True:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{what} did not start")
        time.sleep(0.1)


class ServedStack:
    """nginx (the shipped configuration) → gunicorn (the shipped configuration) → Toolgate on SQLite."""

    def __init__(self, directory: Path, *, env: dict[str, str] | None = None, workers: int = 1) -> None:
        if not os.path.exists(NGINX):
            pytest.skip("nginx is not installed (apt-get install nginx)")
        self.directory = directory
        self.env = {
            **os.environ,
            "DEBUG": "True",
            "DATABASE_URL": f"sqlite:///{directory / 'db.sqlite3'}",
            "REDIS_URL": "",
            "TOOLGATE_API_RATE_PER_SECOND": "0",
            "WEB_CONCURRENCY": str(workers),
            **(env or {}),
        }
        self.env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        self.gunicorn_port, self.port = free_port(), free_port()
        self._processes: list[subprocess.Popen] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _manage(self, *args: str) -> None:
        command = [sys.executable, "manage.py", *args]
        done = subprocess.run(command, cwd=ROOT, env=self.env, capture_output=True, text=True)
        if done.returncode:
            pytest.fail(f"manage.py {args[0]} failed: {done.stderr[-2000:]}")

    def __enter__(self) -> ServedStack:
        self._manage("migrate", "--noinput")
        self._manage("sync_tools")
        self._manage("seed_demo", "--credentials-file", str(self.directory / "demo.json"))
        self.api_key = json.loads((self.directory / "demo.json").read_text())["api_key"]
        try:
            gunicorn = start_gunicorn(
                "config.wsgi:application",
                port=self.gunicorn_port,
                env={**self.env, "PROMETHEUS_MULTIPROC_DIR": str(self.directory / "prometheus")},
            )
            self._processes.append(gunicorn)
            _wait_for(f"http://127.0.0.1:{self.gunicorn_port}/healthz", gunicorn, "gunicorn")
            conf = self.directory / "nginx.conf"
            conf.write_text(
                loopback_nginx_conf(directory=self.directory, listen_port=self.port, upstream_port=self.gunicorn_port)
            )
            nginx = subprocess.Popen(
                [NGINX, "-p", str(self.directory), "-c", str(conf)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            self._processes.append(nginx)
            _wait_for(f"{self.url}/healthz", nginx, "nginx")
        except BaseException:
            self._stop()
            raise
        return self

    def error_log(self) -> str:
        path = self.directory / "error.log"
        return path.read_text() if path.exists() else ""

    def _stop(self) -> None:
        for process in reversed(self._processes):
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        self._processes.clear()
        shutil.rmtree(self.directory / "prometheus", ignore_errors=True)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop()
