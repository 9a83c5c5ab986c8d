"""How the worker stores ``ctx.progress`` (rules G): throttled per job, the last report before
the settle, nothing at all for a job that reports nothing. Writes are counted by the driver's
own verb (an independent record of every ``progress`` call), never inferred from timing."""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from jobcore.drivers.memory import MemoryDriver

from jobcore.errors import BackendUnavailable, NotSupported, OptionInvalid
from jobcore.records import ClaimToken, Job, JobState
from jobcore.registry import JobContext, Registry
from jobcore.worker import Worker

UPDATES = 10_000


class CountingDriver(MemoryDriver):
    """The memory driver, noting every ``progress`` write with the real time it was asked."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[float, str, float | None, str | None]] = []
        self.lock = threading.Lock()

    def progress(self, token: ClaimToken, value: float | None = None, message: str | None = None) -> bool:
        with self.lock:
            self.writes.append((time.monotonic(), token.job_id, value, message))
        return super().progress(token, value, message)


@contextlib.contextmanager
def _worker(driver: MemoryDriver, registry: Registry, **options: Any) -> Iterator[Worker]:
    settings: dict[str, Any] = {
        "driver": driver, "registry": registry, "poll_interval": 0.01, "rescue_interval": None,
        "retention": None, "scheduler": False, "summary_interval": None,
    }
    worker = Worker(["default"], **(settings | options)).start()
    try:
        yield worker
    finally:
        assert worker.stop(10)


def _wait_done(driver: MemoryDriver, ids: list[str], timeout: float = 30) -> list[Job]:
    deadline = time.monotonic() + timeout
    while True:
        jobs = [driver.introspect.get(i) for i in ids]
        if all(j is not None and j.state in (JobState.DONE, JobState.DEAD, JobState.FAILED) for j in jobs):
            return jobs  # type: ignore[return-value]
        assert time.monotonic() < deadline, f"jobs not finished: {jobs}"
        time.sleep(0.01)


def test_ten_thousand_reports_in_a_tight_loop_write_at_most_once_per_interval() -> None:
    """10,000 ctx.progress calls spread over about a second store at most one write per
    progress_interval per job (plus the final one), each carrying the latest report then."""
    driver = CountingDriver()
    registry = Registry()
    interval = 0.1
    spans: dict[str, float] = {}

    @registry.job(name="rows")
    def rows(payload: int, ctx: JobContext) -> int:
        began = time.monotonic()
        for n in range(1, UPDATES + 1):
            ctx.progress(n / UPDATES, f"row {n} of {UPDATES}")
            if n % 100 == 0:
                time.sleep(0.01)  # 100 bursts of 100 reports: about a second in all
        spans[ctx.job.id] = time.monotonic() - began
        return payload

    ids = [j.id for j in rows.enqueue_many([1, 2], driver=driver)]
    with _worker(driver, registry, concurrency=2, progress_interval=interval):
        jobs = _wait_done(driver, ids)
    for job in jobs:
        writes = [w for w in driver.writes if w[1] == job.id]
        allowed = spans[job.id] / interval + 2  # one per interval, the first at once, the final one
        assert 2 <= len(writes) <= allowed, (len(writes), spans[job.id])
        assert len(writes) < UPDATES / 100
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(writes[:-1])]  # the final one may come sooner
        assert all(gap >= interval * 0.9 for gap in gaps), gaps
        assert writes[-1][2:] == (1.0, f"row {UPDATES} of {UPDATES}")
        assert job.progress is not None
        assert (job.progress.value, job.progress.message) == (1.0, f"row {UPDATES} of {UPDATES}")
        assert job.state is JobState.DONE


class SlowProgressDriver(CountingDriver):
    """A progress write that takes 0.3 s on its way to the store: the heartbeat thread's write
    of the last report is still in flight when the handler returns."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = threading.Event()

    def progress(self, token: ClaimToken, value: float | None = None, message: str | None = None) -> bool:
        self.in_flight.set()
        time.sleep(0.3)
        return super().progress(token, value, message)


def test_the_settle_waits_for_a_progress_write_in_flight_so_the_last_report_is_kept() -> None:
    """The heartbeat thread took the last report and its write is on its way when the handler
    returns: the settle goes after that write lands, so the finished job keeps the report (a
    settle sent first would end the token, and the write's fence would drop it)."""
    driver = SlowProgressDriver()
    registry = Registry()

    @registry.job(name="last-report")
    def last_report(payload: int, ctx: JobContext) -> None:
        ctx.progress(1.0, "all rows")
        assert driver.in_flight.wait(5)  # the heartbeat thread is writing this very report

    job = last_report.enqueue(1, driver=driver)
    with _worker(driver, registry, progress_interval=0.01):
        (done,) = _wait_done(driver, [job.id])
    assert done.state is JobState.DONE
    assert done.progress is not None
    assert (done.progress.value, done.progress.message) == (1.0, "all rows")
    assert [(value, message) for _, _, value, message in driver.writes] == [(1.0, "all rows")]


def test_a_job_that_reports_nothing_writes_nothing() -> None:
    """No ctx.progress, no progress write: the job ends with progress None."""
    driver = CountingDriver()
    registry = Registry()

    @registry.job(name="quiet")
    def quiet(payload: int, ctx: JobContext) -> int:
        return payload

    ids = [j.id for j in quiet.enqueue_many(list(range(50)), driver=driver)]
    with _worker(driver, registry, progress_interval=0.01):
        jobs = _wait_done(driver, ids)
    assert driver.writes == []
    assert {j.progress for j in jobs} == {None}


def test_a_report_unchanged_since_the_last_write_is_not_written_again() -> None:
    """One report, then a long wait: exactly one write, no repeat per interval nor before the ack."""
    driver = CountingDriver()
    registry = Registry()

    @registry.job(name="once")
    def once(payload: int, ctx: JobContext) -> int:
        ctx.progress(0.5, "half")
        time.sleep(0.5)
        return payload

    ids = [once.enqueue(1, driver=driver).id]
    with _worker(driver, registry, progress_interval=0.05):
        (job,) = _wait_done(driver, ids)
    assert [w[2:] for w in driver.writes] == [(0.5, "half")]
    assert job.progress is not None
    assert (job.progress.value, job.progress.message) == (0.5, "half")


def test_a_failed_attempt_keeps_its_last_report_and_the_retry_starts_without() -> None:
    """The last report lands before the nack; the next claim clears it until the retry reports."""
    driver = CountingDriver()
    registry = Registry()
    seen: list[Any] = []

    @registry.job(name="flaky", max_attempts=2)
    def flaky(payload: int, ctx: JobContext) -> int:
        seen.append(driver.introspect.get(ctx.job.id).progress)  # type: ignore[union-attr]
        ctx.progress(0.3 * ctx.attempt, f"attempt {ctx.attempt}")
        if ctx.attempt == 1:
            raise ValueError("boom")
        return payload

    job = flaky.enqueue(1, driver=driver)
    with _worker(driver, registry, progress_interval=10):
        (done,) = _wait_done(driver, [job.id])
    assert seen == [None, None]  # each attempt began without progress
    assert [w[2:] for w in driver.writes] == [(0.3, "attempt 1"), (0.6, "attempt 2")]
    assert done.progress is not None
    assert (done.progress.value, done.progress.message) == (0.6, "attempt 2")


def test_ctx_progress_refuses_what_the_store_would_and_keeps_the_last_good_report() -> None:
    """A handler's bad report raises JC_OPTION_INVALID at once; nothing of it is kept or written."""
    ctx = JobContext(MemoryDriver().enqueue("x"))
    ctx.progress(0.5, "ok")
    for value, message in ((float("nan"), None), (1.5, None), (-1, None), (True, None), (None, "x" * 501)):
        with pytest.raises(OptionInvalid):
            ctx.progress(value, message)
    assert (ctx.progress_value, ctx.progress_message, ctx.progress_seq) == (0.5, "ok", 1)
    ctx.progress(message="still going")
    assert (ctx.progress_value, ctx.progress_message, ctx.progress_seq) == (0.5, "still going", 2)


def test_a_driver_without_the_verb_keeps_progress_in_the_process() -> None:
    """JC_NOT_SUPPORTED once: the worker stops asking, logs it, and the job still completes."""

    class Older(MemoryDriver):
        asked = 0

        def progress(self, token: ClaimToken, value: float | None = None, message: str | None = None) -> bool:
            Older.asked += 1
            raise NotSupported("no progress here", "upgrade")

    driver = Older()
    registry = Registry()

    @registry.job(name="steps")
    def steps(payload: int, ctx: JobContext) -> int:
        for n in range(5):
            ctx.progress(n / 4)
            time.sleep(0.05)
        return payload

    ids = [j.id for j in steps.enqueue_many([1, 2, 3], driver=driver)]
    with _worker(driver, registry, concurrency=1, progress_interval=0.01) as worker:
        tries = [0]
        send = worker._leases.send_progress

        def counted(attempt: Any) -> None:
            tries[0] += 1
            send(attempt)

        worker._leases.send_progress = counted  # type: ignore[method-assign]
        jobs = _wait_done(driver, ids)
    assert Older.asked == 1
    assert tries[0] <= 1  # asked no more: no busy loop over the pending reports
    assert {j.state for j in jobs} == {JobState.DONE}


def test_progress_interval_is_checked() -> None:
    """progress_interval must be a positive finite duration."""
    for bad in (0, -1, float("nan"), "1s"):
        with pytest.raises(OptionInvalid):
            Worker(["default"], driver=MemoryDriver(), progress_interval=bad)  # type: ignore[arg-type]


def test_a_store_refusing_progress_writes_never_fails_the_job(caplog: pytest.LogCaptureFixture) -> None:
    """Progress is best effort: failing writes are logged (once while they keep failing); the job completes."""

    class Failing(MemoryDriver):
        asked = 0

        def progress(self, token: ClaimToken, value: float | None = None, message: str | None = None) -> bool:
            Failing.asked += 1
            raise BackendUnavailable("the store is away", "wait")

    driver = Failing()
    registry = Registry()

    @registry.job(name="steps")
    def steps(payload: int, ctx: JobContext) -> int:
        for n in range(10):
            ctx.progress(n / 9, f"step {n}")
            time.sleep(0.03)
        return payload

    ids = [steps.enqueue(1, driver=driver).id]
    with caplog.at_level(logging.WARNING, logger="jobcore"), _worker(driver, registry, progress_interval=0.05):
        (job,) = _wait_done(driver, ids)
    assert job.state is JobState.DONE
    assert job.progress is None
    assert 2 <= Failing.asked <= 10  # throttled while failing too, plus the try before the ack
    assert sum("progress failed" in r.getMessage() for r in caplog.records) == 1
