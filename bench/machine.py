"""What this machine does to Python code that runs right after a wait: read it before the other figures.

The same small piece of work (a loop and a json.dumps, about 25 µs of CPU on
this machine kind when run back to back) is timed with the thread's CPU clock
after sleeping 0, 0.1, 1, 3 and 10 ms. On the 2-core VMs this project is
measured on, work that follows a wait of a millisecond or more took 2 to 5
times the CPU it takes back to back (the virtual CPU idles, and comes back
slow: frequency, caches, scheduling on the host). A request to Toolgate waits
on Redis, PostgreSQL and, for a proxied call, the upstream; what runs after each
wait pays this. That is why the in-process profiles show every piece 3–10×
dearer than its micro-benchmark, why a single connection (c1) shows it most,
and why figures taken minutes apart differ: compare only within one run.

    python -m bench.machine        (make bench runs it first)

Prints µs per piece of work and the factor over back to back; nothing passes or fails.
"""

from __future__ import annotations

import json
import statistics
import time

PAUSES_MS = (0.0, 0.1, 1.0, 3.0, 10.0)
SAMPLES = 300


def _work() -> int:
    total = 0
    for i in range(300):
        total += i * i
    json.dumps({"a": [1, 2, 3], "b": "x" * 50})
    return total


def cpu_after_pause_us(pause_ms: float) -> float:
    """Median thread CPU of one piece of work that follows a `pause_ms` sleep."""
    samples = []
    for _ in range(SAMPLES):
        if pause_ms:
            time.sleep(pause_ms / 1000)
        started = time.thread_time()
        _work()
        samples.append((time.thread_time() - started) * 1e6)
    return statistics.median(samples)


def main() -> None:
    for _ in range(SAMPLES):  # warm the interpreter's caches for the piece of work
        _work()
    back_to_back = cpu_after_pause_us(0.0)
    print("the same work after a pause (thread CPU, median of 300):")
    for pause_ms in PAUSES_MS:
        cpu = back_to_back if pause_ms == 0 else cpu_after_pause_us(pause_ms)
        print(f"  after {pause_ms:>4} ms: {cpu:7.1f} µs  ({cpu / back_to_back:4.1f}x back to back)")


if __name__ == "__main__":
    main()
