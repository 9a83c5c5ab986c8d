"""The worker's prefetch (issue 7): jobs claimed beyond the free slots keep every rule.

Prefetch is adaptive (what the slots run in two claim round trips), so these scenarios set
the worker's measured averages directly to make it prefetch, or not, deterministically.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from jobcore.drivers.memory import MemoryDriver

from jobcore.clock import ManualClock
from jobcore.records import JobFilter, JobState
from jobcore.registry import Registry
from jobcore.vocabulary import MAX_CLAIM_BATCH
from jobcore.worker import Worker

START = datetime(2030, 1, 1, 12, tzinfo=timezone.utc)
LEASE = timedelta(seconds=30)


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = 5.0) -> Any:
    """Poll ``predicate`` in real time until it answers something truthy."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)
    return value


def _setup(prefetch: int) -> tuple[MemoryDriver, ManualClock, Registry, threading.Event, threading.Event, Worker]:
    clock = ManualClock(START)
    driver = MemoryDriver(clock=clock)
    registry = Registry()
    started, release = threading.Event(), threading.Event()

    @registry.job(name="slow")
    def slow(payload: int) -> int:
        started.set()
        release.wait(5.0)
        return payload

    slow.enqueue_many([1, 2, 3, 4, 5], driver=driver)
    worker = Worker(
        ["default"],
        driver=driver,
        registry=registry,
        concurrency=1,
        prefetch=prefetch,
        lease=LEASE,
        poll_interval=0.01,
        heartbeat_interval=0.01,
        rescue_interval=None,
        retention=None,
        scheduler=False,
    )
    # handlers look far quicker than a claim: prefetch in full
    worker._running.run_time, worker._claiming.claim_rtt = 1e-6, 1.0
    return driver, clock, registry, started, release, worker


def _count_loop_turns(worker: Worker) -> list[int]:
    """A one-item list counting the claim loop's turns (each asks how far to prefetch)."""
    turns = [0]
    target = worker._claiming.backlog_target

    def counted() -> int:
        turns[0] += 1
        return target()

    worker._claiming.backlog_target = counted  # type: ignore[method-assign]
    return turns


def _states(driver: MemoryDriver) -> list[JobState]:
    jobs = [driver.introspect.get(str(i)) for i in range(1, 6)]
    return [j.state for j in jobs if j is not None]


def test_prefetched_jobs_are_leased_heartbeated_and_given_back_unspent_on_stop() -> None:
    driver, clock, _registry, started, release, worker = _setup(prefetch=3)
    worker.start()
    try:
        assert started.wait(5.0)
        # one running in the slot, three claimed ahead (leased to this worker), one left ready
        wait_until(lambda: _states(driver).count(JobState.RUNNING) == 4, "the prefetch claim")
        assert _states(driver)[4] is JobState.READY
        assert worker.in_flight == 1
        # waiting jobs are heartbeated like running ones: their leases follow the clock
        clock.advance(seconds=20)
        wait_until(
            lambda: all(
                (j := driver.introspect.get(str(i))) is not None
                and j.lease_expires_at is not None
                and j.lease_expires_at >= START + timedelta(seconds=40)
                for i in range(1, 5)
            ),
            "the waiting jobs' leases renewed",
        )
        worker.request_stop(drain_timeout=5.0)
        release.set()
        assert worker.wait(5.0)
    finally:
        release.set()
        worker.stop(0)
    assert worker.stop() is True
    first = driver.introspect.get("1")
    assert first is not None
    assert first.state is JobState.DONE
    assert first.result == 1
    for job_id in ("2", "3", "4"):  # given back: due now, no attempt spent, the reason recorded
        job = driver.introspect.get(job_id)
        assert job is not None
        assert job.state is JobState.SCHEDULED
        assert job.attempt == 0
        assert job.run_at <= clock.now()
        assert job.errors[-1].type == "WorkerStopping"
    assert _states(driver)[4] is JobState.READY
    assert worker.counts["completed"] == 1


def test_no_prefetch_claims_only_free_slots() -> None:
    driver, _clock, _registry, started, release, worker = _setup(prefetch=0)
    turns = _count_loop_turns(worker)
    worker.start()
    try:
        assert started.wait(5.0)
        seen = turns[0]
        wait_until(lambda: turns[0] >= seen + 5, "several claim-loop turns with the slot busy")
        assert _states(driver).count(JobState.RUNNING) == 1  # none took more than the one slot
        release.set()
        wait_until(lambda: all(state is JobState.DONE for state in _states(driver)), "every job done")
    finally:
        release.set()
        assert worker.stop(5.0)


def test_slow_handlers_are_not_prefetched() -> None:
    """A handler slower than a claim round trip gets no jobs held back for it."""
    driver, _clock, _registry, started, release, worker = _setup(prefetch=3)
    worker._running.run_time, worker._claiming.claim_rtt = 1.0, 0.001
    turns = _count_loop_turns(worker)
    worker.start()
    try:
        assert started.wait(5.0)
        seen = turns[0]
        wait_until(lambda: turns[0] >= seen + 5, "several claim-loop turns with the slot busy")
        assert _states(driver).count(JobState.RUNNING) == 1
        release.set()
        wait_until(lambda: all(state is JobState.DONE for state in _states(driver)), "every job done")
    finally:
        release.set()
        assert worker.stop(5.0)


def test_the_backlog_holds_two_round_trips_of_quick_jobs_within_prefetch() -> None:
    """Quick handlers: the slots' work for two claim round trips (topped up at half, so a claim's
    answer lands as the slots would run dry), never more than prefetch; a handler slower than
    the slots need to cover one round trip: none."""
    worker = Worker(["default"], driver=MemoryDriver(), registry=Registry(), concurrency=4, prefetch=100,
                    scheduler=False, retention=None)
    claiming, running = worker._claiming, worker._running
    for run_time, rtt, expected in [
        (0.001, 0.002, 16),  # 4 slots run 8 jobs in a round trip: hold 16
        (0.001, 0.100, 100),  # 800 wanted: prefetch caps it
        (0.004, 0.001, 2),  # exactly one job per round trip across the slots: 2
        (0.005, 0.001, 0),  # slower than the slots cover in a round trip: none
    ]:
        running.run_time, claiming.claim_rtt = run_time, rtt
        assert claiming.backlog_target() == expected, (run_time, rtt)
    running.run_time = None  # nothing measured yet
    assert claiming.backlog_target() == 0


def test_a_claim_asks_for_what_fits_in_a_tenth_of_the_lease_at_the_stores_cost_per_job() -> None:
    """The next claim's size after recent claims of (jobs, seconds), lease 3 s: a budget of 0.3 s,
    or the heartbeat interval (1 s) for a store whose cost per claim alone passes it."""
    for claims, expected in [
        ([(84, 2.9)], 8),  # one size only: all of it put down to the jobs, 8 fit in 0.3 s
        ([(4, 0.1875), (8, 0.3125)], 7),  # 62.5 ms a claim and 31.25 ms a job: 7 fit
        ([(4, 0.5), (2, 0.5)], MAX_CLAIM_BATCH),  # far away but no cost per job: size does not matter
        ([(4, 0.5625), (8, 0.625)], 32),  # 0.5 s a claim, past the budget: 15.6 ms a job fits 32 in 1 s
        ([(1, 5.0)], 1),  # never below one job
        ([(100, 0.0003)], MAX_CLAIM_BATCH),  # a quick store: the batch limit
        ([(1, 0.0)], MAX_CLAIM_BATCH),  # a clock that did not move
    ]:
        worker = Worker(["default"], driver=MemoryDriver(), registry=Registry(), concurrency=4, lease=3,
                        scheduler=False, retention=None)
        claiming = worker._claiming
        assert claiming.claim_cap == MAX_CLAIM_BATCH  # nothing measured: no cap below the batch limit
        for got, took in claims:
            claiming.claim_cap = claiming.next_cap(took, got)
        assert claiming.claim_cap == expected, claims
    claiming.claim_cap = 50
    assert claiming.next_cap(4.0, 0) == 50  # a slow claim that brought nothing (a store away): keep


class SlowClaims(MemoryDriver):
    """A store whose claim takes ``per_claim`` seconds plus ``per_job`` for each job it hands
    out (MongoDB's claim updates one document per job), slow enough to matter against a 1 s lease."""

    def __init__(self, *, per_job: float = 0.0, per_claim: float = 0.0) -> None:
        super().__init__()
        self.per_job, self.per_claim = per_job, per_claim
        self.sizes: list[int] = []

    def claim(self, *args: Any, **kwargs: Any) -> Any:
        result = super().claim(*args, **kwargs)
        self.sizes.append(len(result.claimed))
        time.sleep(self.per_claim + self.per_job * len(result.claimed))
        return result


def _drain(driver: SlowClaims, jobs: int) -> Worker:
    """Run ``jobs`` quick jobs to the end with one worker (4 slots, lease 1 s): each once, none lost."""
    registry = Registry()
    ran: list[int] = []

    @registry.job(name="quick")
    def quick(payload: int) -> None:
        ran.append(payload)

    quick.enqueue_many(list(range(jobs)), driver=driver)
    worker = Worker(["default"], driver=driver, registry=registry, concurrency=4, lease=1, poll_interval=0.01,
                    rescue_interval=0.5, scheduler=False, retention=None)
    worker.start()
    try:
        wait_until(lambda: len(ran) >= jobs and worker.counts["completed"] >= jobs, "every job run", timeout=20.0)
    finally:
        assert worker.stop(5.0)
    assert sorted(ran) == list(range(jobs))  # each once
    assert worker.counts["lost"] == 0
    done = driver.introspect.list(JobFilter(state=JobState.DONE), limit=jobs + 1).jobs
    assert len(done) == jobs
    assert all(job.attempt == 1 for job in done)
    return worker


def test_a_store_slow_per_claimed_job_still_drains_every_job_once() -> None:
    """Quick handlers on a store whose claims take 20 ms a job: the backlog (sized to the claim
    round trip) must not grow claims until their jobs arrive too late to start (F03)."""
    driver = SlowClaims(per_job=0.02)
    _drain(driver, 100)
    # after the first, no claim asked for more than fit in 0.1 s (a tenth of the lease)
    assert max(driver.sizes[1:]) <= 5, driver.sizes


def test_a_store_slow_per_claim_but_not_per_job_still_gets_large_claims() -> None:
    """A far-away store (150 ms a claim whatever its size, past a tenth of the 1 s lease): a
    smaller claim would be no quicker, so claims are not cut down to a job or two."""
    driver = SlowClaims(per_claim=0.15)
    _drain(driver, 100)
    assert max(driver.sizes) >= 50, driver.sizes
