"""Small helpers the parity scenarios share: refusals, claiming, snapshots, finishing jobs.

Everything here uses only the public ``JobDriver`` interface, so it works on every
driver. Helpers raise ``AssertionError`` with a message of their own (pytest does not
rewrite asserts outside test modules).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from jobcore.clock import Clock
from jobcore.current import connect
from jobcore.driver import JobDriver
from jobcore.errors import JobcoreError
from jobcore.records import Claimed, Job, JobFilter, JobState
from jobcore.registry import Registry
from jobcore.worker import Worker

__all__ = [
    "LEASE",
    "WAIT",
    "all_jobs",
    "claim_one",
    "finished_job",
    "job_in",
    "make_worker",
    "refused",
    "running",
    "second_instance",
    "state_of",
    "together",
    "wait_until",
]

LEASE = timedelta(seconds=30)
"""The lease scenarios claim with unless they say otherwise."""

WAIT = 10.0
"""Longest real-time wait for anything a worker scenario expects to happen."""


@contextlib.contextmanager
def refused(code: str) -> Iterator[pytest.ExceptionInfo[JobcoreError]]:
    """Expect the block to raise a :class:`JobcoreError` carrying ``code``, a cause and a fix."""
    with pytest.raises(JobcoreError) as info:
        yield info
    err = info.value
    if err.code != code:
        raise AssertionError(f"expected {code}, got {err.code}: {err}")
    if not err.cause or not err.fix:
        raise AssertionError(f"{err.code} lacks a cause or a fix: {err!r}")


def all_jobs(driver: JobDriver, flt: JobFilter | None = None) -> list[Job]:
    """Every job in the store (newest first), read page by page."""
    jobs: list[Job] = []
    page = driver.introspect.list(flt, limit=200)
    jobs.extend(page.jobs)
    while page.after is not None:
        page = driver.introspect.list(flt, limit=200, after=page.after)
        jobs.extend(page.jobs)
    return jobs


def claim_one(
    driver: JobDriver, queue: str = "default", *, worker: str = "w1", lease: Any = LEASE
) -> Claimed:
    """Claim exactly one job from ``queue``; fail when the claim answers none or several."""
    result = driver.claim([queue], worker_id=worker, limit=1, lease=lease)
    if len(result.claimed) != 1:
        raise AssertionError(f"expected one claimed job from {queue!r}, got {len(result.claimed)}")
    return result.claimed[0]


def finished_job(driver: JobDriver, state: str, name: str = "job", **enqueue: Any) -> Job:
    """Enqueue a job and drive it to the finished ``state`` (done, failed, dead, cancelled).

    The job waits in queue ``finishing`` unless ``queue=`` says otherwise, with top
    priority unless ``priority=`` says otherwise.
    """
    queue = enqueue.pop("queue", "finishing")
    # top priority, so the claim that finishes it takes it before a scenario's other jobs
    enqueue.setdefault("priority", 2**31 - 1)
    if state == "dead":
        enqueue.setdefault("max_attempts", 1)
    job = driver.enqueue(name, enqueue.pop("payload", None), queue=queue, **enqueue)
    if state == "cancelled":
        answer = driver.introspect.cancel(job.id, "test")
    else:
        claimed = claim_one(driver, queue)
        if claimed.job.id != job.id:
            raise AssertionError(f"queue {queue!r} handed out job {claimed.job.id}, not {job.id}")
        if state == "done":
            answer = driver.ack(claimed.token, None)
        elif state == "failed":
            answer = driver.nack(claimed.token, "boom", fail=True)
        elif state == "dead":
            answer = driver.nack(claimed.token, "boom")
        else:
            raise ValueError(f"not a finished state: {state}")
    if answer is None or answer.state != state:
        raise AssertionError(f"could not drive job {job.id} to {state}: {answer!r}")
    return answer


def together(count: int, action: Callable[[int], Any], timeout: float = 120.0) -> list[Any]:
    """Run ``action(i)`` for ``i`` in ``range(count)`` on threads released at one instant.

    Answers the results in ``i`` order; re-raises the first exception a thread raised.
    """
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            barrier.wait(timeout=timeout)
            results[index] = action(index)
        except BaseException as exc:  # handed to the scenario below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    if any(thread.is_alive() for thread in threads):
        raise AssertionError(f"threads still running after {timeout}s")
    if errors:
        raise errors[0]
    return results


@contextlib.contextmanager
def second_instance(driver: JobDriver, clock: Clock) -> Iterator[JobDriver]:
    """Another driver instance on ``driver``'s store: another process, or a restart.

    For scenarios marked ``requires("shared_store")``; such a driver must offer a ``url``
    that :func:`jobcore.connect` reaches its store with.
    """
    url = getattr(driver, "url", None)
    if not isinstance(url, str):
        pytest.fail(f"{type(driver).__name__} declares shared_store but has no str `url` reaching its store")
    other = connect(url, clock=clock)
    try:
        yield other
    finally:
        other.close()


def wait_until(predicate: Callable[[], Any], timeout: float = WAIT, what: str = "condition") -> Any:
    """Poll ``predicate`` (real time) until it answers something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def make_worker(driver: JobDriver, registry: Registry, **options: Any) -> Worker:
    """A worker tuned for scenarios: fast polls and heartbeats, no periodic rescue.

    Its local deadlines follow the scenario's ``ManualClock`` (``clock.monotonic()``), so
    moving the clock moves them with the store's leases.
    """
    settings: dict[str, Any] = {
        "driver": driver, "registry": registry, "lease": LEASE, "poll_interval": 0.01,
        "heartbeat_interval": 0.01, "rescue_interval": None, "drain_timeout": 2.0, "seed": 7,
    }
    settings.update(options)
    return Worker(["default"], **settings)


@contextlib.contextmanager
def running(worker: Worker, *, stop_timeout: float = 2.0) -> Iterator[Worker]:
    """Run ``worker`` for the block; stop it (drain up to ``stop_timeout``) after."""
    worker.start()
    try:
        yield worker
    finally:
        worker.stop(stop_timeout)


def state_of(driver: JobDriver, job_id: str) -> JobState:
    """The job's state (it must exist)."""
    job = driver.introspect.get(job_id)
    if job is None:
        raise AssertionError(f"job {job_id} is gone")
    return job.state


def job_in(driver: JobDriver, job_id: str, *states: str) -> Job | None:
    """The job when it is in one of ``states``, else None."""
    job = driver.introspect.get(job_id)
    return job if job is not None and job.state in {JobState(s) for s in states} else None
