"""Toolgate's own settings plus one bare DRF view, the baseline `make bench` measures exec against."""

from config.settings import *  # noqa: F403

ROOT_URLCONF = "bench.urls"
# The baselines are JSON endpoints like exec: they run the API's middleware list, as exec does.
API_MIDDLEWARE_PATHS = (*API_MIDDLEWARE_PATHS, "/bench/")  # noqa: F405
