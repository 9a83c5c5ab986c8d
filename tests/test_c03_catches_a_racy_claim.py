"""The C03 storm scenario catches a claim with no mutual exclusion, fast.

A memory driver whose lock is a fresh one on every use (so ``claim`` excludes nothing)
passed the whole parity suite before issue 24: under the GIL its critical section
rarely interleaved. :func:`jobcore.parity.test_concurrency.claim_storm` forces
interleaving; here it must fail, as C03, well within its time bound.
"""

from __future__ import annotations

import threading
import time

import pytest
from jobcore.drivers.memory import MemoryDriver
from jobcore.drivers.memory._jobs import MemoryJobs
from jobcore.parity.plugin import START
from jobcore.parity.test_concurrency import STORM_SECONDS, YieldingClock, claim_storm


class FreshLockJobs(MemoryJobs):
    """The memory store with every ``with self._lock`` taking a brand-new lock: no exclusion."""

    @property  # type: ignore[override]
    def _lock(self) -> threading.RLock:  # type: ignore[override]
        return threading.RLock()

    @_lock.setter
    def _lock(self, _value: object) -> None:
        pass


def FreshLockDriver(clock: YieldingClock) -> MemoryDriver:
    """The memory driver over :class:`FreshLockJobs` (the store the claim path locks)."""
    driver = MemoryDriver(clock=clock)
    driver._store.__class__ = FreshLockJobs
    return driver


def _storms_until(driver: MemoryDriver, deadline: float) -> None:
    while time.monotonic() < deadline:
        claim_storm(driver)


@pytest.mark.parametrize("run", range(3))
def test_the_storm_fails_a_claim_without_exclusion_as_C03_fast(run: int) -> None:
    """Three runs: each fails with a C03 message (a job handed out twice or lost) in a fraction of the bound.

    On a machine shared with other test processes one storm (1.5 s of rounds) now and then
    runs too few rounds to meet the race, so storms repeat until one fails or the time is up.
    """
    driver = FreshLockDriver(clock=YieldingClock(START))
    began = time.monotonic()
    with pytest.raises(AssertionError, match=r"^C03: "):
        _storms_until(driver, began + STORM_SECONDS / 4)
    assert time.monotonic() - began < STORM_SECONDS / 4


def test_the_storm_passes_the_real_memory_driver() -> None:
    """The same storm on the memory driver as shipped hands every job out once."""
    assert claim_storm(MemoryDriver(clock=YieldingClock(START))) >= 1
