"""Toolgate's URLs plus the baselines `make bench` measures exec against.

- `POST /bench/bare`: a bare DRF echo with a token check. The same middleware,
  parser and gunicorn as exec, with none of Toolgate's work (no key lookup, no
  runner, no audit).
- `POST /bench/floor`: the bare echo plus the two round trips a warm exec
  cannot do without, made by Toolgate's own functions: the fairness check
  (leased in Redis, for 64 service accounts in turn as the exec target rotates
  64 keys) and the durable audit INSERT with its claim. Whatever exec costs
  above the floor is Toolgate's own work (key, policy, validation, runner,
  redaction, answer); the floor's ratio to `/healthz` is the most any exec on
  this design and machine can reach.
- `POST /bench/floor/in-place`: the floor with its audit row awaited in place, before the
  answer is built, as every call did before the row was sent ahead of the answer
  (config/postgresql's `write_ahead`): the floor as it was, beside the floor as it is.
- `POST /bench/floor/provider`: the floor plus the provider call exec makes
  for a tool with a connection (`GET /user` through the same pooled HTTP
  capability, on the caller's thread), the floor of "exec + connection".
"""

from __future__ import annotations

import hmac
import itertools
import threading
import time
import uuid
from functools import cache

from django.conf import settings
from django.db import connection
from django.urls import path
from django.utils import timezone
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from config.urls import urlpatterns as toolgate_urlpatterns
from policies_app.fairness import fairness_check
from policies_app.models import ServiceAccount
from runner.capabilities import HttpCapability
from runner.types import Decision, ToolInvocationContext, ToolInvocationRecord
from tools_app.audit import invocation_record

BARE_TOKEN = "bench-bare-token"  # noqa: S105 - a benchmark's fixed token, guarding nothing
FLOOR_ACCOUNTS = 64


def _token_refused(request: Request) -> Response | None:
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if not hmac.compare_digest(header, f"Bearer {BARE_TOKEN}"):
        return Response({"error_code": "unauthenticated", "safe_message": "invalid token"}, status=401)
    return None


class BareEchoView(APIView):
    authentication_classes = ()
    permission_classes = (AllowAny,)
    throttle_classes = ()

    def post(self, request: Request) -> Response:
        return _token_refused(request) or Response({"echo": request.data})


class FloorView(APIView):
    """The bare echo plus exec's fairness round trip and audit row (and its provider call), nothing else of exec."""

    authentication_classes = ()
    permission_classes = (AllowAny,)
    throttle_classes = ()
    provider_call = False
    awaited_in_place = False
    _turn = itertools.count()
    _turn_lock = threading.Lock()

    def post(self, request: Request) -> Response:
        refused = _token_refused(request)
        if refused is not None:
            return refused
        with self._turn_lock:
            tenant_id, account_id = _floor_accounts()[next(self._turn) % FLOOR_ACCOUNTS]
        if fairness_check(service_account_id=account_id, rate_per_second=settings.TOOLGATE_API_RATE_PER_SECOND):
            return Response({"error_code": "rate_limited"}, status=429)
        started_at = timezone.now()
        call_id = f"call_{uuid.uuid4().hex}"
        context = ToolInvocationContext(
            run_id=call_id, tool_call_id=call_id, tenant_id=tenant_id, actor_id=account_id, tool_call_id_generated=True
        )
        value = _github_user() if self.provider_call else {"echo": request.data}
        invocation_record(
            ToolInvocationRecord(
                tool_call_id=call_id,
                tool_id="bench__floor",
                ok=True,
                context=context,
                decision=Decision.ALLOW,
                executed=True,
                started_at=started_at,
                ended_at=timezone.now(),
                value=value,
                result_bytes=0,
            )
        )
        if self.awaited_in_place:
            connection.await_writes()
        return Response(value)


def _github_user() -> object:
    answer = _github().request_blocking("GET", "/user", deadline=time.monotonic() + 10)
    if answer is None:
        raise RuntimeError("bench: the floor's provider call needs the keep-alive transport (tracing is on)")
    return answer.json()


@cache
def _github() -> HttpCapability:
    """One pooled capability per process, as config/runtime.py binds one per provider."""
    return HttpCapability(settings.TOOLGATE_GITHUB_API_URL, upstream="github")


@cache
def _floor_accounts() -> list[tuple[str, str]]:
    """The seeded service accounts the floor writes its rows for, read once per process."""
    rows = ServiceAccount.objects.order_by("created_at").values_list("tenant_id", "id")[:FLOOR_ACCOUNTS]
    accounts = [(str(tenant_id), str(account_id)) for tenant_id, account_id in rows]
    if not accounts:
        raise RuntimeError("bench: the floor writes audit rows for the seeded service accounts; seed them first")
    return list(itertools.islice(itertools.cycle(accounts), FLOOR_ACCOUNTS))


urlpatterns = [
    path("bench/bare", BareEchoView.as_view()),
    path("bench/floor", FloorView.as_view()),
    path("bench/floor/in-place", FloorView.as_view(awaited_in_place=True)),
    path("bench/floor/provider", FloorView.as_view(provider_call=True)),
    *toolgate_urlpatterns,
]
