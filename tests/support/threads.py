"""Running a test's own event loop where the worker's main thread may already have one."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_in_own_thread(work: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """`asyncio.run(work())` on a thread of its own: a test worker that ran a browser test keeps an
    event loop on its main thread, where `asyncio.run` refuses to start another."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = asyncio.run(work())
        except BaseException as error:  # re-raised on the test's thread
            outcome["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
