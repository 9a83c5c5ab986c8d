"""Logs people can read (issue 20): one line per retried failure, the traceback once, a summary.

A retryable failure logs one WARNING line naming the error; the traceback is logged once,
with the ERROR line of the attempt after which the job will not run again (failed or
dead-lettered), unless ``tracebacks=`` says otherwise. Every ``summary_interval`` the
worker logs one INFO line of what it did.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
from typing import Any

import pytest
from jobcore.drivers.memory import MemoryDriver

from jobcore import Registry, Worker
from jobcore.backoff import Backoff
from jobcore.errors import BackendUnavailable, InvalidInput, JobcoreError
from jobcore.records import JobState
from jobcore.worker._leases import FIRST_RENEWAL_BATCH

WORKER_LOGGER = "jobcore.worker"


def _run_until(driver: MemoryDriver, registry: Registry, job_id: str, *, tracebacks: str = "final") -> None:
    worker = Worker(
        ["default"], driver=driver, registry=registry, poll_interval=0.01, rescue_interval=None,
        tracebacks=tracebacks, summary_interval=None, seed=1,
    ).start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            job = driver.introspect.get(job_id)
            if job is not None and job.state in (JobState.DONE, JobState.DEAD, JobState.FAILED):
                return
            time.sleep(0.01)
        raise AssertionError(f"job {job_id} did not finish")
    finally:
        worker.stop(2.0)


def _failures(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING and " failed, " in r.getMessage()]


def _registry(fails: int) -> tuple[Registry, Any, list[int]]:
    registry = Registry()
    calls: list[int] = []

    @registry.job(name="flaky", max_attempts=3, backoff=Backoff(base=0.001, cap=0.001, jitter=0))
    def flaky(payload: Any) -> str:
        calls.append(1)
        if len(calls) <= fails:
            raise ValueError(f"upstream said no ({len(calls)})")
        return "ok"

    return registry, flaky, calls


def test_a_retried_failure_logs_one_line_with_the_error_and_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    registry, flaky, calls = _registry(fails=2)
    driver = MemoryDriver()
    job = flaky.enqueue({}, driver=driver)
    with caplog.at_level(logging.INFO):
        _run_until(driver, registry, job.id)
    assert len(calls) == 3
    failures = _failures(caplog)
    assert [r.levelno for r in failures] == [logging.WARNING, logging.WARNING]
    assert all(r.exc_info is None for r in failures)
    assert "ValueError: upstream said no (1)" in failures[0].getMessage()
    assert "attempt 1 of 3 failed, will retry" in failures[0].getMessage()
    assert len(failures[0].getMessage().splitlines()) == 1


def test_the_traceback_is_logged_once_when_no_retry_is_left(caplog: pytest.LogCaptureFixture) -> None:
    registry, flaky, calls = _registry(fails=99)
    driver = MemoryDriver()
    job = flaky.enqueue({}, driver=driver)
    with caplog.at_level(logging.INFO):
        _run_until(driver, registry, job.id)
    assert len(calls) == 3
    failures = _failures(caplog)
    assert [r.levelno for r in failures] == [logging.WARNING, logging.WARNING, logging.ERROR]
    assert [r.exc_info is not None for r in failures] == [False, False, True]
    assert "attempt 3 of 3 failed, no retry left: ValueError: upstream said no (3)" in failures[-1].getMessage()
    tracebacks = [r for r in caplog.records if r.exc_info is not None]
    assert len(tracebacks) == 1


@pytest.mark.parametrize(("choice", "expected"), [("always", [True, True, True]), ("never", [False, False, False])])
def test_tracebacks_can_be_always_or_never(
    choice: str, expected: list[bool], caplog: pytest.LogCaptureFixture
) -> None:
    registry, flaky, _ = _registry(fails=99)
    driver = MemoryDriver()
    job = flaky.enqueue({}, driver=driver)
    with caplog.at_level(logging.INFO):
        _run_until(driver, registry, job.id, tracebacks=choice)
    assert [r.exc_info is not None for r in _failures(caplog)] == expected


def test_a_bad_tracebacks_choice_is_a_coded_refusal() -> None:
    with pytest.raises(JobcoreError) as refusal:
        Worker(["default"], driver=MemoryDriver(), tracebacks="sometimes")
    assert refusal.value.code == "JC_OPTION_INVALID"
    assert "final" in str(refusal.value.fix)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"queues": None}, "queues must be queue names, got NoneType"),
        ({"queues": 5}, "queues must be queue names, got int 5"),
        ({"driver": 5}, "driver must be a jobcore driver, got int 5"),
        ({"registry": {}}, "registry must be a jobcore Registry, got dict"),
        ({"on_settled": "log"}, "on_settled must be callable, got str"),
        ({"scheduler": "yes"}, "scheduler must be True or False, got 'yes'"),
    ],
    ids=["queues-none", "queues-int", "driver", "registry", "on-settled", "scheduler"],
)
def test_a_worker_option_of_the_wrong_kind_is_a_coded_refusal(options: dict[str, Any], says: str) -> None:
    """Each used to be taken and to fail later (TypeError at once for the queues, AttributeError
    at start or at the first settle for the rest); now JC_OPTION_INVALID with a fix, at once."""
    settings: dict[str, Any] = {"queues": ["default"], "driver": MemoryDriver(), **options}
    with pytest.raises(JobcoreError) as refusal:
        Worker(settings.pop("queues"), **settings)
    assert refusal.value.code == "JC_OPTION_INVALID"
    assert says in refusal.value.cause
    assert refusal.value.fix


def test_a_heartbeat_slower_than_the_lease_allows_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    """A heartbeat_interval not shorter than lease - margin would let a healthy handler be called
    off between two renewals: the worker says so when it is made; the default does not."""
    with caplog.at_level(logging.WARNING, logger=WORKER_LOGGER):
        Worker(["default"], driver=MemoryDriver(), lease=10, heartbeat_interval=8)
    warned = [r.getMessage() for r in caplog.records if r.name == WORKER_LOGGER]
    assert warned == [
        "heartbeat_interval 8s is not shorter than lease - margin (8s): a handler running longer than that is "
        "called off even while the store answers; leave heartbeat_interval out (lease/3)"
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=WORKER_LOGGER):
        Worker(["default"], driver=MemoryDriver(), lease=10)
        Worker(["default"], driver=MemoryDriver(), lease=10, heartbeat_interval=7.9)
    assert [r for r in caplog.records if r.name == WORKER_LOGGER] == []


def test_the_worker_logs_a_banner_and_a_periodic_one_line_summary(caplog: pytest.LogCaptureFixture) -> None:
    registry = Registry()

    @registry.job(name="quick")
    def quick(payload: Any) -> None:
        return None

    driver = MemoryDriver()
    driver.enqueue_many([{"name": "quick", "payload": i} for i in range(5)])
    with caplog.at_level(logging.INFO):
        worker = Worker(
            ["default"], driver=driver, registry=registry, poll_interval=0.01, rescue_interval=None,
            summary_interval=0.2, worker_id="w-log",
        ).start()
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not any("5 completed" in r.getMessage() for r in caplog.records):
                time.sleep(0.05)
        finally:
            worker.stop(2.0)
    messages = [r.getMessage() for r in caplog.records]
    banner = next(m for m in messages if "started on" in m)
    assert "worker w-log started on default (concurrency 4" in banner
    assert "MemoryDriver" in banner
    summary = next(m for m in messages if "5 completed" in m)
    assert summary.startswith("worker w-log, last 0.2s: 5 completed, 0 retried, 0 failed")
    assert "running" in summary
    assert len(summary.splitlines()) == 1


def test_a_rescue_sweep_the_store_cannot_answer_is_logged_like_a_failed_claim(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """During an outage the sweep logs one WARNING "failed; retrying" and "works again" after,
    not an ERROR with a traceback every interval; a sweep the store refuses stays an ERROR."""
    driver = MemoryDriver()
    raises: list[BaseException] = [BackendUnavailable("the database connection failed")] * 4
    door = type(driver.introspect)
    real = door.rescue

    def rescue(self: Any, *args: Any, **kwargs: Any) -> Any:
        if raises:
            raise raises.pop(0)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(door, "rescue", rescue)
    caplog.set_level(logging.DEBUG, logger=WORKER_LOGGER)
    worker = Worker(
        ["default"], driver=driver, registry=Registry(), poll_interval=0.01, rescue_interval=0.01,
        summary_interval=None, seed=1,
    ).start()
    try:
        deadline = time.monotonic() + 10
        while (raises or not any("works again" in r.getMessage() for r in caplog.records)) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.01)
        raises.append(InvalidInput("the sweep was refused"))
        while time.monotonic() < deadline and not any(r.levelno == logging.ERROR for r in caplog.records):
            time.sleep(0.01)
    finally:
        worker.stop(2.0)
    sweeps = [(r.levelname, r.getMessage()) for r in caplog.records if "rescue sweep" in r.getMessage()]
    assert sweeps[:2] == [("WARNING", "rescue sweep failed; retrying"), ("WARNING", "rescue sweep works again")]
    assert sweeps[2:] == [("ERROR", "rescue sweep failed")]


class _SlowRenewals(MemoryDriver):
    """A store that takes 30 ms per lease it renews, alone or in a batch."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    def heartbeat(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(0.03)
        return super().heartbeat(*args, **kwargs)

    def heartbeat_many(self, tokens: Any, lease: Any) -> list[bool]:
        tokens = list(tokens)
        self.batches.append(len(tokens))
        time.sleep(0.03 * len(tokens))
        return super().heartbeat_many(tokens, lease)


class _FarAway(MemoryDriver):
    """A store 30 ms away: every renewal call takes 30 ms, whatever its size."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, int]] = []

    def heartbeat(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(("heartbeat", 1))
        time.sleep(0.03)
        return super().heartbeat(*args, **kwargs)

    def heartbeat_many(self, tokens: Any, lease: Any) -> list[bool]:
        tokens = list(tokens)
        self.calls.append(("heartbeat_many", len(tokens)))
        time.sleep(0.03)
        return super().heartbeat_many(tokens, lease)


class _SlowerThanTheInterval(MemoryDriver):
    """A store that takes 30 ms to answer a renewal: three heartbeat intervals of 10 ms."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[float, float]] = []  # (sent, answered) of every renewal call

    def heartbeat(self, *args: Any, **kwargs: Any) -> Any:
        sent = time.monotonic()
        time.sleep(0.03)
        try:
            return super().heartbeat(*args, **kwargs)
        finally:
            self.calls.append((sent, time.monotonic()))


def _hold(
    driver: MemoryDriver, caplog: pytest.LogCaptureFixture, *, until: str | None, jobs: int = 20,
) -> tuple[Worker, list[str]]:
    """One worker (lease 1 s) running ``jobs`` jobs that wait, until it logs a warning containing
    ``until`` (None: no waiting for one), then 1.5 s more (four rounds of renewals); answers the
    worker, its jobs done, and what its logger warned."""
    registry, release = Registry(), threading.Event()

    @registry.job(name="long")
    def long(payload: int) -> None:
        release.wait(10)

    long.enqueue_many(list(range(jobs)), driver=driver)
    worker = Worker(["default"], driver=driver, registry=registry, concurrency=jobs, lease=1, prefetch=0,
                    poll_interval=0.01, rescue_interval=None, summary_interval=None)
    with caplog.at_level(logging.WARNING, logger=WORKER_LOGGER):
        worker.start()
        try:
            deadline = time.monotonic() + 10
            while until and time.monotonic() < deadline and not [r for r in caplog.records if until in r.getMessage()]:
                time.sleep(0.05)
            time.sleep(1.5)
        finally:
            release.set()
            worker.stop(5.0)
    return worker, [r.getMessage() for r in caplog.records if r.name == WORKER_LOGGER]


def _one_by_one(driver: MemoryDriver) -> MemoryDriver:
    driver.capabilities = driver.capabilities - {"heartbeat_many"}
    return driver


@pytest.mark.parametrize(
    ("make", "how"),
    [
        (_SlowRenewals, "in heartbeat_many batches"),
        (lambda: _one_by_one(_SlowRenewals()), "one call at a time (this driver has no heartbeat_many)"),
    ],
    ids=["batched", "one-by-one"],
)
def test_a_round_of_renewals_past_half_of_lease_minus_margin_is_warned_about_once(
    caplog: pytest.LogCaptureFixture, make: Any, how: str,
) -> None:
    """Twenty running jobs on a store taking 30 ms per renewed lease take 0.6 s a round, past half
    of lease - margin (0.4 s of a 1 s lease): the worker says so once (not every round), naming
    how it renewed them and what to change."""
    _worker, warned = _hold(make(), caplog, until="renewing")
    said = [message for message in warned if "renewing" in message]
    assert len(said) == 1, said
    found = re.match(r"renewing (\d+) leases took ([0-9.]+)s", said[0])
    assert found is not None, said[0]
    assert int(found[1]) > 13  # most of the twenty due in one round, 30 ms each
    assert float(found[2]) > 0.4
    assert "more than half of lease - margin (0.8s), " + how in said[0]
    assert "lower concurrency (and prefetch) or lengthen the lease" in said[0]


def test_quick_renewals_say_nothing(caplog: pytest.LogCaptureFixture) -> None:
    worker, warned = _hold(MemoryDriver(), caplog, until=None)
    assert worker.counts["completed"] == 20
    assert warned == []


def test_a_far_away_store_renews_forty_leases_in_one_call_a_round(caplog: pytest.LogCaptureFixture) -> None:
    """Forty jobs held on a store 30 ms away: one by one a round would take 1.2 s, past lease -
    margin (0.8 s), and handlers would be called off while the store answers. In batches each
    round is one call, the leases of every claim together: every job completes, none is lost,
    nothing is warned."""
    driver = _FarAway()
    worker, warned = _hold(driver, caplog, until=None, jobs=40)
    assert (worker.counts["completed"], worker.counts["lost"]) == (40, 0)
    assert warned == []
    batches = [size for verb, size in driver.calls if verb == "heartbeat_many"]
    assert sum(batches) >= 3 * 40  # every lease renewed every lease / 3, for 1.5 s and more
    assert batches[-1] == 40  # the claims' groups, due a moment apart, renewed in one call
    assert len(batches) * 10 <= sum(batches)
    assert sum(size for verb, size in driver.calls if verb == "heartbeat") < len(batches)  # a lone due lease only


def test_on_a_store_slow_per_lease_renewal_calls_shrink_to_a_tenth_of_the_lease(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """30 ms per renewed lease against a 1 s lease: after the first call (sized before anything
    was measured) each heartbeat_many carries the three that fit in 0.1 s, so no lease waits
    behind a long batch. (Twenty such renewals take 0.6 s, more than the 0.47 s left of lease -
    margin after the first falls due: some leases are lost however they are sent.)"""
    driver = _SlowRenewals()
    _hold(driver, caplog, until=None)
    assert driver.batches[0] == FIRST_RENEWAL_BATCH
    assert len(driver.batches) > 5
    assert max(driver.batches[1:]) <= 3, driver.batches


def test_a_renewal_slower_than_the_interval_is_not_sent_again_the_moment_it_is_answered() -> None:
    """A 10 ms heartbeat interval against a store that answers in 30 ms: the next renewal of
    the lease waits the interval after the answer. Sent back to back, the job's row would be
    written without a pause for as long as it runs, and its settle would meet that write (on
    the MongoDB-wire test server a write conflict, retried until the scenario gave up)."""
    driver, registry = _SlowerThanTheInterval(), Registry()

    @registry.job(name="short")
    def short(payload: int) -> None:
        time.sleep(0.4)

    job = short.enqueue(1, driver=driver)
    worker = Worker(["default"], driver=driver, registry=registry, lease=1, heartbeat_interval=0.01,
                    poll_interval=0.01, rescue_interval=None, summary_interval=None).start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and driver.introspect.get(job.id).state is not JobState.DONE:
            time.sleep(0.01)
    finally:
        worker.stop(2.0)
    assert driver.introspect.get(job.id).state is JobState.DONE
    assert len(driver.calls) >= 5  # renewed all the while it ran
    pauses = [later[0] - earlier[1] for earlier, later in itertools.pairwise(driver.calls)]
    assert min(pauses) >= 0.008, [round(p, 4) for p in pauses]  # the interval, give or take the timer
