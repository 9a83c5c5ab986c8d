"""Periodic pruning (:mod:`jobcore.retention`): one pruner fleet-wide at a time, on every driver.

The lease that keeps pruners apart lives in the store and reads the driver's clock, so
these tests move a ManualClock to let it lapse. Only the worker wiring test waits on a
real thread (the pruner's cadence is real time).
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from jobcore.drivers.memory import MemoryDriver
from jobcore.parity._faulty import FaultyDriver
from jobcore.parity._support import finished_job, together

from jobcore import events
from jobcore.cli import build_parser
from jobcore.clock import ManualClock
from jobcore.driver import JobDriver
from jobcore.errors import OptionInvalid
from jobcore.records import RetentionPolicy
from jobcore.retention import PRUNE_LEASE_KEY, Pruner
from jobcore.worker import DEFAULT_RETENTION, Worker

ZERO = RetentionPolicy(done=0, failed=0, cancelled=0, dead=0)
INTERVAL = 60.0


def _finished(driver: JobDriver) -> int:
    stats = driver.introspect.stats()
    return sum(stats.count(s) for s in ("done", "failed", "cancelled", "dead"))


def test_racing_pruners_take_turns_through_the_fleet_lease(driver: JobDriver, clock: ManualClock) -> None:
    """Two pruners racing: exactly one runs per lease period; the other finds the lease held."""
    pruners = [Pruner(driver, holder=f"w{i}", policy=ZERO, interval=INTERVAL) for i in range(2)]
    winners = []
    for round_no in range(3):
        finished_job(driver, "done")
        results = together(2, lambda i: pruners[i].run_once())
        ran = [i for i, r in enumerate(results) if r is not None]
        assert len(ran) == 1, f"round {round_no}: {results}"
        assert results[ran[0]].total_removed == 1  # type: ignore[union-attr]
        winners.append(ran[0])
        assert _finished(driver) == 0
        # Still within the period: nobody else prunes, not even the winner's rival retrying.
        clock.advance(seconds=INTERVAL - 1)
        assert pruners[1 - ran[0]].run_once() is None
        clock.advance(seconds=1)  # the lease lapsed: the next round is open to both
    assert driver.leases.acquire(PRUNE_LEASE_KEY, 1, "someone", 1) is True


def test_a_run_prunes_in_passes_and_stop_frees_the_lease(driver: JobDriver) -> None:
    """A run calls prune until nothing is eligible or max_passes; stop() lets another pruner in at once."""
    for _ in range(5):
        finished_job(driver, "dead")
    first = Pruner(driver, holder="a", policy=ZERO, interval=INTERVAL, limit=2, batch=1, max_passes=2)
    result = first.run_once()
    assert result is not None
    assert (result.total_removed, result.total_remaining) == (4, 1)
    other = Pruner(driver, holder="b", policy=ZERO, interval=INTERVAL, limit=2)
    assert other.run_once() is None
    first.stop()
    result = other.run_once()
    assert result is not None
    assert (result.total_removed, result.total_remaining) == (1, 0)


def test_a_run_emits_one_pruned_event_per_state() -> None:
    """Each state with deletions gives one `pruned` event carrying the state and the count."""
    driver = MemoryDriver(clock=ManualClock())
    for state in ("done", "done", "failed"):
        finished_job(driver, state)
    seen: list[events.Event] = []
    events.add_hook(seen.append)
    try:
        Pruner(driver, holder="w", policy=ZERO, interval=INTERVAL).run_once()
    finally:
        events.remove_hook(seen.append)
    assert sorted((e.event, e.outcome, e.count, e.worker_id) for e in seen) == [
        ("pruned", "done", 2, "w"),
        ("pruned", "failed", 1, "w"),
    ]


def test_pruned_events_feed_the_pruned_counter() -> None:
    """jobcore_jobs_pruned_total{state} counts what pruned events report."""
    prom = pytest.importorskip("prometheus_client")
    from jobcore.metrics import WorkerMetrics  # noqa: PLC0415 - needs the optional extra

    registry = prom.CollectorRegistry()
    metrics = WorkerMetrics(registry)
    metrics.on_event(events.Event(event="pruned", outcome="done", count=3))
    metrics.on_event(events.Event(event="pruned", outcome="done", count=2))
    assert registry.get_sample_value("jobcore_jobs_pruned_total", {"state": "done"}) == 5


def test_pruner_refuses_junk_settings() -> None:
    """A bad policy, interval, limit or pass count is refused with a coded error at construction."""
    driver = MemoryDriver()
    for kwargs in ({"policy": "7d"}, {"interval": 0}, {"interval": True}, {"limit": 0}, {"max_passes": 0}):
        with pytest.raises(OptionInvalid):
            Pruner(driver, holder="w", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(OptionInvalid):
        Worker("default", driver=driver, retention="never")  # type: ignore[arg-type]
    with pytest.raises(OptionInvalid):
        Worker("default", driver=driver, prune_interval=-1)


def test_worker_prunes_on_its_interval_and_retention_none_turns_it_off() -> None:
    """A worker with a retention policy prunes every prune_interval; retention=None never does."""
    clock = ManualClock()
    driver = MemoryDriver(clock=clock)
    for _ in range(3):
        finished_job(driver, "done")
    clock.advance(days=3650)  # far past any retention: a pruner of any policy would delete them all
    counted = FaultyDriver(driver)  # no faults: it counts the worker's calls
    off = Worker("idle", driver=counted, retention=None, prune_interval=0.01, poll_interval=0.01)  # type: ignore[arg-type]
    off.start()
    try:
        deadline = time.monotonic() + 10
        while counted.calls["claim"] < 20:  # twenty polls: many prune intervals of real time
            assert time.monotonic() < deadline, "the worker never claimed"
            time.sleep(0.01)
        assert f"jobcore-pruner-{off.worker_id}" not in {t.name for t in threading.enumerate()}
    finally:
        off.stop()
    assert _finished(driver) == 3
    assert Worker("idle", driver=driver).retention == DEFAULT_RETENTION
    worker = Worker("idle", driver=driver, retention=ZERO, prune_interval=0.02, poll_interval=0.01).start()
    try:
        deadline = time.monotonic() + 10
        while _finished(driver) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _finished(driver) == 0
    finally:
        worker.stop()
    # stop() released the lease: another pruner may start at once.
    assert driver.leases.acquire(PRUNE_LEASE_KEY, 1, "next", timedelta(seconds=1)) is True


def test_cli_worker_prune_options() -> None:
    """`jobcore worker` takes --no-prune and --prune-interval."""
    args = build_parser().parse_args(["worker", "jobs", "--no-prune", "--prune-interval", "30"])
    assert (args.no_prune, args.prune_interval) == (True, 30.0)
    args = build_parser().parse_args(["worker", "jobs"])
    assert (args.no_prune, args.prune_interval) == (False, 300.0)
