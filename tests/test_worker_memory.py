"""A finished attempt is freed as soon as the worker lets it go (issue 22): no reference cycle
leaves it, its job, claim, logger and context to the cyclic garbage collector, whose passes
cost a busy worker more than the rest of a short job's bookkeeping."""

from __future__ import annotations

import gc
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from jobcore.drivers.memory import MemoryDriver

from jobcore.registry import JobContext, Registry
from jobcore.worker import Worker
from jobcore.worker._attempt import Attempt
from tests.worker_run import run_until_done


@pytest.fixture
def no_cyclic_gc() -> Iterator[None]:
    """The cyclic collector off for the test: only reference counting frees objects."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
        gc.collect()


def _live(kind: type[Any], name: str) -> list[Any]:
    """The live objects of ``kind`` for jobs called ``name``: earlier tests in this process may
    still hold (and later let go of) attempts of their own, so a count of every attempt is no
    baseline."""
    return [o for o in gc.get_objects() if type(o) is kind and o.job.name == name]


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_finished_attempts_are_freed_without_the_cyclic_collector(no_cyclic_gc: None, flavour: str) -> None:
    """After a drain, no attempt or job context of it is left alive for the collector to find
    (sync handlers on runner threads, async ones as tasks); a context a handler kept still
    answers ``time_left()``: 0, as its attempt is over."""
    driver = MemoryDriver()
    registry = Registry()
    seen: list[float | None] = []
    kept: list[JobContext] = []

    def record(payload: int, ctx: JobContext) -> int:
        seen.append(ctx.time_left())
        if payload == 0:
            kept.append(ctx)
        return payload

    async def record_async(payload: int, ctx: JobContext) -> int:
        return record(payload, ctx)

    name = f"note-{uuid.uuid4().hex}"
    note = registry.job(name=name)(record if flavour == "sync" else record_async)
    note.enqueue_many(list(range(30)), driver=driver)
    worker = Worker(
        ["default"], driver=driver, registry=registry, poll_interval=0.01, rescue_interval=None, retention=None,
        scheduler=False, summary_interval=None,
    )
    run_until_done(worker, driver, 30)

    assert len(seen) == 30
    assert all(left is not None and 0 < left <= worker.lease.total_seconds() for left in seen)
    # A runner or the settler may hold its last attempt in a local a moment longer; a cycle
    # would hold it for good (the collector is off).
    deadline = time.monotonic() + 5
    while _live(Attempt, name) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _live(Attempt, name) == [], "finished attempts were left to the cyclic collector"
    assert _live(JobContext, name) == kept  # only the one the handler kept
    assert kept[0].time_left() == 0.0
