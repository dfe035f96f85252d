"""Test helpers shared across the suite (real servers on loopback, not mocks)."""
