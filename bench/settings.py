"""Toolgate's own settings plus one bare DRF view, the baseline `make bench` measures exec against."""

from config.settings import *  # noqa: F403

ROOT_URLCONF = "bench.urls"
