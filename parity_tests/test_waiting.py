"""Parity scenarios for rules A01-A04: waiting on a job's result.

``driver.wait(job_id, timeout=...)`` answers the job once it is finished; a finish wakes
the waiter (by the store's notification on drivers declaring ``finish_notify``, by
polling on the others); a timeout is a coded refusal that leaves the job alone; a bad
timeout is refused before anything is read or written.

A waiter runs on a thread of its own while the scenario settles the job from the main
thread. Timing is asserted only with generous bounds (far below the poll interval the
waiter was given, far above any plausible wake-up): the latency itself is measured by
``bench/wait_latency.py``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from jobcore.parity._support import LEASE, claim_one, finished_job, refused, state_of

from jobcore.clock import ManualClock
from jobcore.driver import JobDriver
from jobcore.errors import WaitTimeout
from jobcore.records import ClaimToken, Job, JobState

LONG_POLL = 60.0
"""``poll`` given to a waiter on a ``finish_notify`` driver: only a wake-up can answer it
before a minute has passed."""
SHORT_POLL = 0.2
"""``poll`` given to a waiter on a polling-only driver."""
PROMPT = 20.0
"""How soon (real seconds) after the finish a woken waiter must answer: a third of
:data:`LONG_POLL`, so a poll cannot pass for a wake-up, and far above any wake-up latency."""
SETTLE_AFTER = 0.5
"""Real seconds the scenario lets a waiter take its first read before it settles the job."""


class Waiter:
    """``driver.wait(job_id, **options)`` on a thread: its answer or error, and when it came."""

    def __init__(self, driver: JobDriver, job_id: str, **options: Any) -> None:
        self.answer: Job | None = None
        self.error: BaseException | None = None
        self.done_at: float | None = None
        self._thread = threading.Thread(target=self._run, args=(driver, job_id, options), daemon=True)
        self._thread.start()

    def _run(self, driver: JobDriver, job_id: str, options: dict[str, Any]) -> None:
        try:
            self.answer = driver.wait(job_id, **options)
        except BaseException as exc:  # handed to the scenario
            self.error = exc
        finally:
            self.done_at = time.monotonic()

    def result(self, timeout: float = 120.0) -> Job:
        """The job the wait answered (fails the scenario on an error or a hang)."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(f"wait still blocked after {timeout}s")
        if self.error is not None:
            raise self.error
        assert self.answer is not None
        return self.answer

    @property
    def waiting(self) -> bool:
        return self._thread.is_alive()


def poll_for(driver: JobDriver) -> float:
    """The ``poll`` a scenario gives: long on drivers woken by the store, short on the others."""
    return LONG_POLL if "finish_notify" in driver.capabilities else SHORT_POLL


# --- A01 ------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["done", "failed", "dead", "cancelled"])
def test_A01_a_finished_job_answers_at_once(driver: JobDriver, state: str) -> None:
    """wait on a job already finished answers it at once, as introspect.get reads it."""
    job = finished_job(driver, state, payload={"n": 1})
    started = time.monotonic()
    got = driver.wait(job.id, timeout=30)
    assert time.monotonic() - started < PROMPT
    assert got == driver.introspect.get(job.id)
    assert got.state is JobState(state)
    if state == "done":
        assert got.last_error is None
    else:
        assert got.last_error is not None


def test_A01_wait_answers_the_result_once_acked(driver: JobDriver) -> None:
    """A waiter blocked on a running job gets it back done, with the result the handler acked."""
    job = driver.enqueue("report", {"month": "2030-01"})
    token = claim_one(driver).token
    waiter = Waiter(driver, job.id, timeout=120, poll=poll_for(driver))
    time.sleep(SETTLE_AFTER)
    assert waiter.waiting
    acked = driver.ack(token, {"rows": 42, "url": "s3://reports/2030-01.csv"})
    got = waiter.result()
    assert got == acked == driver.introspect.get(job.id)
    assert (got.state, got.result) == (JobState.DONE, {"rows": 42, "url": "s3://reports/2030-01.csv"})


def test_A01_wait_answers_the_last_error_of_a_dead_job(driver: JobDriver) -> None:
    """A job that uses up its attempts answers dead, its last_error the final nack's."""
    job = driver.enqueue("report", max_attempts=1)
    token = claim_one(driver).token
    waiter = Waiter(driver, job.id, timeout=120, poll=poll_for(driver))
    time.sleep(SETTLE_AFTER)
    driver.nack(token, ValueError("no such month"))
    got = waiter.result()
    assert got.state is JobState.DEAD
    assert got.last_error is not None
    assert (got.last_error.type, got.last_error.message) == ("ValueError", "no such month")


def test_A01_a_retry_is_not_a_finish(driver: JobDriver, clock: ManualClock) -> None:
    """A nack with attempts left does not answer the waiter; the next attempt's ack does."""
    job = driver.enqueue("report", max_attempts=3)
    first = claim_one(driver).token
    waiter = Waiter(driver, job.id, timeout=120, poll=SHORT_POLL)
    time.sleep(SETTLE_AFTER)
    driver.nack(first, "try again")
    time.sleep(4 * SHORT_POLL)  # several polls read it scheduled
    assert waiter.waiting
    assert state_of(driver, job.id) is JobState.SCHEDULED
    clock.advance(seconds=1)
    second = claim_one(driver).token
    driver.ack(second, "second time lucky")
    got = waiter.result()
    assert (got.state, got.attempt, got.result) == (JobState.DONE, 2, "second time lucky")


@pytest.mark.parametrize("job_id", ["999999999", "0", "abc", "", "1" * 40])
def test_A01_unknown_id_refused(driver: JobDriver, job_id: str) -> None:
    """An id no job has is JC_JOB_NOT_FOUND at once (no waiting out the timeout)."""
    driver.enqueue("a")
    started = time.monotonic()
    with refused("JC_JOB_NOT_FOUND"):
        driver.wait(job_id, timeout=60)
    assert time.monotonic() - started < PROMPT


def test_A01_a_job_removed_while_waited_on_is_not_found(driver: JobDriver) -> None:
    """A live job removed while waited on answers JC_JOB_NOT_FOUND, not a timeout."""
    job = driver.enqueue("a", delay=3600)
    waiter = Waiter(driver, job.id, timeout=120, poll=SHORT_POLL)
    time.sleep(SETTLE_AFTER)
    assert driver.introspect.remove(job.id) is not None
    with refused("JC_JOB_NOT_FOUND"):
        waiter.result()


# --- A02 ------------------------------------------------------------------------------


def _ack(driver: JobDriver, clock: ManualClock, job: Job, token: ClaimToken | None) -> None:
    assert token is not None
    driver.ack(token, "ok")


def _fail(driver: JobDriver, clock: ManualClock, job: Job, token: ClaimToken | None) -> None:
    assert token is not None
    driver.nack(token, "bad input", fail=True)


def _dead(driver: JobDriver, clock: ManualClock, job: Job, token: ClaimToken | None) -> None:
    assert token is not None
    driver.nack(token, "out of attempts")


def _cancel(driver: JobDriver, clock: ManualClock, job: Job, token: ClaimToken | None) -> None:
    assert driver.introspect.cancel(job.id, "not needed") is not None


def _buried(driver: JobDriver, clock: ManualClock, job: Job, token: ClaimToken | None) -> None:
    """The lease of the final attempt lapses; the next claim buries the job (C08)."""
    clock.advance(LEASE + timedelta(seconds=1))
    assert [b.id for b in driver.claim(["waited"], worker_id="w2", lease=LEASE).buried] == [job.id]


FINISHES: dict[str, tuple[Callable[[JobDriver, ManualClock, Job, ClaimToken | None], None], JobState]] = {
    "ack": (_ack, JobState.DONE),
    "nack_fail": (_fail, JobState.FAILED),
    "nack_dead": (_dead, JobState.DEAD),
    "cancel": (_cancel, JobState.CANCELLED),
    "burial": (_buried, JobState.DEAD),
}


@pytest.mark.parametrize("how", sorted(FINISHES))
def test_A02_every_finish_wakes_the_waiter(driver: JobDriver, clock: ManualClock, how: str) -> None:
    """Each way a job finishes answers its waiter promptly (finish_notify: a 1 min poll, so only a wake-up can)."""
    settle, state = FINISHES[how]
    job = driver.enqueue("report", queue="waited", max_attempts=1)
    token = None if how == "cancel" else claim_one(driver, "waited").token
    waiter = Waiter(driver, job.id, timeout=120, poll=poll_for(driver))
    time.sleep(SETTLE_AFTER)
    assert waiter.waiting
    settled_at = time.monotonic()
    settle(driver, clock, job, token)
    got = waiter.result()
    assert waiter.done_at is not None
    assert waiter.done_at - settled_at < PROMPT
    assert got.state is state
    assert got == driver.introspect.get(job.id)


def test_A02_every_waiter_of_a_job_is_woken(driver: JobDriver) -> None:
    """An ack answers all three waiters of its job; a waiter of another job keeps waiting."""
    job = driver.enqueue("report", queue="waited")
    other = driver.enqueue("report", queue="other")
    token = claim_one(driver, "waited").token
    poll = poll_for(driver)
    waiters = [Waiter(driver, job.id, timeout=120, poll=poll) for _ in range(3)]
    bystander = Waiter(driver, other.id, timeout=120, poll=poll)
    time.sleep(SETTLE_AFTER)
    settled_at = time.monotonic()
    driver.ack(token, [1, 2, 3])
    answers = [w.result() for w in waiters]
    assert all(w.done_at is not None and w.done_at - settled_at < PROMPT for w in waiters)
    assert {(a.id, a.state, tuple(a.result)) for a in answers} == {(job.id, JobState.DONE, (1, 2, 3))}
    assert bystander.waiting
    driver.introspect.cancel(other.id)
    assert bystander.result().state is JobState.CANCELLED


def test_A02_polling_answers_without_wake_ups(driver: JobDriver) -> None:
    """With a short poll every driver answers once the job is done (the fallback all have)."""
    job = driver.enqueue("report")
    token = claim_one(driver).token
    waiter = Waiter(driver, job.id, timeout=120, poll=SHORT_POLL)
    time.sleep(SETTLE_AFTER)
    driver.ack(token, "polled")
    assert waiter.result().result == "polled"


# --- A03 ------------------------------------------------------------------------------


def test_A03_timeout_is_a_coded_error_that_leaves_the_job_alone(driver: JobDriver) -> None:
    """JC_WAIT_TIMEOUT (a TimeoutError naming the job); the job is as it was and still acks."""
    job = driver.enqueue("report")
    token = claim_one(driver).token
    before = driver.introspect.get(job.id)
    with refused("JC_WAIT_TIMEOUT") as info:
        driver.wait(job.id, timeout=0.3, poll=0.05)
    err = info.value
    assert isinstance(err, WaitTimeout)
    assert isinstance(err, TimeoutError)
    assert job.id in err.cause
    assert err.job == before
    assert driver.introspect.get(job.id) == before
    done = driver.ack(token, "late but fine")
    assert done is not None
    assert done.state is JobState.DONE


def test_A03_timeout_on_a_waiting_job_leaves_it_claimable(driver: JobDriver) -> None:
    """A ready job waited on in vain stays ready, and is claimed and acked as any other."""
    job = driver.enqueue("report")
    before = driver.introspect.get(job.id)
    started = time.monotonic()
    with refused("JC_WAIT_TIMEOUT"):
        driver.wait(job.id, timeout=timedelta(milliseconds=300))
    assert time.monotonic() - started >= 0.3
    assert driver.introspect.get(job.id) == before
    claimed = claim_one(driver)
    assert claimed.job.id == job.id
    assert driver.ack(claimed.token) is not None


def test_A03_a_second_wait_after_a_timeout_answers(driver: JobDriver) -> None:
    """Timing out leaves nothing behind that stops a later wait from answering."""
    job = driver.enqueue("report")
    token = claim_one(driver).token
    with refused("JC_WAIT_TIMEOUT"):
        driver.wait(job.id, timeout=0.2)
    driver.ack(token, "done now")
    assert driver.wait(job.id, timeout=30).result == "done now"


# --- A04 ------------------------------------------------------------------------------

BAD_DURATIONS: list[Any] = [
    0, -1, 0.0, -0.5, math.nan, math.inf, -math.inf, True, "10", None, [1],
    timedelta(0), timedelta(seconds=-1), timedelta(days=8), 10**9,
]


@pytest.mark.parametrize("timeout", BAD_DURATIONS, ids=repr)
def test_A04_bad_timeout_refused_before_anything(driver: JobDriver, timeout: Any) -> None:
    """A timeout not positive, finite, 1 ms to 7 days: JC_OPTION_INVALID before any lookup, nothing written."""
    job = driver.enqueue("report")
    token = claim_one(driver).token
    before = driver.introspect.get(job.id)
    with refused("JC_OPTION_INVALID") as info:
        driver.wait(job.id, timeout=timeout)
    assert "timeout" in info.value.cause
    with refused("JC_OPTION_INVALID"):
        driver.wait("999999999", timeout=timeout)
    assert driver.introspect.get(job.id) == before
    assert driver.ack(token) is not None


@pytest.mark.parametrize("poll", BAD_DURATIONS, ids=repr)
def test_A04_bad_poll_refused(driver: JobDriver, poll: Any) -> None:
    """``poll`` takes the same durations as ``timeout``; anything else is JC_OPTION_INVALID."""
    job = driver.enqueue("report")
    before = driver.introspect.get(job.id)
    with refused("JC_OPTION_INVALID") as info:
        driver.wait(job.id, timeout=1, poll=poll)
    assert "poll" in info.value.cause
    assert driver.introspect.get(job.id) == before


def test_A04_bounds_taken_exactly(driver: JobDriver) -> None:
    """1 ms and 7 days are both taken (a finished job answers at once whatever the timeout)."""
    job = finished_job(driver, "done")
    assert driver.wait(job.id, timeout=timedelta(milliseconds=1)).state is JobState.DONE
    assert driver.wait(job.id, timeout=timedelta(days=7), poll=timedelta(days=7)).state is JobState.DONE
    with refused("JC_OPTION_INVALID"):
        driver.wait(job.id, timeout=timedelta(days=7, milliseconds=1))


@pytest.mark.parametrize("job_id", [42, None, b"1", ["1"]], ids=repr)
def test_A04_an_id_that_is_not_text_refused(driver: JobDriver, job_id: Any) -> None:
    """A job id that is not a str is JC_OPTION_INVALID (a str no job has is JC_JOB_NOT_FOUND)."""
    driver.enqueue("report")
    with refused("JC_OPTION_INVALID"):
        driver.wait(job_id, timeout=1)
