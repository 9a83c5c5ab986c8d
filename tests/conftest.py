"""Fixtures for every test under tests/."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _gc_thresholds_restored() -> Iterator[None]:
    """Puts the collector's thresholds back after each test: ``jobcore worker`` run in-process
    (``main(["worker", ...])``) raises the youngest one for the rest of the process (see
    :func:`jobcore.cli.worker.tune_gc`), which is right for a worker process, not for a test run."""
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)
