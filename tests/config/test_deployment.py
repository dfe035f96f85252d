"""The deployment files, read statically (no Docker here): nginx in front, gunicorn behind it, limits in order.

Slow clients froze every sync worker, and gunicorn's HTML error pages
reached API clients. These tests hold the files to what fixed it: only nginx
is published, it buffers and times out slow clients, its limits answer before
gunicorn's, its own errors are the API's envelope, and the timeouts are
ordered so that the application answers first.
"""

from __future__ import annotations

import json
import os
import re
import runpy
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml
from gunicorn.config import Config

from core.api.parser import MAX_BODY_BYTES
from runner.contracts import MAX_TIMEOUT_MS
from runner.pipeline import REQUEST_TIMEOUT_S
from tests.support.stack import ServedStack
from tools_app.tools import BUILTIN_TOOLS

ROOT = Path(__file__).resolve().parents[2]
GUNICORN_CONF = "config/gunicorn.conf.py"
NGINX_CONF = ROOT / "config" / "nginx.conf"

# --- a small reader for nginx's configuration syntax ----------------------------------------

_TOKEN = re.compile(r"""#[^\n]*|'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)"|([{};])|([^\s{};'"#]+)""")


def _tokens(text: str) -> list[str]:
    tokens = []
    for match in _TOKEN.finditer(text):
        single, double, punctuation, word = match.groups()
        if match.group().startswith("#"):
            continue
        tokens.append(single if single is not None else double if double is not None else punctuation or word)
    return tokens


def parse_nginx(text: str) -> list[tuple[str, list[str], list[Any] | None]]:
    """Directives as (name, arguments, block or None), nested as nginx nests them."""
    stack: list[list[Any]] = [[]]
    current: list[str] = []
    for token in _tokens(text):
        if token == ";":
            stack[-1].append((current[0], current[1:], None))
            current = []
        elif token == "{":
            block: list[Any] = []
            stack[-1].append((current[0], current[1:], block))
            stack.append(block)
            current = []
        elif token == "}":
            stack.pop()
        else:
            current.append(token)
    assert len(stack) == 1
    assert not current
    return stack[0]


def directives(block: list[Any], name: str) -> list[list[str]]:
    return [arguments for directive, arguments, _ in block if directive == name]


def one(block: list[Any], name: str) -> list[str]:
    (arguments,) = directives(block, name)
    return arguments


def seconds(value: str) -> float:
    number, unit = re.fullmatch(r"(\d+)(ms|s|m)?", value).groups()
    return int(number) * {"ms": 0.001, "s": 1, "m": 60, None: 1}[unit]


def size(value: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([kKmM]?)", value).groups()
    return int(number) * {"": 1, "k": 1024, "K": 1024, "m": 1024**2, "M": 1024**2}[unit]


@pytest.fixture(scope="module")
def server() -> list[Any]:
    (_name, _arguments, block) = next(d for d in parse_nginx(NGINX_CONF.read_text()) if d[0] == "server")
    return block


@pytest.fixture(scope="module")
def gunicorn() -> Config:
    """gunicorn's own Config, loaded the way gunicorn loads the file (its validators run)."""
    config = Config()
    for name, value in runpy.run_path(str(ROOT / GUNICORN_CONF)).items():
        if name in config.settings:
            config.set(name, value)
    return config


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


# --- docker-compose.yml ------------------------------------------------------------------------


def test_only_nginx_is_published_and_it_serves_the_projects_configuration(compose):
    services = compose["services"]

    published = {name for name, service in services.items() if service.get("ports")}
    nginx = services["nginx"]

    assert published == {"nginx"}
    assert nginx["ports"] == ["8000:80"]
    assert "./config/nginx.conf:/etc/nginx/conf.d/default.conf:ro" in nginx["volumes"]
    assert nginx["depends_on"] == {"web": {"condition": "service_started"}}
    assert services["web"]["expose"] == ["8000"]


def test_the_trusted_proxy_network_is_the_stacks_own(compose):
    subnet = compose["networks"]["default"]["ipam"]["config"][0]["subnet"]

    assert compose["x-toolgate"]["environment"]["TOOLGATE_TRUSTED_PROXIES"] == subnet


def test_nginx_proxies_to_the_web_service_on_its_port(server, compose):
    (_name, _arguments, upstream) = next(d for d in parse_nginx(NGINX_CONF.read_text()) if d[0] == "upstream")
    location = next(block for name, arguments, block in server if name == "location" and arguments == ["/"])

    assert one(upstream, "server") == ["web:8000"]
    assert one(location, "proxy_pass") == ["http://toolgate_web"]
    assert compose["services"]["web"]["expose"] == ["8000"]


def web_command(source: str, compose: dict[str, Any]) -> list[str]:
    """The gunicorn command line of the web process (in the Procfile, what follows collectstatic)."""
    if source == "compose":
        return shlex.split(compose["services"]["web"]["command"])
    lines = (ROOT / source).read_text().splitlines()
    if source == "Procfile":
        web = next(line.removeprefix("web:") for line in lines if line.startswith("web:"))
        collect, gunicorn = web.split("&&")
        assert shlex.split(collect) == ["python", "manage.py", "collectstatic", "--noinput", "--verbosity", "0"]
        return shlex.split(gunicorn)
    return json.loads(next(line.removeprefix("CMD") for line in lines if line.startswith("CMD")))


@pytest.mark.parametrize(
    ("source", "bind"),
    [("compose", ["--bind", "0.0.0.0:8000"]), ("Procfile", []), ("Dockerfile", [])],
)
def test_every_web_command_uses_the_gunicorn_configuration(compose, source, bind):
    """Only compose, whose web service only nginx reaches, binds more than the configuration's loopback."""
    assert web_command(source, compose) == ["gunicorn", "-c", GUNICORN_CONF, *bind, "config.wsgi"]


# --- nginx: slow clients wait in nginx, never in a worker --------------------------------------


def test_slow_clients_are_timed_out_by_nginx(server):
    assert seconds(one(server, "client_header_timeout")[0]) <= 15
    assert seconds(one(server, "client_body_timeout")[0]) <= 15
    assert seconds(one(server, "send_timeout")[0]) <= 60
    assert seconds(one(server, "keepalive_timeout")[0]) <= 30


def test_requests_and_answers_are_buffered_in_nginx(server):
    body_limit = size(one(server, "client_max_body_size")[0])

    assert one(server, "proxy_request_buffering") == ["on"]
    assert one(server, "proxy_buffering") == ["on"]
    # Never over the application's limit: a body it would refuse unread never reaches gunicorn.
    assert body_limit == MAX_BODY_BYTES
    assert size(one(server, "client_body_buffer_size")[0]) >= body_limit  # bodies stay in memory


def test_the_client_cannot_choose_the_forwarded_address(server):
    headers = {arguments[0]: arguments[1] for arguments in directives(server, "proxy_set_header")}

    assert headers["X-Real-IP"] == "$remote_addr"
    assert headers["X-Forwarded-For"] == "$remote_addr"  # replaced, not $proxy_add_x_forwarded_for
    assert headers["Host"] == "$toolgate_host"  # the client's Host, port included


# --- limits and timeouts, in the order they answer -------------------------------------------------


def test_nginx_line_limits_answer_before_gunicorns(server, gunicorn):
    count, buffer_size = one(server, "large_client_header_buffers")
    header_budget = size(one(server, "client_header_buffer_size")[0]) + int(count) * size(buffer_size)

    assert size(buffer_size) < gunicorn.limit_request_line
    assert size(buffer_size) < gunicorn.limit_request_field_size
    # The shortest header line nginx forwards is four bytes ("a:" CRLF); nginx adds a few of its own.
    assert header_budget // 4 + 16 < gunicorn.limit_request_fields


def test_the_application_answers_before_gunicorn_kills_the_worker_and_before_nginx_gives_up(server, gunicorn, settings):
    longest_budget_s = max(tool.contract.default_timeout_ms for tool in BUILTIN_TOOLS) / 1000
    before_the_tool = settings.TOOLGATE_SYNC_REFRESH_TIMEOUT_MS / 1000  # a refresh may run first

    assert longest_budget_s <= MAX_TIMEOUT_MS / 1000  # no contract may declare more
    assert MAX_TIMEOUT_MS / 1000 + before_the_tool + 5 < REQUEST_TIMEOUT_S < gunicorn.timeout
    assert gunicorn.timeout < seconds(one(server, "proxy_read_timeout")[0])
    assert gunicorn.worker_class_str == "gthread"


def test_nginx_reuses_its_connections_to_gunicorn_and_gunicorn_never_closes_one_first(server, gunicorn):
    (_name, _arguments, upstream) = next(d for d in parse_nginx(NGINX_CONF.read_text()) if d[0] == "upstream")

    assert int(one(upstream, "keepalive")[0]) > 0
    assert one(server, "proxy_http_version") == ["1.1"]
    assert ["Connection", ""] in directives(server, "proxy_set_header")  # not "close", as nginx sends by default
    assert seconds(one(upstream, "keepalive_timeout")[0]) < gunicorn.keepalive


def test_gunicorn_reads_port_and_concurrency_from_the_environment(monkeypatch):
    monkeypatch.setenv("PORT", "9123")
    monkeypatch.setenv("WEB_CONCURRENCY", "6")
    monkeypatch.setenv("WEB_THREADS", "3")

    loaded = runpy.run_path(str(ROOT / GUNICORN_CONF))

    assert (loaded["bind"], loaded["workers"], loaded["threads"]) == ("127.0.0.1:9123", 6, 3)


# --- nginx's own errors are the API's envelope ------------------------------------------------------

EXPECTED_ERROR_PAGES = {
    "400": ("400", "bad_request"),
    "405": ("405", "method_not_allowed"),
    "408": ("408", "bad_request"),
    "413": ("413", "validation"),
    "414": ("414", "bad_request"),
    "494": ("431", "bad_request"),
    "500": ("502", "internal"),
    "502": ("502", "internal"),
    "503": ("502", "internal"),
    "504": ("504", "internal"),
}


def test_errors_nginx_answers_itself_are_json_envelopes(server):
    pages = {}
    for arguments in directives(server, "error_page"):
        *codes, uri = arguments
        replaced = [code for code in codes if code.startswith("=")]
        for code in (code for code in codes if not code.startswith("=")):
            pages[code] = (replaced[0][1:] if replaced else None, uri)
    locations = {arguments[-1]: block for name, arguments, block in server if name == "location"}

    answered = {}
    for code, (replaced_by, uri) in pages.items():
        block = locations[uri]
        status, body = one(block, "return")
        envelope = json.loads(body.replace("\\n", "\n"))  # nginx reads \n in a string as a newline
        assert directives(block, "internal") == [[]]  # clients cannot ask for these pages themselves
        assert one(block, "default_type") == ["application/json"]
        assert set(envelope) == {"error_code", "safe_message"}
        assert replaced_by in (None, status)
        answered[code] = (status, envelope["error_code"])

    assert answered == EXPECTED_ERROR_PAGES
    # The application's own errors pass through untouched: only nginx's are replaced.
    assert one(server, "proxy_intercept_errors") == ["off"]


# --- production mode without collected static files --------------------------------------------


def _production_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "TOOLGATE_"))}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DEBUG="False",
        SECRET_KEY="a-production-secret-" + "x" * 40,
        TOOLGATE_ENCRYPTION_KEYS="k1:" + "A" * 43 + "=",
        ALLOWED_HOSTS="toolgate.example",
        REDIS_URL=os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/15",  # never contacted by these checks
        STATIC_ROOT=str(tmp_path / "static"),
    )
    return env


def test_check_deploy_reports_static_files_that_were_not_collected(tmp_path):
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "ERROR"],
        cwd=ROOT,
        env=_production_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode != 0
    assert "toolgate.E001" in result.stderr
    assert "run `python manage.py collectstatic --noinput`" in result.stderr


def test_the_wsgi_application_refuses_to_start_without_collected_static_files(tmp_path):
    load = [sys.executable, "-c", "import config.wsgi"]
    env = _production_env(tmp_path)

    refused = subprocess.run(load, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    collect = [sys.executable, "manage.py", "collectstatic", "--noinput", "--verbosity", "0"]
    subprocess.run(collect, cwd=ROOT, env=env, check=True, timeout=120)
    started = subprocess.run(load, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)

    assert refused.returncode != 0
    assert "ImproperlyConfigured: DEBUG=False but the static files were not collected" in refused.stderr
    assert started.returncode == 0, started.stderr


# --- the MCP host: its own process beside web, worker and beat ------------------------------------


def procfile(source: str) -> dict[str, list[str]]:
    lines = (ROOT / source).read_text().splitlines()
    entries = (line.split(":", 1) for line in lines if line and not line.startswith("#"))
    return {name.strip(): shlex.split(command) for name, command in entries}


@pytest.mark.parametrize("source", ["Procfile", "Procfile.dev"])
def test_make_run_and_the_production_procfile_start_the_mcp_host(source):
    processes = procfile(source)

    assert processes["mcp_host"] == ["python", "manage.py", "mcp_host"]
    assert {"web", "worker", "beat", "mcp_host"} <= set(processes)


def test_compose_runs_the_mcp_host_as_an_unpublished_service_that_web_and_workers_reach(compose):
    services = compose["services"]
    host = services["mcp_host"]
    url = urlsplit(compose["x-toolgate"]["environment"]["TOOLGATE_MCP_HOST_URL"])
    command = shlex.split(host["command"])

    assert command[:3] == ["python", "manage.py", "mcp_host"]
    assert command[command.index("--bind") + 1] == f"0.0.0.0:{url.port}"
    assert (url.scheme, url.hostname) == ("http", "mcp_host")
    assert host["expose"] == [str(url.port)]
    assert "ports" not in host
    for name in ("web", "worker", "beat", "mcp_host"):
        assert services[name]["environment"]["TOOLGATE_MCP_HOST_URL"] == url.geturl()
    for name in ("web", "worker", "beat"):
        assert services[name]["env_file"] == ".env"  # TOOLGATE_MCP_HOST_TOKEN comes from there, never the file
    assert "TOOLGATE_MCP_HOST_TOKEN" not in compose["x-toolgate"]["environment"]
    # the host's token is interpolated from .env by compose, never written in the file
    assert host["environment"]["TOOLGATE_MCP_HOST_TOKEN"].startswith("${TOOLGATE_MCP_HOST_TOKEN:?")


def test_compose_gives_the_mcp_host_no_database_credentials_and_a_network_without_the_database(compose):
    services = compose["services"]
    host = services["mcp_host"]

    assert "env_file" not in host  # .env holds SECRET_KEY, the key ring and the database password
    assert sorted(host["environment"]) == ["DEBUG", "TOOLGATE_MCP_HOST_TOKEN", "TOOLGATE_MCP_HOST_URL"]
    assert "depends_on" not in host  # it needs neither the database nor its migrations
    assert host["networks"] == ["mcp"]
    assert services["postgres"]["networks"] == services["redis"]["networks"] == ["data"]
    on_mcp = sorted(name for name, service in services.items() if "mcp" in (service.get("networks") or []))
    assert on_mcp == ["mcp_host", "web", "worker"]
    assert compose["networks"]["data"] == {"internal": True}
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"].startswith("${POSTGRES_PASSWORD:?")
    assert "toolgate:toolgate@" not in (ROOT / "docker-compose.yml").read_text()
    assert ".env" in (ROOT / ".dockerignore").read_text().split()  # nor does the image carry the clone's .env


# --- through the shipped nginx, live: config/nginx.conf on loopback in front of a real gunicorn ------------


# Starting the stack (migrate, seed, a gunicorn worker's first boot) takes a minute on a busy machine.
LIVE = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[ServedStack]:
    with ServedStack(tmp_path_factory.mktemp("stack")) as served:
        yield served


@LIVE
def test_a_refused_oversized_body_never_hands_the_next_client_a_dead_connection(stack):
    """65-80 KiB bodies refused unread used to leave nginx a kept-alive connection gunicorn had closed (502)."""
    victims = []
    refusals = set()
    attacker, victim = httpx.Client(base_url=stack.url, timeout=30), httpx.Client(base_url=stack.url, timeout=30)
    with attacker, victim:
        for kib in range(65, 81):
            for _ in range(6):
                refused = attacker.post(
                    "/api/v1/tools/exec", content=b"x" * (kib * 1024), headers={"Content-Type": "application/json"}
                )
                refusals.add((refused.status_code, refused.json()["error_code"]))
                victims.append(victim.get("/healthz").status_code)

    assert refusals == {(413, "validation")}
    assert victims == [200] * len(victims)
    assert "prematurely closed" not in stack.error_log()


@LIVE
def test_a_body_at_the_applications_limit_still_reaches_it(stack):
    body = json.dumps({"tool_id": "core__get_current_time", "args": {}, "run_id": "r" * 10}).ljust(MAX_BODY_BYTES)

    answer = httpx.post(
        f"{stack.url}/api/v1/tools/exec",
        content=body.encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {stack.api_key}"},
        timeout=30,
    )

    assert len(body) == MAX_BODY_BYTES
    assert answer.status_code != 413  # the application read it (and judged it), not the proxy


@LIVE
def test_the_sign_in_issuer_and_the_401_carry_the_port_the_client_used(stack):
    assert stack.port != 80
    origin = f"http://127.0.0.1:{stack.port}"

    metadata = httpx.get(f"{stack.url}/.well-known/oauth-authorization-server", timeout=30).json()
    refused = httpx.post(f"{stack.url}/mcp", json={}, timeout=30)

    assert metadata["issuer"] == origin
    assert metadata["token_endpoint"] == f"{origin}/oauth/token"
    assert refused.status_code == 401
    challenge = refused.headers["WWW-Authenticate"]
    assert f'resource_metadata="{origin}/.well-known/oauth-protected-resource/mcp"' in challenge


@LIVE
def test_trace_is_refused_with_the_api_envelope_and_an_allow_header(stack):
    answer = httpx.request("TRACE", f"{stack.url}/api/v1/tools", timeout=30)

    assert answer.status_code == 405
    assert answer.headers["Content-Type"] == "application/json"
    assert answer.json()["error_code"] == "method_not_allowed"
    allowed = {method.strip() for method in answer.headers["Allow"].split(",")}
    assert "TRACE" not in allowed
    assert {"GET", "POST"} <= allowed
