"""The one place that reaches past prometheus_client's public API (prometheus-client 0.26.0, pinned).

A multiprocess file (`MmapedDict`) keeps each value as a double at a fixed, 8-aligned offset of
its map. `write_value` looks the offset up and packs the value with a zero timestamp into a new
bytes object on every write, about 0.3 µs; a call's stage timings write 38 values, which made
them a twentieth of a built-in exec's instructions. Here a value is written as one aligned
8-byte store through a memoryview of the map instead (0.02 µs), using `MmapedDict._m` (the map)
and `MmapedDict._positions` (a key's offset). A store of one aligned double cannot be read half
written, which is also what the library's own slice assignment is for.
tests/arch/test_private_dependency_names.py pins the version and holds both names to their meaning.
"""

from __future__ import annotations

from prometheus_client.mmap_dict import MmapedDict


def value_index(file: MmapedDict, key: str) -> int:
    """The index of `key`'s value among the doubles of `file`'s map, the key added first if it is new.

    Adding a key may grow the file into a new map: take `doubles(file)` after the last key is added.
    """
    file.read_value(key)  # adds the key, with the value 0.0, if the file does not hold it yet
    return file._positions[key] // 8


def doubles(file: MmapedDict) -> memoryview:
    """`file`'s map as doubles, for `view[value_index(file, key)] = value`."""
    return memoryview(file._m).cast("d")
