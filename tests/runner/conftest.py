"""Fixtures of the runner's HTTP capability tests: the configured upstream and another origin, both on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.loopback import LoopbackServer


@pytest.fixture
def upstream() -> Iterator[LoopbackServer]:
    """The origin an HttpCapability is configured for."""
    with LoopbackServer() as server:
        yield server


@pytest.fixture
def elsewhere() -> Iterator[LoopbackServer]:
    """Another origin: where a redirect may lead, and a credential must never arrive."""
    with LoopbackServer() as server:
        yield server
