"""The worker against ``JC_DB_LOCKED`` (a job's row held by another session), on any driver.

PostgreSQL answers it (``BackendLocked``) when another session's open transaction holds a
job's row: a batch carries out its other items and says which were locked. The worker must
report the others at once, try the locked ones again apart until the lock goes (never giving
them up for their lease: nobody can take a locked job), and say so once per job.
``tests/faults/test_row_lock.py`` injects the real lock; here a wrapper of the memory driver
plays it, so the worker's side is checked without a server.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

import pytest
from jobcore.drivers.memory import MemoryDriver

from jobcore.errors import BackendLocked
from jobcore.records import ClaimToken, JobState
from jobcore.registry import Registry
from jobcore.worker import Worker


class LockingDriver(MemoryDriver):
    """The memory driver, with the rows of the jobs in :attr:`locked` held by "another session"."""

    def __init__(self) -> None:
        super().__init__()
        self.locked: set[str] = set()
        self.refused: Counter[str] = Counter()

    def _split(self, ids: list[str]) -> tuple[list[int], list[int]]:
        held = [i for i, job_id in enumerate(ids) if job_id in self.locked]
        return [i for i in range(len(ids)) if i not in held], held

    def _one(self, token: ClaimToken, verb: str) -> None:
        if token.job_id in self.locked:
            self.refused[verb] += 1
            raise BackendLocked(f"job {token.job_id}'s row locked", locked=(0,))

    def ack_many(self, items: Iterable[tuple[ClaimToken, Any]], **options: Any) -> Any:  # type: ignore[override]
        pairs = list(items)
        free, held = self._split([token.job_id for token, _ in pairs])
        answers = [False if options.get("landed_only") else None] * len(pairs)
        for at, answer in zip(free, super().ack_many([pairs[i] for i in free], **options), strict=True):
            answers[at] = answer
        if held:
            self.refused["ack_many"] += 1
            raise BackendLocked("rows locked", answers=answers, locked=tuple(held))
        return answers

    def start(self, tokens: list[ClaimToken]) -> list[bool]:
        free, held = self._split([token.job_id for token in tokens])
        answers = [False] * len(tokens)
        for at, answer in zip(free, super().start([tokens[i] for i in free]), strict=True):
            answers[at] = answer
        if held:
            self.refused["start"] += 1
            raise BackendLocked("rows locked", answers=answers, locked=tuple(held))
        return answers

    def heartbeat(self, token: ClaimToken, lease: Any) -> bool:
        self._one(token, "heartbeat")
        return super().heartbeat(token, lease)

    def nack(self, token: ClaimToken, error: Any, **options: Any) -> Any:
        self._one(token, "nack")
        return super().nack(token, error, **options)


def _worker(driver: LockingDriver, registry: Registry, **options: Any) -> tuple[Worker, threading.Thread]:
    worker = Worker(
        ["default"], driver=driver, registry=registry, poll_interval=0.01, rescue_interval=None, retention=None,
        scheduler=False, concurrency=2, **options,
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return worker, thread


def _wait(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _done(driver: LockingDriver) -> int:
    return driver.introspect.stats().count(JobState.DONE)


def test_the_other_acks_land_while_one_row_is_locked_and_it_lands_after(caplog: pytest.LogCaptureFixture) -> None:
    driver = LockingDriver()
    registry = Registry()
    runs: Counter[str] = Counter()
    target: list[str] = []

    @registry.job(name="quick")
    def quick(payload: int, ctx: Any) -> int:
        runs[ctx.job.id] += 1
        if ctx.job.id in target:  # another session takes its row as the handler ends: its ack meets the lock
            driver.locked.add(ctx.job.id)
        return payload

    jobs = quick.enqueue_many(list(range(20)), driver=driver)
    target.append(jobs[0].id)
    caplog.set_level(logging.WARNING, logger="jobcore")
    # The memory store does not keep a "locked" job from being claimed again once its lease
    # lapses, as PostgreSQL does: the lock here ends well within the lease.
    worker, thread = _worker(driver, registry, lease=6.0, margin=1.0)
    try:
        _wait(lambda: _done(driver) == 19)
        assert driver.introspect.get(jobs[0].id).state is JobState.RUNNING
        _wait(lambda: driver.refused["ack_many"] >= 3)  # tried again meanwhile, apart from the others
        driver.locked.clear()
        _wait(lambda: _done(driver) == 20)
    finally:
        worker.request_stop()
        thread.join(10)
    assert dict(runs) == {job.id: 1 for job in jobs}
    assert worker.counts["completed"] == 20
    said = [r.getMessage() for r in caplog.records if "another session holds its row locked" in r.getMessage()]
    assert len([m for m in said if m.startswith("could not settle")]) == 1, said
    assert all(f"job {jobs[0].id} " in m for m in said), said
    assert not [r for r in caplog.records if "gave up settling" in r.getMessage()]


def test_a_start_batch_with_a_locked_row_records_the_others_and_that_one_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A quick job runs while its start is recorded (F04's marker): the record waits for the lock, the rest do not."""
    caplog.set_level(logging.WARNING, logger="jobcore")
    driver = LockingDriver()
    registry = Registry()
    runs: Counter[str] = Counter()
    go = threading.Event()

    @registry.job(name="quick")
    def quick(payload: int, ctx: Any) -> int:
        runs[ctx.job.id] += 1
        go.wait(5)
        return payload

    jobs = quick.enqueue_many(list(range(6)), driver=driver)
    driver.locked.add(jobs[1].id)
    worker, thread = _worker(driver, registry, lease=5.0)
    try:
        _wait(lambda: driver.refused["start"] >= 2)
        assert driver.introspect.get(jobs[0].id).attempt == 1  # started beside the locked one
        driver.locked.clear()
        go.set()
        _wait(lambda: _done(driver) == 6)
    finally:
        worker.request_stop()
        thread.join(10)
    assert dict(runs) == {job.id: 1 for job in jobs}
    assert [driver.introspect.get(job.id).attempt for job in jobs] == [1] * 6
    said = [r.getMessage() for r in caplog.records if "could not record the start" in r.getMessage()]
    assert len(said) == 1, said  # once, however many tries
    assert f"job {jobs[1].id} " in said[0], said
    assert not [r for r in caplog.records if "failed; retrying" in r.getMessage()]


def test_a_locked_nack_is_tried_again_until_it_lands() -> None:
    driver = LockingDriver()
    registry = Registry()
    go = threading.Event()

    @registry.job(name="fails", max_attempts=1)
    def fails(payload: int) -> None:
        go.wait(5)
        raise RuntimeError("boom")

    (job,) = fails.enqueue_many([1], driver=driver)
    worker, thread = _worker(driver, registry, lease=1.0, margin=0.25)
    try:
        _wait(lambda: driver.introspect.get(job.id).attempt == 1)  # started
        driver.locked.add(job.id)  # its nack (and its renewals) will meet the row locked
        go.set()
        _wait(lambda: driver.refused["nack"] >= 2)
        driver.locked.clear()
        _wait(lambda: driver.introspect.get(job.id).state is JobState.DEAD)
    finally:
        worker.request_stop()
        thread.join(10)
    assert worker.counts["dead_lettered"] == 1
