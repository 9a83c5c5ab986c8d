"""Structured events: one ``jobcore.events`` record per transition, with the stable fields."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from jobcore.drivers.memory import MemoryDriver

from jobcore import events
from jobcore.backoff import Backoff
from jobcore.clock import ManualClock
from jobcore.records import JobState
from jobcore.registry import Registry
from jobcore.worker import Worker

LEASE = timedelta(seconds=30)
NO_WAIT = Backoff(base=0.0, jitter=0.0)


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = 5.0) -> Any:
    """Poll ``predicate`` in real time until it answers something truthy."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)
    return value


def make_worker(driver: MemoryDriver, registry: Registry, **options: Any) -> Worker:
    settings: dict[str, Any] = {
        "driver": driver, "registry": registry, "lease": LEASE, "poll_interval": 0.01,
        "heartbeat_interval": 0.01, "rescue_interval": None, "drain_timeout": 2.0, "seed": 7,
    }
    settings.update(options)
    return Worker(["default"], **settings)


def event_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """Records of the events logger at INFO and above (``started`` is DEBUG)."""
    return [r for r in caplog.records if r.name == events.EVENT_LOGGER and r.levelno >= logging.INFO]


def fields(record: logging.LogRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in events.FIELDS}


@pytest.fixture
def driver() -> MemoryDriver:
    return MemoryDriver(clock=ManualClock(datetime(2030, 1, 1, 12, tzinfo=timezone.utc)))


def test_each_settle_emits_one_record_with_the_stable_fields(
    driver: MemoryDriver, caplog: pytest.LogCaptureFixture
) -> None:
    """A completed job, and a failing one retried then dead-lettered, give one record per settle."""
    registry = Registry()

    @registry.job(name="ok")
    def ok(payload: int) -> int:
        return payload

    @registry.job(name="boom", max_attempts=2, backoff=NO_WAIT)
    def boom(payload: int) -> int:
        raise ValueError(f"bad {payload}")

    caplog.set_level(logging.INFO, logger="jobcore")
    done = ok.enqueue(1, driver=driver)
    dead = boom.enqueue(2, driver=driver)
    worker = make_worker(driver, registry).start()
    try:
        wait_until(lambda: worker.counts["dead_lettered"] == 1 and worker.counts["completed"] == 1, "both endings")
    finally:
        worker.stop(2.0)
    records = event_records(caplog)
    by_job = {job_id: [fields(r) for r in records if r.job_id == job_id] for job_id in (done.id, dead.id)}  # type: ignore[attr-defined]
    assert len(records) == 3
    [completed] = by_job[done.id]
    assert completed == {
        "event": "settled", "job_id": done.id, "job_name": "ok", "queue": "default", "attempt": 1,
        "outcome": "completed", "error_type": None, "duration_s": completed["duration_s"], "count": None,
        "worker_id": worker.worker_id,
    }
    assert isinstance(completed["duration_s"], float)
    assert completed["duration_s"] >= 0
    retry, dead_lettered = by_job[dead.id]
    assert (retry["event"], retry["outcome"], retry["attempt"]) == ("settled", "retry", 1)
    assert retry["error_type"] == "ValueError"
    assert (dead_lettered["event"], dead_lettered["outcome"]) == ("settled", "dead_lettered")
    assert dead_lettered["attempt"] == 2
    assert (dead_lettered["error_type"], dead_lettered["job_name"]) == ("ValueError", "boom")
    assert driver.introspect.get(dead.id).state is JobState.DEAD  # type: ignore[union-attr]


def test_a_lapsed_final_attempt_emits_one_buried_record(driver: MemoryDriver, caplog: pytest.LogCaptureFixture) -> None:
    """A final attempt whose lease lapsed (a crashed worker) is buried by the next claim, with one record."""
    registry = Registry()
    registry.job(name="ok")(lambda payload: payload)
    caplog.set_level(logging.INFO, logger="jobcore")
    job = driver.enqueue("ok", 1, max_attempts=1)
    driver.claim(["default"], worker_id="crashed", lease=LEASE)
    driver.clock.advance(LEASE + timedelta(seconds=1))  # type: ignore[attr-defined]
    worker = make_worker(driver, registry).start()
    try:
        wait_until(lambda: worker.counts["buried"] == 1, "the burial")
    finally:
        worker.stop(2.0)
    [record] = event_records(caplog)
    assert fields(record) == {
        "event": "buried", "job_id": job.id, "job_name": "ok", "queue": "default", "attempt": 1,
        "outcome": "dead", "error_type": "LeaseLapsedFinalAttempt", "duration_s": None, "count": None,
        "worker_id": worker.worker_id,
    }
    assert record.levelno == logging.ERROR


def test_a_lost_lease_and_a_rescue_each_emit_one_record(driver: MemoryDriver, caplog: pytest.LogCaptureFixture) -> None:
    """A job cancelled under its handler gives one ``lease_lost``; a rescue sweep one ``rescued``."""
    registry = Registry()
    started, release = threading.Event(), threading.Event()

    @registry.job(name="slow")
    def slow(payload: int) -> int:
        if payload == 1:
            started.set()
            release.wait(5.0)
        return payload

    caplog.set_level(logging.INFO, logger="jobcore")
    lapsed = slow.enqueue(2, driver=driver)
    driver.claim(["default"], worker_id="crashed", lease=LEASE)
    driver.clock.advance(LEASE + timedelta(seconds=1))  # type: ignore[attr-defined]
    first = slow.enqueue(1, driver=driver)
    worker = make_worker(driver, registry, rescue_interval=60.0).start()
    try:
        assert started.wait(5.0)
        driver.introspect.cancel(first.id)
        wait_until(lambda: worker.counts["lost"] == 1, "the lost lease")
        wait_until(lambda: worker.counts["completed"] == 1, "the rescued job to finish")
    finally:
        release.set()
        worker.stop(2.0)
    records = [fields(r) for r in event_records(caplog)]
    [rescued] = [r for r in records if r["event"] == "rescued"]
    assert (rescued["outcome"], rescued["count"], rescued["job_id"]) == ("requeued", 1, None)
    [lost] = [r for r in records if r["event"] == "lease_lost"]
    assert (lost["job_id"], lost["job_name"], lost["attempt"], lost["outcome"]) == (first.id, "slow", 1, "called_off")
    [settled] = [r for r in records if r["event"] == "settled"]
    assert (settled["job_id"], settled["outcome"], settled["attempt"]) == (lapsed.id, "completed", 2)
    assert len(records) == 3


def test_hooks_see_every_event_and_a_broken_hook_is_contained(caplog: pytest.LogCaptureFixture) -> None:
    """A hook receives the Event (started included); one that raises is logged and the record still written."""
    seen: list[events.Event] = []

    def broken(_event: events.Event) -> None:
        raise RuntimeError("hook bug")

    events.add_hook(broken)
    events.add_hook(seen.append)
    caplog.set_level(logging.DEBUG, logger=events.EVENT_LOGGER)
    try:
        events.emit("started", None, "job %s started", "7", level=logging.DEBUG, job_id="7", outcome="running")
    finally:
        events.remove_hook(broken)
        events.remove_hook(seen.append)
    assert [(e.event, e.job_id) for e in seen] == [("started", "7")]
    messages = [r.getMessage() for r in caplog.records]
    assert "job 7 started" in messages
    assert any("event hook" in m for m in messages)
