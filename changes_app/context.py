"""Who is writing and through which interface, bound by the interface and read by the service.

Services record changes without taking an actor argument on every call: the
interface that calls them (the request middleware, a Celery task, a
management command) binds a ChangeSource in a context variable, and
`change_record` reads it. Outside any interface the writer is the process
itself: origin `command`, actor the operating-system user (`os:<user>`).
"""

from __future__ import annotations

import getpass
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any

from changes_app.kinds import ActorKind, Origin


@dataclass(frozen=True, slots=True)
class Actor:
    """The writer as the change log names it: kind, a stable id and a readable label."""

    kind: str
    id: str
    label: str


@dataclass(frozen=True, slots=True)
class ChangeSource:
    """An interface's binding. `actor` may be a function: a request's user is known only after authentication."""

    origin: str
    actor: Actor | Callable[[], Actor]

    def resolve_actor(self) -> Actor:
        return self.actor if isinstance(self.actor, Actor) else self.actor()


_source: ContextVar[ChangeSource | None] = ContextVar("toolgate_change_source", default=None)


def source_bind(source: ChangeSource) -> Token[ChangeSource | None]:
    return _source.set(source)


def source_reset(token: Token[ChangeSource | None]) -> None:
    _source.reset(token)


@contextmanager
def change_source(origin: str, actor: Actor | Callable[[], Actor]) -> Iterator[None]:
    token = source_bind(ChangeSource(origin=origin, actor=actor))
    try:
        yield
    finally:
        source_reset(token)


def current_source() -> tuple[str, Actor]:
    """The origin and actor of a write happening now."""
    source = _source.get()
    if source is None:
        return Origin.COMMAND, os_actor()
    return source.origin, source.resolve_actor()


def os_actor() -> Actor:
    """The operating-system user running this process, with the management command it runs."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry, e.g. an arbitrary container uid
        user = str(os.getuid())
    label = f"os:{user}"
    if len(sys.argv) > 1 and os.path.basename(sys.argv[0]) == "manage.py":
        label += f" (manage.py {sys.argv[1]})"
    return Actor(kind=ActorKind.COMMAND, id=f"os:{user}", label=label[:200])


def actor_for_user(user: Any) -> Actor:
    """The actor behind `request.user`: a service account's key (it names itself) or a Django user.

    An authenticated API caller's user object provides `change_actor`
    (policies_app.authentication.ServiceAccountUser); this app imports no
    other, so it asks the object rather than checking its type.
    """
    named = getattr(user, "change_actor", None)
    if isinstance(named, Actor):
        return named
    if user is not None and getattr(user, "is_authenticated", False):
        return Actor(kind=ActorKind.USER, id=str(user.pk), label=user.get_username())
    return Actor(kind=ActorKind.USER, id="", label="anonymous")


def task_actor(task_name: str) -> Actor:
    return Actor(kind=ActorKind.TASK, id=task_name[:150], label=f"task {task_name}"[:200])


# Celery signal receivers (connected in config/celery.py): a task's writes are the task's.
# Tokens are kept per task id so an eager task run inside a request restores the request's binding.
_task_tokens: dict[str, Token[ChangeSource | None]] = {}


def task_source_bound(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    """task_prerun: writes made by this task are recorded with origin `task` and the task's name."""
    if task_id is not None:
        name = getattr(task, "name", None) or "unknown"
        _task_tokens[task_id] = source_bind(ChangeSource(origin=Origin.TASK, actor=task_actor(name)))


def task_source_cleared(task_id: str | None = None, **_: Any) -> None:
    """task_postrun: the binding ends with the task."""
    token = _task_tokens.pop(task_id, None) if task_id is not None else None
    if token is not None:
        try:
            source_reset(token)
        except ValueError:  # set in another context (should not happen): drop it rather than leak it
            _source.set(None)
