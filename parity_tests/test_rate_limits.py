"""Rate limits (rules T01-T03), run through the public ``Worker`` on every driver.

Several workers race for rate-limited jobs while the scenario moves the driver's
``ManualClock`` window by window. Each handler writes its start (the clock's time) to
a list of its own: that record, not the store, is what the counts are checked against.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta
from typing import Any

from jobcore.parity._support import WAIT, make_worker, running, wait_until

from jobcore.clock import ManualClock
from jobcore.driver import JobDriver
from jobcore.rates import RateLimit
from jobcore.records import JobState
from jobcore.registry import Registry

WINDOW = timedelta(seconds=60)
QUIET = 0.6
"""Real seconds a scenario watches for a start that must not happen (workers poll every 10 ms)."""


@contextmanager
def fleet(driver: JobDriver, registry: Registry, count: int, **options: Any) -> Iterator[None]:
    with ExitStack() as stack:
        for index in range(count):
            stack.enter_context(running(make_worker(driver, registry, worker_id=f"w{index}", **options)))
        yield


def _settle_quietly(starts: list[Any], expected: int, driver: JobDriver | None = None) -> None:
    """Wait for ``expected`` starts (and, given ``driver``, for as many jobs done), then watch
    a while that no more come.

    Waiting for the acks matters before the scenario moves the clock a window on: a handler
    that returned but whose ack had not landed yet would see its lease lapse under the move,
    and the job would rightly run again (at least once), which is not what T01 counts."""
    wait_until(lambda: len(starts) >= expected, what=f"{expected} starts")
    if driver is not None:
        wait_until(lambda: _done(driver) >= expected, what=f"{expected} jobs done")
    time.sleep(QUIET)
    assert len(starts) == expected, f"{len(starts)} starts, the limit allows {expected} so far"


def _done(driver: JobDriver) -> int:
    return sum(states.get(JobState.DONE, 0) for states in driver.introspect.stats().counts.values())


def _windows_hold(times: list[datetime], limit: int, window: timedelta) -> None:
    ordered = sorted(times)
    for index, first in enumerate(ordered):
        inside = [t for t in ordered[index:] if t - first < window]
        assert len(inside) <= limit, f"{len(inside)} starts within {window} from {first}"


def test_T01_at_most_n_starts_per_window_however_many_workers_race(driver: JobDriver, clock: ManualClock) -> None:
    """10 jobs limited to 3 starts per 60 s, three workers: 3 start per window, on the store's clock."""
    registry = Registry()
    starts: list[datetime] = []
    lock = threading.Lock()

    @registry.job(name="call_partner", rate_limit=RateLimit(3, per=WINDOW))
    def call_partner(payload: int) -> None:
        with lock:
            starts.append(clock.now())

    jobs = call_partner.enqueue_many(range(10), driver=driver)
    with fleet(driver, registry, 3, concurrency=4):
        for window in range(4):
            _settle_quietly(starts, min(3 * (window + 1), 10), driver)
            clock.advance(WINDOW)
    _windows_hold(starts, 3, WINDOW)
    assert len(starts) == 10
    for job in jobs:
        final = driver.introspect.get(job.id)
        assert final is not None
        assert final.state is JobState.DONE


def test_T01_a_key_limits_each_partner_on_its_own(driver: JobDriver, clock: ManualClock) -> None:
    """With ``key=``, each key has its own N per window: two partners, two starts each."""
    registry = Registry()
    starts: list[str] = []
    lock = threading.Lock()

    @registry.job(name="sync_partner", rate_limit=RateLimit(2, per=WINDOW, key=lambda p: p["partner"]))
    def sync_partner(payload: dict[str, Any]) -> None:
        with lock:
            starts.append(payload["partner"])

    sync_partner.enqueue_many([{"partner": p, "n": n} for p in ("acme", "globex") for n in range(4)], driver=driver)
    with fleet(driver, registry, 2):
        _settle_quietly(starts, 4, driver)
        assert sorted(starts) == ["acme", "acme", "globex", "globex"]
        clock.advance(WINDOW)
        _settle_quietly(starts, 8)
    assert sorted(starts) == ["acme"] * 4 + ["globex"] * 4


def test_T02_a_job_over_its_limit_waits_without_spending_an_attempt(driver: JobDriver, clock: ManualClock) -> None:
    """The job over the limit is due when the window's earliest start expires, no attempt spent, and runs then."""
    registry = Registry()
    starts: list[datetime] = []

    @registry.job(name="report", rate_limit=RateLimit(1, per=WINDOW), max_attempts=1)
    def report(payload: int) -> None:
        starts.append(clock.now())

    first, second = report.enqueue_many([1, 2], driver=driver)
    with fleet(driver, registry, 2):
        _settle_quietly(starts, 1, driver)
        ran, waiting = sorted([first, second], key=lambda j: 0 if job_done(driver, j.id) else 1)
        held = driver.introspect.get(waiting.id)
        assert held is not None
        assert held.state is JobState.SCHEDULED
        assert held.attempt == 0  # one attempt allowed, none spent by waiting
        assert held.run_at == starts[0] + WINDOW
        assert held.errors[-1].type == "RateLimited"
        clock.advance(WINDOW - timedelta(milliseconds=1))  # still inside the window: it waits
        time.sleep(QUIET)
        assert len(starts) == 1
        clock.advance(timedelta(milliseconds=1))  # the window allows it: it starts at once
        _settle_quietly(starts, 2)
    done = driver.introspect.get(waiting.id)
    assert done is not None
    assert done.state is JobState.DONE
    assert done.attempt == 1
    assert ran.id != waiting.id


def job_done(driver: JobDriver, job_id: str) -> bool:
    job = driver.introspect.get(job_id)
    return job is not None and job.state is JobState.DONE


def test_T03_rate_and_concurrency_limits_combine(driver: JobDriver, clock: ManualClock) -> None:
    """Concurrency 1 and 2 starts per window: neither is exceeded, and a job held by its rate frees its slot."""
    registry = Registry()
    running_now: list[int] = []
    peak: list[int] = []
    starts: list[datetime] = []
    lock = threading.Lock()
    release = threading.Event()

    @registry.job(name="export", concurrency=1, rate_limit=RateLimit(2, per=WINDOW))
    def export(payload: int) -> None:
        with lock:
            running_now.append(payload)
            peak.append(len(running_now))
            starts.append(clock.now())
        release.wait(WAIT)
        with lock:
            running_now.remove(payload)

    export.enqueue_many(range(4), driver=driver)
    with fleet(driver, registry, 2, concurrency=2):
        _settle_quietly(starts, 1)  # concurrency 1: the others wait for the slot
        release.set()
        free = lambda: not driver.leases.holders("jobcore:job:export")  # noqa: E731
        wait_until(free, what="the concurrency slot to be given back")
        clock.advance(seconds=5)  # past the concurrency retry delay (0.5-1.5 s), well inside the window
        _settle_quietly(starts, 2, driver)  # then the rate: two per window
        clock.advance(WINDOW - timedelta(seconds=1))  # the first start's slot expired, the second's not yet
        _settle_quietly(starts, 3, driver)
        wait_until(free, what="the concurrency slot to be given back")
        clock.advance(seconds=5)  # and the last, once the concurrency slot is free again
        _settle_quietly(starts, 4)
    assert max(peak) == 1
    _windows_hold(starts, 2, WINDOW)
    slots = driver.leases.holders("jobcore:job:export")
    assert slots == []  # every concurrency slot was given back, the waiting jobs' too
