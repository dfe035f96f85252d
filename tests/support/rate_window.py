"""Tests that spend a per-minute rate budget over several calls keep them inside one window.

The rate budget counts calls per clock minute (policies_app/adapters.py: the window is
`time() // 60`), so two calls either side of a minute's turn land in two windows and the
second is allowed: a test that expects it refused must make its calls inside one minute.
"""

from __future__ import annotations

import time


def room_in_the_rate_window(seconds: float = 15.0) -> None:
    """Return once the current minute has at least `seconds` left (waiting for the next one if not)."""
    left = 60 - time.time() % 60
    if left < seconds:
        time.sleep(left + 0.05)
