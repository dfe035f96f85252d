"""Structured logs: one JSON line per request with its ids, no duplicates, no favicon noise, no args.

Read from the real handler of settings.LOGGING (its stream swapped for a
buffer), as a log shipper would read it: the test sees exactly the lines the
process writes.
"""

from __future__ import annotations

import io
import json
import logging
import logging.config
import secrets

import pytest
from celery.app.trace import LOG_RECEIVED, LOG_SUCCESS
from django.test import Client
from structlog.contextvars import bind_contextvars, clear_contextvars, get_contextvars

from config import logs
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import api_client, enable_tools

pytestmark = pytest.mark.django_db


class Written:
    def __init__(self, buffer: io.StringIO) -> None:
        self._buffer = buffer

    def readouterr(self) -> str:
        text = self._buffer.getvalue()
        self._buffer.seek(0)
        self._buffer.truncate()
        return text


@pytest.fixture
def written():
    """What the console handler of settings.LOGGING writes, line by line."""
    (handler,) = [h for h in logging.getLogger().handlers if type(h) is logging.StreamHandler]
    buffer = io.StringIO()
    previous = handler.setStream(buffer)
    yield Written(buffer)
    handler.setStream(previous)


def lines_about(written, path: str) -> list[dict]:
    return [json.loads(line) for line in written.readouterr().splitlines() if path in line]


def test_a_404_writes_one_line_not_three(written):
    written.readouterr()

    response = Client().get("/api/v1/no-such-thing?q=anything")

    assert response.status_code == 404
    about = lines_about(written, "/api/v1/no-such-thing")
    assert len(about) == 1
    line = about[0]
    assert {key: line[key] for key in ("event", "method", "path", "status", "level", "logger")} == {
        "event": "request",
        "method": "GET",
        "path": "/api/v1/no-such-thing",  # without its query string
        "status": 404,
        "level": "info",
        "logger": "toolgate.request",
    }
    assert line["request_id"] == response["X-Request-ID"]


def test_favicon_probes_are_not_logged(written):
    written.readouterr()

    Client().get("/favicon.ico")

    assert lines_about(written, "favicon") == []


def test_an_exec_line_names_request_tenant_tool_and_call_but_never_the_args(written):
    enable_tools("core__get_current_time")
    tenant = TenantFactory(slug="acme")
    account, key = service_account_with_key(tenant, name="agent")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["core__get_current_time"])
    marker = f"canary-{secrets.token_hex(8)}"
    written.readouterr()

    response = api_client(key).post(
        "/api/v1/tools/exec",
        {"tool_id": "core__get_current_time", "args": {"timezone": marker}, "tool_call_id": "call-logged"},
        format="json",
        HTTP_X_REQUEST_ID="proxy-req-0001",
    )

    assert response.status_code == 422  # not a time zone: refused, and still one line
    written = written.readouterr()
    assert marker not in written
    requests = [json.loads(line) for line in written.splitlines() if '"event": "request"' in line]
    assert len(requests) == 1
    line = requests[0]
    assert {
        key: line.get(key) for key in ("request_id", "tenant_id", "service_account_id", "tool_id", "tool_call_id")
    } == {
        "request_id": "proxy-req-0001",
        "tenant_id": str(tenant.pk),
        "service_account_id": str(account.pk),
        "tool_id": "core__get_current_time",
        "tool_call_id": "call-logged",
    }
    assert (line["decision"], line["error_code"], line["status"]) == ("allow", "validation", 422)
    assert response["X-Request-ID"] == "proxy-req-0001"


def test_an_unknown_tool_id_is_logged_as_unknown(written):
    _account, key = service_account_with_key(TenantFactory(slug="acme"), name="agent")
    marker = f"made_up_{secrets.token_hex(6)}"
    written.readouterr()

    api_client(key).post("/api/v1/tools/exec", {"tool_id": marker, "args": {}}, format="json")

    written = written.readouterr()
    assert marker not in written
    assert '"tool_id": "unknown"' in written


@pytest.mark.parametrize("presented", ["", "short", "has spaces in it", "x" * 65, "bad\nline-injected"])
def test_a_malformed_request_id_is_replaced(presented):
    assert logs.request_id_from(presented) != presented
    assert len(logs.request_id_from(presented)) == 32


def test_a_task_carries_the_request_id_that_queued_it_and_binds_nothing_else():
    clear_contextvars()
    bind_contextvars(request_id="req-abcdef12", tenant_id="7")
    headers: dict = {}
    logs.task_headers_bound(headers=headers)
    clear_contextvars()

    class Request:
        toolgate_request_id = headers["toolgate_request_id"]

    class FakeTask:
        name = "connections_app.tasks.refresh_connection"
        request = Request()

    logs.task_context_bound(task_id="task-1", task=FakeTask())
    assert get_contextvars() == {
        "task_id": "task-1",
        "task": "connections_app.tasks.refresh_connection",
        "request_id": "req-abcdef12",
    }
    logs.task_context_cleared()
    assert get_contextvars() == {}


# --- one line per request, idle periodic tasks silent, console lines with one time stamp ----------------


def test_runserver_access_lines_and_django_traceless_5xx_lines_are_not_written(written):
    written.readouterr()

    logging.getLogger("django.server").error('"%s" %s %s', "GET /api/v1/tools HTTP/1.1", "502", "87")
    logging.getLogger("django.request").error("Bad Gateway: %s", "/api/v1/tools/exec")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("django.request").exception("Internal Server Error: %s", "/api/v1/tools")
    logging.getLogger("django.server").error("You're accessing the development server over HTTPS")

    lines = [json.loads(line) for line in written.readouterr().splitlines()]
    assert [line["event"] for line in lines] == [
        "Internal Server Error: /api/v1/tools",
        "You're accessing the development server over HTTPS",
    ]
    assert "RuntimeError: boom" in lines[0]["exception"]


def test_a_5xx_answer_is_written_once_with_its_request_id(written, settings):
    settings.ROOT_URLCONF = "tests.config.urls_bad_gateway"
    written.readouterr()

    response = Client().get("/bad-gateway")

    assert response.status_code == 502
    lines = [json.loads(line) for line in written.readouterr().splitlines()]
    assert [(line["event"], line["status"], line["request_id"]) for line in lines] == [
        ("request", 502, response["X-Request-ID"])
    ]


def _celery_lines(name: str, return_value: str) -> None:
    received = {"id": "t1", "name": name, "args": "()", "kwargs": "{}", "eta": None}
    logging.getLogger("celery.beat").info("Scheduler: Sending due task %s (%s)", "entry", name)
    logging.getLogger("celery.worker.strategy").info(LOG_RECEIVED, received, extra={"data": received})
    done = {"id": "t1", "name": name, "return_value": return_value, "runtime": 0.01, "args": "()", "kwargs": "{}"}
    logging.getLogger("celery.app.trace").info(LOG_SUCCESS, done, extra={"data": done})


def test_a_periodic_task_that_did_nothing_writes_nothing(written):
    written.readouterr()

    _celery_lines("connections_app.tasks.refresh_sweep", "0")
    _celery_lines("policies_app.tasks.approval_expiry_sweep", "0")

    assert written.readouterr() == ""


def test_a_periodic_task_that_did_something_and_other_tasks_still_log(written):
    written.readouterr()

    _celery_lines("connections_app.tasks.refresh_sweep", "2")
    _celery_lines("connections_app.tasks.refresh_connection", "'refreshed'")

    events = [json.loads(line)["event"] for line in written.readouterr().splitlines()]
    assert [event.split("[")[0] for event in events] == [
        "Task connections_app.tasks.refresh_sweep",
        "Scheduler: Sending due task entry (connections_app.tasks.refresh_connection)",
        "Task connections_app.tasks.refresh_connection",
        "Task connections_app.tasks.refresh_connection",
    ]
    assert events[0].endswith(": 2")


@pytest.mark.parametrize("timestamps", [True, False])
def test_console_lines_carry_a_time_stamp_unless_the_process_runner_adds_one(timestamps):
    formatter = logging.config.DictConfigurator({}).configure_formatter(
        logs.formatter("console", timestamps=timestamps)
    )
    record = logging.LogRecord("toolgate.request", logging.INFO, __file__, 1, "request", None, None)

    line = formatter.format(record)

    assert line.startswith("20") is timestamps
    assert "[info     ] request" in line
    assert not line.startswith("{")
