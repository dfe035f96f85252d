"""Writes the blocking modules of runner/http1 from their async sources: one source for each pair.

runner/http1/_async_pool.py gives _sync_pool.py (the pools), _async_fetch.py
gives _sync_fetch.py (a request and its redirects over a pool).

Why: the blocking pool must keep every rule of the async one (caps, expiry,
reuse, timeouts); a hand-kept copy drifts. As httpcore does with its
scripts/unasync.py: whole-word substitutions, nothing else, so the generated
file reads like the source. tests/runner/test_http1_generated.py fails when
a file on disk is not what this writes.

    python -m runner.http1.unasync        (or: make unasync)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# (source, generated, the generated module's docstring)
PAIRS = (
    (
        HERE / "_async_pool.py",
        HERE / "_sync_pool.py",
        '''"""Keep-alive HTTP/1.1 connections on blocking sockets, for callers on their own threads (generated).

What it guarantees, and why it exists: runner/http1/_async_pool.py, its source.
Thread-safe: the idle lists are kept under a lock, and a connection taken
from them is one thread's until it is put back.
"""
''',
    ),
    (
        HERE / "_async_fetch.py",
        HERE / "_sync_fetch.py",
        '''"""A request and its redirects over the blocking pool, answered whole (generated).

Why: runner/http1/_async_fetch.py, its source.
"""
''',
    ),
)

SUBSTITUTIONS = (
    ("AsyncConnection", "BlockingConnection"),
    ("AsyncPool", "BlockingPool"),
    ("AsyncStream", "BlockingStream"),
    ("AsyncSender", "BlockingSender"),
    ("AsyncLock", "Lock"),
    ("AsyncSignal", "Signal"),
    ("open_async_stream", "open_blocking_stream"),
    ("_async_pool", "_sync_pool"),
    ("async def", "def"),
    ("async with", "with"),
    ("async for", "for"),
    ("await ", ""),
)
_PATTERN = re.compile(
    "|".join(rf"\b{re.escape(old)}\b" if old[-1].isalnum() else rf"\b{re.escape(old)}" for old, _ in SUBSTITUTIONS)
)
_BY_OLD = dict(SUBSTITUTIONS)

HEADER = "# Generated from runner/http1/{source} by runner/http1/unasync.py; edit that one, then: make unasync\n"


def generated(source: str, name: str, docstring: str) -> str:
    """The blocking module: `source` with its docstring, async names and keywords replaced."""
    docstring_end = source.index('"""\n', source.index('"""') + 3) + 4
    body = _PATTERN.sub(lambda match: _BY_OLD[match.group(0)], source[docstring_end:])
    return HEADER.format(source=name) + docstring + body


def main() -> int:
    for source, target, docstring in PAIRS:
        target.write_text(generated(source.read_text(), source.name, docstring))
        print(f"wrote {target.relative_to(HERE.parents[1])}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
