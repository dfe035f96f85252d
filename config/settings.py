"""Toolgate settings: one module, every value read through one environ.Env.

The defaults are production-safe: DEBUG is off, and then startup refuses to run
without real secrets. Development turns DEBUG on (`make run` and `make test`
do), and nothing else needs configuring: the embedded default (SQLite and dev
secrets generated under var/, an in-process cache). Every variable is
described in .env.example, from which the docs build makes docs/configuration.md.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import secrets
import sys
from datetime import timedelta
from pathlib import Path

import environ
from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured

from config import devsecrets, logs

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

env = environ.Env()
# The one file every process of a clone reads (web, worker, beat, the MCP host, manage.py): a setting
# exported in one shell reaches only that shell's command (gateway.upstream.services checks one).
DOTENV_FILE = BASE_DIR / ".env"
if DOTENV_FILE.is_file():
    env.read_env(DOTENV_FILE)

# Off unless asked for: a deployment that forgets it runs safe. `make run` and `make test` turn it on,
# and with it the development secrets generated into var/.
DEBUG = env.bool("DEBUG", default=False)

# `manage.py mcp_host` runs untrusted stdio servers as its children, so it holds nothing they could take:
# no database (web and worker send it each server's spec), no key ring, no secret key (it signs nothing),
# no Redis. Only its token is required. Every other process keeps the checks below.
MCP_HOST_PROCESS = sys.argv[1:2] == ["mcp_host"]

_secret_key = "" if MCP_HOST_PROCESS else env.str("SECRET_KEY", default="")
_key_ring = "" if MCP_HOST_PROCESS else env.str("TOOLGATE_ENCRYPTION_KEYS", default="")
if not DEBUG and not MCP_HOST_PROCESS and not (_secret_key and _key_ring):
    raise ImproperlyConfigured(
        "SECRET_KEY and TOOLGATE_ENCRYPTION_KEYS must be set: DEBUG is off (the default). "
        "On a development machine set DEBUG=true (make run and make test do) to use secrets generated into var/."
    )
USING_DEV_SECRET_KEY = not _secret_key and not MCP_HOST_PROCESS
if MCP_HOST_PROCESS:
    SECRET_KEY = secrets.token_urlsafe(50)  # Django wants one; nothing the host does is signed with it
    USING_DEV_ENCRYPTION_KEYS, TOOLGATE_ENCRYPTION_KEYS = False, ""
else:
    SECRET_KEY = _secret_key or devsecrets.read_or_create(VAR_DIR / "secret_key", devsecrets.new_secret_key)
    USING_DEV_ENCRYPTION_KEYS = not _key_ring
    TOOLGATE_ENCRYPTION_KEYS = _key_ring or devsecrets.read_or_create(
        VAR_DIR / "encryption_keys", devsecrets.new_key_ring
    )


def parse_key_ring(value: str) -> dict[str, bytes]:
    """`kid:base64(32 bytes)` comma-separated, first one encrypts; order is kept."""
    ring: dict[str, bytes] = {}
    for entry in filter(None, (part.strip() for part in value.split(","))):
        kid, sep, encoded = entry.partition(":")
        if not sep or not kid or kid in ring:
            raise ImproperlyConfigured("TOOLGATE_ENCRYPTION_KEYS: each entry is a unique kid:base64key")
        try:
            key = base64.b64decode(encoded, validate=True)
        except binascii.Error:
            raise ImproperlyConfigured(f"TOOLGATE_ENCRYPTION_KEYS: key {kid!r} is not base64") from None
        if len(key) != 32:
            raise ImproperlyConfigured(f"TOOLGATE_ENCRYPTION_KEYS: key {kid!r} is not 32 bytes")
        ring[kid] = key
    if not ring:
        raise ImproperlyConfigured("TOOLGATE_ENCRYPTION_KEYS is empty")
    return ring


TOOLGATE_KEY_RING = {} if MCP_HOST_PROCESS else parse_key_ring(TOOLGATE_ENCRYPTION_KEYS)

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver"] if DEBUG else [])

INSTALLED_APPS = [
    "config.admin_site.ToolgateAdminConfig",  # django.contrib.admin with Toolgate's site
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI served from our static files: no CDN
    "axes",
    "django_celery_beat",
    "django_prometheus",
    "core",  # the lowest Toolgate app: the shared kernel (errors, API plumbing, crypto), no tables
    "changes_app",  # the change log every domain app writes to
    "tools_app",
    "policies_app",
    "gateway",  # the MCP gateway: the /mcp server, upstream MCP servers, the stdio host's clients
    "identity_app",  # single sign-on: OpenID Connect providers and the roles their groups grant
    "connections_app",
    "signin",  # MCP clients that sign in: Toolgate's OAuth 2.1 authorization server
    "portal",  # the tenant web UI
    "policy_files",  # policy as code: one JSON file with sections of every app above (`manage.py policy`)
    "config.apps.ToolgateConfig",  # deployment checks (`manage.py check --deploy`)
]

MIDDLEWARE = [
    "config.logs.request_log",  # first: its request id is on every line, its one line ends the request
    "config.middleware.api_middleware",  # the JSON API's paths leave here for API_MIDDLEWARE (below)
    "django.middleware.security.SecurityMiddleware",
    "config.middleware.refuse_nul_in_urls",  # PostgreSQL refuses NUL: never let one reach a lookup
    "whitenoise.middleware.WhiteNoiseMiddleware",  # static files from gunicorn too: no separate web server needed
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "config.middleware.change_source",  # who and through what, for the change log (actor read at write time)
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "config.middleware.SitePolicyCSPMiddleware",  # django-csp's, building the site's policy once
    "axes.middleware.AxesMiddleware",  # last, as django-axes requires
]

# The JSON API's paths, the MCP endpoints (`/mcp`, `/mcp/t/<toolset>`) and the liveness probe's variant that
# measures them run the rest of their request through this shorter list: MIDDLEWARE's, less what has nothing
# to do on a JSON endpoint authenticated by a Bearer token (static files, sessions, CSRF, Django's user,
# messages, login lockouts, the NUL check the endpoints make themselves), and first the wait for the audit row
# sent ahead of the answer. Same order, same headers and answers (docs/performance.md, "The API's middleware").
API_MIDDLEWARE = [
    "config.middleware.answer_after_durable_writes",  # first: the audit row commits while the rest runs
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",  # the Host check (ALLOWED_HOSTS) and Content-Length
    "config.middleware.change_source",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "config.middleware.SitePolicyCSPMiddleware",
]
API_MIDDLEWARE_PATHS = ("/api/v1/", "/healthz/api", "/mcp")

AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: refuses locked-out logins before checking passwords
    "identity_app.backends.LocalPasswordBackend",  # Django's password check, off when TOOLGATE_LOCAL_LOGIN=false
    "identity_app.backends.SingleSignOnBackend",  # loads single sign-on sessions' users; checks no credentials
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'toolgate.sqlite3'}")}
if MCP_HOST_PROCESS:
    DATABASES = {}  # Django's dummy backend: any query the host tried would raise, none can connect
elif DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL and a busy timeout let the web process and the embedded worker share the file.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=5000;",
    }
    # Tests get a file too, not Django's shared-cache in-memory database: there, a second connection (a
    # live server's thread, a racing writer) meets a table lock that fails at once ("database table is
    # locked") instead of waiting out the busy timeout as it does on the file the embedded default serves.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test_toolgate.sqlite3")}
else:
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        DATABASES["default"]["ENGINE"] = "config.postgresql"  # its health check asks the socket, not the server
    DATABASES["default"].setdefault("CONN_MAX_AGE", 60)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    # An unreachable database costs a request about a second, then a 503 `unavailable_dependency`.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("connect_timeout", 1)
    # A connection whose peer vanished (a host or network gone, not a frozen server: see
    # config/postgresql's AnsweringConnection) is found by TCP within seconds, not hours.
    keepalives = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 2, "keepalives_count": 3}
    for option, value in keepalives.items():
        DATABASES["default"]["OPTIONS"].setdefault(option, value)
    # The audit's statements are prepared on the connection (config/postgresql's execute_prepared and
    # write_ahead), psycopg's switch for preparing telling them they may (Django turns it off, for connection
    # poolers); Django's own queries stay client-bound and unprepared. False for PgBouncer in transaction mode
    # before 1.21 (or without max_prepared_statements): each audit statement is then sent unnamed.
    if env.bool("TOOLGATE_DATABASE_PREPARED_STATEMENTS", default=True):
        DATABASES["default"]["OPTIONS"].setdefault("prepare_threshold", 0)

# How long a wait on a silent PostgreSQL server lasts before the server is asked whether it answers
# at all (and given up, 503, if not); 0: wait as long as the server takes.
TOOLGATE_DATABASE_ANSWER_TIMEOUT_MS = env.int("TOOLGATE_DATABASE_ANSWER_TIMEOUT_MS", default=1000)

REDIS_URL = "" if MCP_HOST_PROCESS else env.str("REDIS_URL", default="")
if not DEBUG and not MCP_HOST_PROCESS and not REDIS_URL:
    raise ImproperlyConfigured(
        "DEBUG=False without REDIS_URL: production needs Redis as the Celery broker and shared cache "
        "(the embedded broker is for one development machine)"
    )
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            # Bounded, so a frozen Redis answers 503 within a second instead of holding a worker.
            "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5},
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
# One date format everywhere (admin lists and detail pages, the tenant UI): config/formats/en/formats.py.
FORMAT_MODULE_PATH = ["config.formats"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env.str("STATIC_ROOT", default=str(VAR_DIR / "static")))  # where collectstatic writes
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Production serves hashed, compressed files collected at build time (collectstatic).
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# --- Tenant web UI (docs/getting-started.md) -------------------------------------------------
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = not DEBUG
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"

# Single sign-on (docs/sso.md). TOOLGATE_LOCAL_LOGIN=false switches every password form off (break glass:
# `manage.py sso_break_glass`); a session opened by single sign-on lasts at most TOOLGATE_SSO_SESSION_SECONDS.
TOOLGATE_LOCAL_LOGIN = env.bool("TOOLGATE_LOCAL_LOGIN", default=True)
TOOLGATE_SSO_SESSION_SECONDS = env.int("TOOLGATE_SSO_SESSION_SECONDS", default=8 * 3600)
# Identity providers on private addresses (an in-house Keycloak): off by default, like upstreams and webhooks.
TOOLGATE_SSO_ALLOW_PRIVATE_NETWORKS = env.bool("TOOLGATE_SSO_ALLOW_PRIVATE_NETWORKS", default=False)

# Brute-force lockout (django-axes): 5 failures per username and address, 15 minutes.
AXES_FAILURE_LIMIT = env.int("AXES_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("AXES_COOLOFF_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "accounts/locked_out.html"
AXES_SENSITIVE_PARAMETERS = ["password"]
AXES_CLIENT_IP_CALLABLE = "config.clientip.client_ip"
# Peers whose X-Real-IP names the client (the reverse proxy): addresses or networks, comma-separated.
TOOLGATE_TRUSTED_PROXIES = env.list("TOOLGATE_TRUSTED_PROXIES", default=[])
try:
    TOOLGATE_TRUSTED_PROXY_NETWORKS = [ipaddress.ip_network(entry, strict=False) for entry in TOOLGATE_TRUSTED_PROXIES]
except ValueError:
    raise ImproperlyConfigured("TOOLGATE_TRUSTED_PROXIES: each entry is an IP address or network") from None
if TOOLGATE_TRUSTED_PROXIES:
    # The proxy terminates TLS and says so (config/nginx.conf sets X-Forwarded-Proto). Without
    # this Django takes every request for plain HTTP: it refuses the admin's and the tenant
    # UI's HTTPS form posts (CSRF origin check) and builds http:// OAuth callback URLs.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Everything is served from our own origin: no CDN, no inline script.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
# JSON lines (default, for log shippers) or `console` (key=value text for a terminal; `make run` uses it).
LOG_FORMAT = env.str("LOG_FORMAT", default="json")
# Off when a process runner stamps every line itself (`make run`'s honcho): one time per line, not two.
LOG_TIMESTAMPS = env.bool("LOG_TIMESTAMPS", default=True)
logs.configure_structlog()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"structured": logs.formatter(LOG_FORMAT, timestamps=LOG_TIMESTAMPS)},
    "filters": {
        "bounded_upstream": {"()": "config.logfilters.BoundedUpstreamRecords"},
        "one_line_per_request": {"()": "config.logfilters.OneLinePerRequest"},
        "idle_periodic_tasks": {"()": "config.logfilters.IdlePeriodicTasks"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "structured",
            "filters": ["bounded_upstream", "one_line_per_request", "idle_periodic_tasks"],
        }
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # Django's default config gives "django" a console handler of its own: every line twice.
        "django": {"handlers": [], "propagate": True},
        # 4xx warnings repeat the request's own line (config/logs.py); 5xx keep their traceback
        # (config/logfilters.py drops their traceless repeats and runserver's access lines). Django's default
        # config stops "django.server" from propagating: without a handler, Python's last-resort handler
        # printed its lines as plain text.
        "django.request": {"level": "ERROR"},
        "django.server": {"level": "ERROR", "propagate": True},
        "axes": {"level": "WARNING"},  # its version banner on every command
        # httpx logs full request lines at INFO; request URLs may carry ids we keep out of logs.
        # Authlib logs token request bodies (PKCE verifier, codes, tokens) at DEBUG.
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
        "authlib": {"level": "WARNING"},
        # The MCP SDK's HTTP client; its records (and the SDK's) are also cut by `bounded_upstream`.
        "httpx2": {"level": "WARNING"},
        "httpcore2": {"level": "WARNING"},
        "mcp": {"level": "WARNING"},
    },
}

# --- Toolgate ------------------------------------------------------------------
TOOLGATE_REFRESH_WINDOW_SECONDS = env.int("TOOLGATE_REFRESH_WINDOW_SECONDS", default=600)
TOOLGATE_REFRESH_JITTER_SECONDS = env.int("TOOLGATE_REFRESH_JITTER_SECONDS", default=120)
TOOLGATE_SYNC_REFRESH_TIMEOUT_MS = env.int("TOOLGATE_SYNC_REFRESH_TIMEOUT_MS", default=3000)
TOOLGATE_REFRESH_SWEEP_SECONDS = env.int("TOOLGATE_REFRESH_SWEEP_SECONDS", default=60)
# At most this many due connections are queued per sweep: SWEEP_LIMIT / SWEEP_SECONDS is the refresh rate's ceiling.
TOOLGATE_REFRESH_SWEEP_LIMIT = env.int("TOOLGATE_REFRESH_SWEEP_LIMIT", default=10_000)
# A failing refresh waits BASE * 2**(failures - 1) seconds (half of it jittered), at most MAX; after
# MAX_FAILURES failures in a row the connection needs an operator's or the tenant's attention.
TOOLGATE_REFRESH_BACKOFF_BASE_SECONDS = env.int("TOOLGATE_REFRESH_BACKOFF_BASE_SECONDS", default=60)
TOOLGATE_REFRESH_BACKOFF_MAX_SECONDS = env.int("TOOLGATE_REFRESH_BACKOFF_MAX_SECONDS", default=3600)
TOOLGATE_REFRESH_MAX_FAILURES = env.int("TOOLGATE_REFRESH_MAX_FAILURES", default=8)
TOOLGATE_GITHUB_API_URL = env.str("TOOLGATE_GITHUB_API_URL", default="https://api.github.com")
TOOLGATE_MAX_RESULT_BYTES = env.int("TOOLGATE_MAX_RESULT_BYTES", default=1024 * 1024)
# Fairness between service accounts, per second, across the API (0 = off); tool calls refused by it
# are audited as `rate_limited`. The policies' budgets are the real limits.
TOOLGATE_API_RATE_PER_SECOND = env.int("TOOLGATE_API_RATE_PER_SECOND", default=100)
# Browser Origins allowed on /mcp (exact `scheme://host[:port]`); any other Origin gets 403, none is fine.
TOOLGATE_MCP_ALLOWED_ORIGINS = env.list("TOOLGATE_MCP_ALLOWED_ORIGINS", default=[])
# /metrics: with a token, `Authorization: Bearer <token>` from anywhere; without, loopback only.
TOOLGATE_METRICS_TOKEN = env.str("TOOLGATE_METRICS_TOKEN", default="")
# Upstream MCP servers on loopback/private addresses (tests, single-host installs); refused by default.
TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = env.bool("TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS", default=False)
# Calls to upstreams that negotiated without a session and answer JSON go out as one plain POST
# (gateway/upstream/lean.py) instead of through the SDK client; false keeps every call on the SDK.
TOOLGATE_MCP_PLAIN_JSON_CALLS = env.bool("TOOLGATE_MCP_PLAIN_JSON_CALLS", default=True)
# The MCP host (`manage.py mcp_host`) runs stdio MCP servers and serves them on this loopback URL
# (trusted configuration: the private-address guard is for operator-entered URLs only). Its token is
# generated into var/ in development and required in production (the host refuses to start without it).
TOOLGATE_MCP_HOST_URL = env.str("TOOLGATE_MCP_HOST_URL", default="http://127.0.0.1:8765")
_mcp_host_token = env.str("TOOLGATE_MCP_HOST_TOKEN", default="")
USING_DEV_MCP_HOST_TOKEN = not _mcp_host_token
TOOLGATE_MCP_HOST_TOKEN = _mcp_host_token or (
    devsecrets.read_or_create(VAR_DIR / "mcp_host_token", devsecrets.new_token) if DEBUG else ""
)
# Where the host keeps each child's private HOME and TMPDIR.
TOOLGATE_MCP_HOST_DIR = env.str("TOOLGATE_MCP_HOST_DIR", default=str(VAR_DIR / "mcp_host"))
# auto: bubblewrap when it is installed and may create namespaces; bwrap: required; none: never.
TOOLGATE_MCP_HOST_SANDBOX = env.str("TOOLGATE_MCP_HOST_SANDBOX", default="auto")
# Fail closed: without a working sandbox, start only servers added with --trusted-unsandboxed (production default).
TOOLGATE_MCP_HOST_REQUIRE_SANDBOX = env.bool("TOOLGATE_MCP_HOST_REQUIRE_SANDBOX", default=not DEBUG)
TOOLGATE_MCP_HOST_MAX_CHILDREN = env.int("TOOLGATE_MCP_HOST_MAX_CHILDREN", default=16)
TOOLGATE_MCP_HOST_IDLE_SECONDS = env.int("TOOLGATE_MCP_HOST_IDLE_SECONDS", default=300)
# Resource limits of each child (0 = the host's own): CPU seconds, writable memory (RLIMIT_DATA, not address
# space, which V8 reserves without using), open files, processes.
TOOLGATE_MCP_CHILD_CPU_SECONDS = env.int("TOOLGATE_MCP_CHILD_CPU_SECONDS", default=3600)
TOOLGATE_MCP_CHILD_MEMORY_MB = env.int("TOOLGATE_MCP_CHILD_MEMORY_MB", default=4096)
TOOLGATE_MCP_CHILD_OPEN_FILES = env.int("TOOLGATE_MCP_CHILD_OPEN_FILES", default=1024)
TOOLGATE_MCP_CHILD_PROCESSES = env.int("TOOLGATE_MCP_CHILD_PROCESSES", default=256)
# Tenant webhooks (approval events) on loopback/private addresses: refused by default, like MCP upstreams.
TOOLGATE_WEBHOOK_ALLOW_PRIVATE_NETWORKS = env.bool("TOOLGATE_WEBHOOK_ALLOW_PRIVATE_NETWORKS", default=False)
# Cardinality bounds of the per-tool and per-tenant series, per process (later values share `other`;
# 0 tenants drops the tenant label).
TOOLGATE_METRICS_MAX_TOOLS = env.int("TOOLGATE_METRICS_MAX_TOOLS", default=200)
TOOLGATE_METRICS_MAX_TENANTS = env.int("TOOLGATE_METRICS_MAX_TENANTS", default=100)
# Audit rows older than this many days are pruned daily by beat (0 = keep forever); see tools_app/audit.py.
TOOLGATE_AUDIT_RETENTION_DAYS = env.int("TOOLGATE_AUDIT_RETENTION_DAYS", default=0)
TOOLGATE_AUDIT_RETENTION_HOUR_UTC = env.int("TOOLGATE_AUDIT_RETENTION_HOUR_UTC", default=3)
# On PostgreSQL the audit table is partitioned by started_at, one partition per `day` or `month` (UTC),
# and beat keeps this many partitions ready ahead of now (tools_app/partitions.py). Retention drops whole
# partitions, so a day retires at once; monthly partitions suit a low call rate or a long retention.
TOOLGATE_AUDIT_PARTITION = env.str("TOOLGATE_AUDIT_PARTITION", default="day")
TOOLGATE_AUDIT_PARTITIONS_AHEAD = env.int("TOOLGATE_AUDIT_PARTITIONS_AHEAD", default=3)
if TOOLGATE_AUDIT_PARTITION not in ("day", "month"):
    raise ImproperlyConfigured("TOOLGATE_AUDIT_PARTITION must be day or month")
if TOOLGATE_AUDIT_PARTITIONS_AHEAD < 1:
    raise ImproperlyConfigured("TOOLGATE_AUDIT_PARTITIONS_AHEAD must be at least 1")

# --- Celery (config/celery.py) -------------------------------------------------------
# Redis when configured; otherwise kombu's filesystem transport under var/, shared by the
# web process, the worker and beat of `make run` on one machine.
CELERY_BROKER_VISIBILITY_TIMEOUT = env.int("CELERY_BROKER_VISIBILITY_TIMEOUT", default=3600)
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": CELERY_BROKER_VISIBILITY_TIMEOUT}
else:
    CELERY_BROKER_URL = "filesystem://localhost//"  # a host named: kombu warns about a missing one
    CELERY_BROKER_TRANSPORT = "config.embedded_broker:Transport"  # messages appear whole (see the module)
    _queue_dir, _control_dir = VAR_DIR / "celery" / "queue", VAR_DIR / "celery" / "control"  # made by config/apps.py
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_queue_dir),
        "data_folder_out": str(_queue_dir),
        "control_folder": str(_control_dir),  # kombu's default is ./control
    }
CELERY_TASK_ACKS_LATE = True  # tasks are idempotent; a worker lost mid-task gets it redelivered
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TIMEZONE = TIME_ZONE
if TOOLGATE_REFRESH_JITTER_SECONDS >= CELERY_BROKER_VISIBILITY_TIMEOUT:
    # A task held back longer than the visibility timeout would be delivered twice by Redis.
    raise ImproperlyConfigured("TOOLGATE_REFRESH_JITTER_SECONDS must stay below CELERY_BROKER_VISIBILITY_TIMEOUT")
for _name, _value in {
    "TOOLGATE_REFRESH_SWEEP_LIMIT": TOOLGATE_REFRESH_SWEEP_LIMIT,
    "TOOLGATE_REFRESH_BACKOFF_BASE_SECONDS": TOOLGATE_REFRESH_BACKOFF_BASE_SECONDS,
    "TOOLGATE_REFRESH_MAX_FAILURES": TOOLGATE_REFRESH_MAX_FAILURES,
}.items():
    if _value < 1:
        raise ImproperlyConfigured(f"{_name} must be at least 1")
if TOOLGATE_REFRESH_BACKOFF_MAX_SECONDS < TOOLGATE_REFRESH_BACKOFF_BASE_SECONDS:
    raise ImproperlyConfigured("TOOLGATE_REFRESH_BACKOFF_MAX_SECONDS must not be below the BASE")
CELERY_BEAT_SCHEDULE = {
    "refresh-sweep": {
        "task": "connections_app.tasks.refresh_sweep",
        "schedule": float(TOOLGATE_REFRESH_SWEEP_SECONDS),
        "options": {"expires": float(TOOLGATE_REFRESH_SWEEP_SECONDS)},  # a late sweep is replaced by the next
    },
    # The args kept for approvers are erased at expiry, not only at decision time.
    "approval-expiry-sweep": {
        "task": "policies_app.tasks.approval_expiry_sweep",
        "schedule": 60.0,
        "options": {"expires": 60.0},
    },
}
# Partitions ahead of the audit rows (PostgreSQL; a no-op on SQLite). Hourly, so a missed run or a
# restart never leaves the rows of a new day without a partition of their own.
CELERY_BEAT_SCHEDULE["audit-partitions"] = {
    "task": "tools_app.tasks.audit_partitions_ahead",
    "schedule": crontab(minute=7),
    "options": {"expires": 3600.0},
}
if TOOLGATE_AUDIT_RETENTION_DAYS > 0:
    CELERY_BEAT_SCHEDULE["audit-retention"] = {
        "task": "tools_app.tasks.audit_retention",
        "schedule": crontab(minute=17, hour=TOOLGATE_AUDIT_RETENTION_HOUR_UTC),
        "options": {"expires": 3600.0},  # a run missed by an hour waits for the next day
    }

# --- REST API (docs/api.md) -----------------------------------------------------
# The API's JSON parser enforces the 64 KiB body limit itself (core/api/parser.py); this
# bounds every other body Django reads (admin and UI forms) the same way.
DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["policies_app.authentication.ServiceAccountAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": ["core.api.parser.HardenedJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_THROTTLE_CLASSES": ["policies_app.authentication.ServiceAccountRateThrottle"],
    "EXCEPTION_HANDLER": "core.api.handlers.exception_handler",
    "URL_FORMAT_OVERRIDE": None,  # `?format=openai` belongs to the tool catalog
    "STRICT_JSON": True,
    "UNICODE_JSON": True,
    "COMPACT_JSON": True,
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Toolgate API",
    "DESCRIPTION": (
        "Tool governance for LLM agents. Authenticate with a service account's API key: "
        "`Authorization: Bearer <api key>`. Every error body is "
        '`{"error_code": str, "safe_message": str, ...}`. '
        "Bodies are strict JSON objects: no duplicate keys, no NaN or Infinity, at most 32 levels deep, "
        "and no string (keys included) may hold a NUL character or an unpaired surrogate "
        "(400 `invalid_json`). Fields and query parameters take exactly the types and names shown: "
        "a number is never read as a string, an unknown name is refused (422 `validation`)."
    ),
    "VERSION": "1.0.0",
    # 3.1 is JSON Schema: it can say that keys of free-form objects (a tool's args) hold no NUL.
    "OAS_VERSION": "3.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_AUTHENTICATION": [],  # the schema and the docs are public
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SCHEMA_PATH_PREFIX": r"/api/v[0-9]+",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {"OpenAIToolTypeEnum": ["function"]},
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}
