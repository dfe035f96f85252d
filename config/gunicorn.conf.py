"""gunicorn's settings for the web process (Procfile, Dockerfile, docker-compose.yml: `-c config/gunicorn.conf.py`).

Sync workers, 2 per core. A sync worker serves one connection from its first
byte to its last, so it must never face clients directly: config/nginx.conf
waits for slow clients and hands over complete requests (README, "Production").

Measured (issue 28), `python -m bench.exec_throughput --only exec --seconds 5
--rounds 1 --worker-class K --workers N [--threads T]`, configurations taking
turns, two rounds, on 2 cores shared with other busy processes (so
throughput was noise; the gateway's CPU per answer, read from /proc for
master and workers, held): CPU ms per built-in exec answer, round 1 / round 2

    worker           c32           c1
    sync x2          6.8 / 6.2     4.7 / 5.1
    sync x4          7.5 / 7.3     4.7 / 5.4   <- this default
    sync x6          6.9 / 6.5     4.6 / 5.3
    gthread 2x4      5.2 / 4.2     4.2 / 5.1
    uvicorn x2      10.9 / 11.7   10.5 / 8.8   (ASGI; 503s at c32: 98 and 186)
    uvicorn x4      14.9 / -      15.3 / -     (59 503s at c32)

uvicorn (Django's sync ORM behind the ASGI adapter's thread hop) costs twice
the CPU and ran out of database connections. gthread 2x4 spent the least
CPU at c32; it is not the default yet because its gunicorn timeout only
watches the worker's main loop, not a request stuck in a thread (the
replacement of a stuck worker below is a sync worker's guarantee). sync x2
spent less than x4 at c32 but leaves no worker free while an upstream
(GitHub, an MCP server) takes its time. To be measured again on a quiet
machine.

The limits are set so that nginx, or the application, answers first with the
API's JSON envelope: gunicorn's own answers to oversized request lines and
headers (414, 431, 400) and to a worker timeout are HTML pages. Through the
proxy a request line or header line is at most 8000 bytes and all headers
about 33 KB, so they stay inside the limits below; tests/config/
test_deployment.py checks the numbers against each other.
"""

import os
import shutil
import tempfile

from runner.pipeline import REQUEST_TIMEOUT_S

# Prometheus counters of every worker, summed at scrape time (config/metrics.py): each worker writes
# its own mmap'd files here. gunicorn puts raw_env into the environment before it forks any worker
# (prometheus_client reads it when first imported); on_starting empties the directory so a restart
# does not add up the last run's counts twice. Reading the variable here changes nothing in the
# process that merely loads this file.
PROMETHEUS_MULTIPROC_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR") or os.path.join(
    tempfile.gettempdir(), f"toolgate-prometheus-{os.getpid()}"
)
raw_env = [f"PROMETHEUS_MULTIPROC_DIR={PROMETHEUS_MULTIPROC_DIR}"]

# Loopback by default: a sync worker facing clients directly is frozen by a handful of slow-header
# sockets. docker-compose binds the web service's network interface explicitly (only nginx reaches it).
bind = f"127.0.0.1:{os.environ.get('PORT', '8000')}"
workers = int(os.environ.get("WEB_CONCURRENCY", "4"))
worker_class = "sync"

# gunicorn's largest line limit; nginx refuses request lines over 8000 bytes itself.
limit_request_line = 8190
limit_request_field_size = 8190
# nginx passes at most ~33 KB of headers; even four-byte header lines stay under this count.
limit_request_fields = 10000

# No call outlives REQUEST_TIMEOUT_S (the longest tool budget a contract may declare, plus the
# grace of a tool_call_id claim): the application answers `timeout` before it. A worker still
# busy 15 s later is stuck and gets replaced; nginx's proxy_read_timeout (95 s) lies beyond.
timeout = int(REQUEST_TIMEOUT_S) + 15
graceful_timeout = 30

# One JSON line per request comes from the application (config/logs.py); gunicorn's own would be a second.
accesslog = None


def on_starting(server) -> None:
    shutil.rmtree(PROMETHEUS_MULTIPROC_DIR, ignore_errors=True)
    os.makedirs(PROMETHEUS_MULTIPROC_DIR, exist_ok=True)


def child_exit(server, worker) -> None:
    """A dead worker's live gauges go; its counters stay in the sum (prometheus_client multiprocess)."""
    # Imported here, not at the top: the master must not import prometheus_client before raw_env is
    # in its environment, or every worker it forks would inherit single-process counters.
    from prometheus_client import multiprocess  # noqa: PLC0415

    multiprocess.mark_process_dead(worker.pid)


def on_exit(server) -> None:
    """The counts die with the server: leave no files behind in the temporary directory."""
    shutil.rmtree(PROMETHEUS_MULTIPROC_DIR, ignore_errors=True)
