"""Reading Prometheus samples the way a scraper does: from /metrics, or from this process's registry."""

from __future__ import annotations

from prometheus_client import REGISTRY


def sample(name: str, **labels: str) -> float:
    """This process's value of one series (0 when it has never been touched)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0
