"""gunicorn's settings for the web process (Procfile, Dockerfile, docker-compose.yml: `-c config/gunicorn.conf.py`).

Threaded workers (gthread): 2 processes of 4 threads by default, `WEB_CONCURRENCY`
and `WEB_THREADS` to change. A worker thread serves one request at a time, so it must
never face clients directly: config/nginx.conf waits for slow clients and hands over
complete requests over kept-alive connections (docs/operating.md, "Production").

Measured side by side, each configuration served at once on its own port
and taking turns with the others, each compared with its own /healthz:
`python -m bench.exec_throughput --seconds 5 --rounds 3 --compare sync:4,gthread:2x4`
on 2 cores (PostgreSQL, Redis and wrk on the same cores). Gateway CPU per answer
(master and workers, read from /proc), ms, in two runs: a quiet machine before this
session's other changes / the final code on the same machine in a slower hour (its
speed moves by a third within the hour, so compare within a run):

    worker        healthz c32   exec c32     exec c1      exec + connection c32
    sync x4       0.86 / 1.01   2.98 / 3.54  2.89 / 3.00  4.52 / 5.50
    gthread 2x4   0.74 / 0.81   2.14 / 3.00  2.09 / 2.91  3.53 / 4.54

    req/s at c32 in the second run: healthz 1,839 / 2,244, exec 374 / 465,
    exec + connection 296 / 302 (sync x4 / gthread 2x4)
    sync x6/x8, gthread 4x2, 2x8 (the quiet machine, one round each): none below gthread 2x4
    uvicorn x2    (ASGI; an earlier run) twice sync's CPU and 503s at c32: Django's sync
                  ORM behind the ASGI adapter's thread hop ran out of database connections

gthread spent 15-28% less CPU per exec than sync x4 (17-22% with a connection), and
served more requests a second at the same time: a thread that waits
on PostgreSQL or Redis hands the core to another thread of the same process instead
of a context switch to another process, and a kept-alive connection is not accepted
and torn down per request. Its one weakness against sync workers is that gunicorn's
`timeout` watches the worker's main loop, which stays alive while a request thread is
stuck; the watchdog below gives that guarantee back.

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
import threading
import time

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
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_class = "gthread"
threads = int(os.environ.get("WEB_THREADS", "4"))
# nginx keeps its connections to gunicorn open (config/nginx.conf: `keepalive`, closed after 30 s idle):
# gunicorn must not close one first, or nginx could send a request on a connection gunicorn is closing.
keepalive = 75

# gunicorn's largest line limit; nginx refuses request lines over 8000 bytes itself.
limit_request_line = 8190
limit_request_field_size = 8190
# nginx passes at most ~33 KB of headers; even four-byte header lines stay under this count.
limit_request_fields = 10000

# No call outlives REQUEST_TIMEOUT_S (the longest tool budget a contract may declare, plus the
# grace of a tool_call_id claim): the application answers `timeout` before it. A request still
# running 15 s later is stuck and its worker gets replaced (the watchdog below); nginx's
# proxy_read_timeout (95 s) lies beyond.
timeout = int(REQUEST_TIMEOUT_S) + 15
graceful_timeout = 30

# One JSON line per request comes from the application (config/logs.py); gunicorn's own would be a second.
accesslog = None


# How often the watchdog looks at the requests in flight.
WATCHDOG_INTERVAL_S = 1.0


def post_worker_init(worker) -> None:
    """Start the worker's request watchdog: a sync worker's timeout guarantee, for threads.

    A request running longer than `timeout` (each thread notes when its request
    started, below) is stuck: the worker is ended at once, its other requests
    with it, as gunicorn ends a silent sync worker, and gunicorn starts a fresh
    one. It ends with os._exit: a normal exit would wait for the stuck thread.
    """
    worker.toolgate_requests = {}
    threading.Thread(target=_watch, args=(worker,), name="toolgate-request-watchdog", daemon=True).start()


def pre_request(worker, req) -> None:
    worker.toolgate_requests[threading.get_ident()] = time.monotonic()


def post_request(worker, req, environ, resp) -> None:
    worker.toolgate_requests.pop(threading.get_ident(), None)


def _watch(worker) -> None:
    limit_s = worker.cfg.timeout
    while True:
        time.sleep(WATCHDOG_INTERVAL_S)
        oldest = min(worker.toolgate_requests.copy().values(), default=None)
        if oldest is not None and time.monotonic() - oldest > limit_s:
            worker.log.critical("a request has run for more than %s s: replacing worker %s", limit_s, os.getpid())
            os._exit(1)


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
